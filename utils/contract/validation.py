"""Validation of incoming requests (docs/contract.md §2.1): parse, match a kind's schema, semantic checks.

This is the one source of truth for what the cluster accepts: the kafka-monitor, ``POST /feed``,
Redis-only mode and ``crawlhive feed`` all validate through :class:`RequestValidator`, built from
the same plugin map and the same limit settings (§2.7), so they can never disagree
(:func:`crawlhive.utils.process.intake.request_validator` builds it from a process's settings).
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator, ValidationError
from jsonschema.exceptions import best_match
from jsonschema.validators import extend

from crawlhive.utils.contract.encoding import parse_json
from crawlhive.utils.contract.messages import MessageKind, RequestLimits
from crawlhive.utils.contract.text import EXCERPT_CHARS, excerpt, printable

if TYPE_CHECKING:
    from collections.abc import Sequence

#: Schema errors of a rejected request among which the reported one is chosen (the first ones).
ERRORS_CONSIDERED = 64
DOMAIN_CONFIG_ACTIONS = frozenset({"domain-update", "domain-remove", "blacklist-update", "blacklist-remove"})


@dataclass(frozen=True)
class Accepted:
    """A request one plugin will handle: *message* has its schema defaults filled in."""

    plugin: type[MessageKind]
    message: dict[str, Any]


@dataclass(frozen=True)
class Rejected:
    """A request nobody handles; *reason* is the dead-letter ``error`` text (docs/contract.md §6)."""

    reason: str


def format_cause(kind: str, message: str, pointer: str = "") -> str:
    """``<kind>: <message>`` plus `` (at <pointer>)`` when the error is not at the root."""
    return f"{kind}: {message}" + (f" (at {pointer})" if pointer else "")


def json_pointer(path: Sequence[Any]) -> str:
    """RFC 6901 pointer of a jsonschema error path ('' for the root); a client's key in it (a header
    name) is cut to EXCERPT_CHARS characters and its control characters escaped, for a reason."""
    tokens = (str(p) for p in path)
    return "".join(
        "/" + printable(t if len(t) <= EXCERPT_CHARS else t[:EXCERPT_CHARS] + "…").replace("~", "~0").replace("/", "~1")
        for t in tokens
    )


def _comparable(value: Any) -> Any:
    """A hashable stand-in for a JSON value, equal exactly when the JSON values are equal (numbers
    by value, so ``1`` equals ``1.0``; booleans apart from numbers; objects regardless of order)."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("a", tuple(_comparable(v) for v in value))
    if isinstance(value, dict):
        return ("o", frozenset((k, _comparable(v)) for k, v in value.items()))
    return ("z", None)


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Any:
    """``uniqueItems`` in time linear in the array's size.

    jsonschema's own check falls back to comparing every pair when items cannot be sorted (mixed
    types, lists, objects): a 40 KB array then took minutes, and a kafka-monitor partition stalled
    behind it (docs/contract.md §10.3). Hashing a canonical form of each item is linear.
    """
    if not unique or not validator.is_type(instance, "array"):
        return
    if _over_size_limit(instance, schema):
        return  # maxItems rejects it already: no need to look at every item
    if all(type(item) is str for item in instance):  # the usual case, at C speed
        if len(set(instance)) != len(instance):
            yield ValidationError(f"{excerpt(instance)} has non-unique elements")
        return
    seen: set[Any] = set()
    try:
        for item in instance:
            key = _comparable(item)
            if key in seen:
                yield ValidationError(f"{excerpt(instance)} has non-unique elements")
                return
            seen.add(key)
    except RecursionError:
        yield ValidationError("items are nested too deeply to compare")


#: Fields whose values may be credentials: a rejection names the rule, never quotes the value
#: (a header's or cookie's name may be quoted, it is not secret).
SECRET_FIELDS = frozenset({"headers", "cookies", "cookie", "body"})
#: Longest message of a schema error kept (jsonschema's own messages quote schema values too).
MAX_MESSAGE_CHARS = 300


def describe_error(error: ValidationError) -> str:
    """The reason of a schema *error* without the offending value in full (docs/contract.md §6):
    the rule, and at most a short excerpt of the value with its control characters escaped
    (:func:`~crawlhive.utils.contract.text.excerpt`); a secret field's value (:data:`SECRET_FIELDS`) is
    shown as ``value``. jsonschema's messages quote the whole value (``'<1 MB>' is too long``)."""
    path = list(error.absolute_path)
    # a header's or cookie's name is not secret, its value is
    secret = bool(path) and path[0] in SECRET_FIELDS and "propertyNames" not in error.absolute_schema_path
    message = error.message
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        extras = [k for k in itertools.islice(error.instance, 1000) if k not in known]
        names = ", ".join(excerpt(k) for k in extras[:3]) + (", …" if len(extras) > 3 else "")
        return f"Additional properties are not allowed ({names} {'was' if len(extras) == 1 else 'were'} unexpected)"
    shown = "value" if secret else excerpt(error.instance)
    quoted = _quoted(error.instance)
    if quoted is not None and message.startswith(quoted):
        message = shown + message[len(quoted) :]
    elif secret or quoted is None:
        message = f"{shown} is not valid ({error.validator})"
    message = printable(message)
    return message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS] + "…"


def _quoted(instance: Any) -> str | None:
    """How jsonschema quotes *instance* at the start of its messages (``repr``; None if too deep)."""
    try:
        return repr(instance)
    except RecursionError:
        return None


def _max_json_bytes(validator: Any, limit: Any, instance: Any, schema: Any) -> Any:
    """``maxJsonBytes`` (ours): the value, written as compact JSON, is at most *limit* bytes."""
    try:
        size = len(json.dumps(instance, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
    except (ValueError, TypeError, RecursionError):
        yield ValidationError("is not serialisable as JSON")
        return
    if size > limit:
        yield ValidationError(f"is {size} bytes as JSON, more than the maximum of {limit}")


def _over_size_limit(instance: Any, schema: Any) -> bool:
    """Whether *instance* has more entries than its schema's ``maxItems`` / ``maxProperties``."""
    if isinstance(instance, list):
        limit = schema.get("maxItems")
    elif isinstance(instance, dict):
        limit = schema.get("maxProperties")
    else:
        return False
    return isinstance(limit, int) and len(instance) > limit


def _unless_oversized(keyword: Any) -> Any:
    """*keyword* skipped for a container over its size limit, which ``maxItems`` / ``maxProperties``
    rejects anyway: a request cannot make validation look at 100,000 entries one by one."""

    def check(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if _over_size_limit(instance, schema):
            return None
        return keyword(validator, value, instance, schema)

    return check


@functools.lru_cache(maxsize=256)
def _search_pattern(pattern: str) -> re.Pattern[str]:
    """*pattern* compiled with a final ``$`` meaning the end of the text, as in ECMA-262 (the regex
    dialect of JSON Schema): Python's ``$`` also matches before a final newline, so
    ``^[^\\r\\n]*$`` accepted ``"v\\n"`` (a header value ending in a newline, an id forging a log line)."""
    body = pattern[:-1]
    if pattern.endswith("$") and (len(body) - len(body.rstrip("\\"))) % 2 == 0:  # an unescaped $
        pattern = body + "\\Z"
    return re.compile(pattern)


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Any:
    """``pattern`` with ECMA-262's ``$`` (:func:`_search_pattern`)."""
    if validator.is_type(instance, "string") and not _search_pattern(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_PER_ENTRY = ("items", "prefixItems", "contains", "propertyNames", "additionalProperties", "patternProperties")
#: Draft 2020-12 with a linear-time ``uniqueItems``, per-entry keywords skipped for oversized
#: containers, and our ``maxJsonBytes`` keyword.
SchemaValidator = extend(
    Draft202012Validator,
    validators={
        **{name: _unless_oversized(Draft202012Validator.VALIDATORS[name]) for name in _PER_ENTRY},
        "uniqueItems": _unique_items,
        "pattern": _pattern,
        "maxJsonBytes": _max_json_bytes,
    },
)


class RequestValidator:
    """Decides, for any incoming value, which plugin handles it or why it is rejected."""

    def __init__(self, plugins: Sequence[type[MessageKind]], limits: RequestLimits) -> None:
        if not plugins:
            raise ValueError("RequestValidator needs at least one plugin")
        self.plugins = list(plugins)
        self.limits = limits
        self.schemas = {cls: cls.schema(limits) for cls in self.plugins}
        self._validators = {cls: SchemaValidator(schema) for cls, schema in self.schemas.items()}
        #: The spider types requests may name; empty = any (docs/contract.md §11).
        self.spider_ids = limits.spider_ids

    def validate(self, value: Any) -> Accepted | Rejected:
        """Match *value* (parsed JSON) against the plugins in rank order (docs/contract.md §2.1 steps 2-6)."""
        if not isinstance(value, dict):
            return Rejected("Invalid request: request must be a JSON object")
        for plugin in self.plugins:
            if self._validators[plugin].is_valid(value):
                message, cause = plugin.semantic_check(dict(value))
                if cause is None:
                    cause = plugin.limits_check(message, self.limits)
                if cause is not None:
                    return Rejected(f"Invalid request: {format_cause(plugin.kind, cause[0], cause[1])}")
                message = self._fill_defaults(plugin, message)
                spiderid = message.get("spiderid")
                if self.spider_ids and isinstance(spiderid, str) and spiderid not in self.spider_ids:
                    return Rejected(
                        f"Invalid request: {plugin.kind}: {excerpt(spiderid)} is not a known spider (SPIDER_IDS)"
                    )
                return Accepted(plugin, message)
        closest = self._closest(value)
        # The first errors only: a huge array can have one error per item (§10.3, linear time).
        error = best_match(itertools.islice(self._validators[closest].iter_errors(value), ERRORS_CONSIDERED))
        pointer = json_pointer(error.absolute_path) if error is not None else ""
        text = describe_error(error) if error is not None else "does not match"
        return Rejected(f"Invalid request: {format_cause(closest.kind, text, pointer)}")

    def validate_raw(self, raw: bytes | str | None) -> Accepted | Rejected:
        """Parse then :meth:`validate`."""
        value, error = parse_json(raw)
        if error is not None:
            return Rejected(error)
        return self.validate(value)

    def _fill_defaults(self, plugin: type[MessageKind], message: dict[str, Any]) -> dict[str, Any]:
        for name, prop in self.schemas[plugin].get("properties", {}).items():
            if name not in message and "default" in prop:
                message[name] = prop["default"]
        return message

    def _closest(self, value: dict[str, Any]) -> type[MessageKind]:
        """The kind a rejected message was most likely meant to be (docs/contract.md §2.1 step 6)."""
        if "url" in value:
            kind = "crawl"
        elif isinstance(value.get("action"), str) and value["action"] in DOMAIN_CONFIG_ACTIONS:
            kind = "domain-config"
        elif "action" in value:
            kind = "action"
        elif "stats" in value or set(value) <= {"uuid", "appid"}:
            kind = "stats"
        else:
            kind = "crawl"
        return next((p for p in self.plugins if p.kind == kind), self.plugins[0])
