"""The kinds of incoming request (docs/contract.md §2.1): each names its JSON Schema and its checks.

A kind is the validation half of a kafka-monitor plugin: what a request must look like, never what
is done with it. The kafka-monitor's plugins (:mod:`crawlhive.kafka_monitor.plugins`) subclass these
and add the Redis writes; REST, Redis-only mode and ``crawlhive feed`` validate with the kinds alone,
so no process needs the kafka-monitor (or Redis) to know what the cluster accepts.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, ClassVar
from urllib.parse import urlsplit

from crawlhive.utils.contract.hosts import host_problem
from crawlhive.utils.contract.recrawl import RecrawlConfig, check_recrawl
from crawlhive.utils.contract.text import excerpt

#: (cause message, JSON pointer) of a failed semantic check; pointer '' means the root.
Cause = tuple[str, str]


@dataclass(frozen=True, kw_only=True)
class RequestLimits:
    """What a request is checked against beyond its kind's own rules: the operator's limits
    (docs/contract.md §2.7) as plain values, and the cluster's rules the contract does not own,
    passed in by the process that validates (built from its settings and the registry by
    :func:`crawlhive.utils.process.intake.request_limits`).

    Attributes:
        schema_values: the value of each ``"$SETTING"`` placeholder of the kinds' schemas
            (``SCHEMA_PRIORITY_MAX``: 100); a placeholder without one raises KeyError.
        spider_ids: the spider types requests may name; empty: any (SPIDER_IDS, §11).
        stats_types: ``stats`` types besides those the stats schema names (the process kinds of
            the registry, §4.7).
        recrawl_min_every: the smallest ``recrawl.every`` (RECRAWL_MIN_EVERY, §19.1).
        check_patterns: why a crawl's ``allow_regex`` / ``deny_regex`` / ``ban_regex`` (field ->
            list or None) cannot be compiled within SCHEMA_REGEX_* (§10.4), or None.
        domain_of: the registered domain of a host, '' if it has none (§3.2): what a
            domain-config's ``domain`` is normalised to.
        pool_problem: why a request may not name a proxy pool (unknown, or not one a request may
            name: PROXY_POOLS, PROXY_CLIENT_POOLS, §21.1), or None.
        render_pool: the pool a host's pages go through by the operator's settings (its domain's
            pool, PROXY_POOL_DEFAULT), or None.
        pool_domain_updates: a ``domain-update`` may set a ``proxy_pool`` (PROXY_POOL_DOMAIN_UPDATES).
    """

    schema_values: Mapping[str, Any]
    spider_ids: frozenset[str]
    stats_types: tuple[str, ...]
    recrawl_min_every: int
    check_patterns: Callable[[dict[str, Any]], Cause | None]
    domain_of: Callable[[str], str]
    pool_problem: Callable[[str], str | None]
    render_pool: Callable[[str], str | None]
    pool_domain_updates: bool


class MessageKind:
    """One kind of incoming request: its JSON Schema and the checks a schema cannot express.

    Subclasses set :attr:`kind`, :attr:`name` and :attr:`schema_file` and may override :meth:`semantic_check`
    and :meth:`limits_check`.
    """

    kind: ClassVar[str]
    """Kind used in rejection causes: ``crawl``, ``action``, ``stats`` or ``domain-config``."""
    name: ClassVar[str]
    """Name of its kafka-monitor plugin, under which stats count the requests of the kind
    (``plugin:ScraperHandler``, docs/contract.md §4); REST maps the counters back to kinds with it."""
    schema_file: ClassVar[str]
    """File name of its JSON Schema, relative to the package of the module of the class that sets it."""

    @classmethod
    def load_schema(cls) -> dict[str, Any]:
        """The kind's schema as written (limits still as ``"$SETTING"`` placeholders)."""
        owner = next(klass for klass in cls.__mro__ if "schema_file" in vars(klass))
        return _read_schema(owner.__module__.rpartition(".")[0], cls.schema_file)

    @classmethod
    def semantic_check(cls, message: dict[str, Any]) -> tuple[dict[str, Any], Cause | None]:
        """Checks the schema cannot express (docs/contract.md §2.6), run on a schema-valid message.

        Returns:
            The message, possibly normalised (e.g. ``http://`` prepended), and None; or the
            message and the cause that rejects it.
        """
        return message, None

    @classmethod
    def schema(cls, limits: RequestLimits) -> dict[str, Any]:
        """The schema a request is validated with: :meth:`load_schema` with every ``"$SETTING"``
        placeholder replaced by its value in *limits*."""
        schema: dict[str, Any] = apply_limits(cls.load_schema(), limits.schema_values)
        return schema

    @classmethod
    def limits_check(cls, message: dict[str, Any], limits: RequestLimits) -> Cause | None:
        """Checks bounded by *limits*, run after :meth:`semantic_check` passed (the cause, or None).

        For checks that cost CPU or memory in proportion to the request (compiling its patterns), so
        the limit is the operator's (docs/contract.md §2.7), and for those that need the cluster's
        rules (its proxy pools, its domain bucketing).
        """
        return None


def apply_limits(schema: Any, values: Mapping[str, Any]) -> Any:
    """A copy of *schema* with every ``"$SETTING"`` string replaced by its value in *values*."""
    if isinstance(schema, dict):
        return {k: apply_limits(v, values) for k, v in schema.items()}
    if isinstance(schema, list):
        return [apply_limits(v, values) for v in schema]
    if isinstance(schema, str) and schema.startswith("$") and schema[1:].isupper():
        return values[schema[1:]]
    return schema


def schema_placeholders(schema: Any) -> set[str]:
    """The settings named by ``"$SETTING"`` placeholders in *schema* (what :func:`apply_limits` needs)."""
    if isinstance(schema, dict):
        return set().union(*(schema_placeholders(v) for v in schema.values()))
    if isinstance(schema, list):
        return set().union(*(schema_placeholders(v) for v in schema))
    if isinstance(schema, str) and schema.startswith("$") and schema[1:].isupper():
        return {schema[1:]}
    return set()


@cache
def _read_schema(package: str, file_name: str) -> dict[str, Any]:
    text = resources.files(package).joinpath(file_name).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


_HAS_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: Request headers a crawl may not set (docs/contract.md §10.2): they would re-route the request,
#: forge its origin or break its framing. Compared case-insensitively.
FORBIDDEN_HEADERS = frozenset(
    {"host", "forwarded", "connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "content-length"}
)
#: Header name prefixes a crawl may not set (``X-Forwarded-For``, ``Proxy-Authorization``, …).
FORBIDDEN_HEADER_PREFIXES = ("x-forwarded-", "proxy-")


def forbidden_header(name: str) -> bool:
    """Whether a crawl's ``headers`` may not hold *name*."""
    lowered = name.lower()
    return lowered in FORBIDDEN_HEADERS or lowered.startswith(FORBIDDEN_HEADER_PREFIXES)


def json_pointer_token(name: str) -> str:
    """*name* escaped as one RFC 6901 token."""
    return name.replace("~", "~0").replace("/", "~1")


def normalise_url(url: str) -> str | None:
    """*url* with ``http://`` prepended when it has no scheme; None unless absolute http(s) with a host."""
    candidate = url if _HAS_SCHEME.match(url) else f"http://{url}"
    try:
        parts = urlsplit(candidate)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    if any(c in candidate for c in "\r\n\t ") or any(ord(c) < 32 for c in candidate):
        return None
    return candidate


class CrawlRequest(MessageKind):
    """A crawl request (docs/contract.md §2.2)."""

    kind = "crawl"
    name = "ScraperHandler"
    schema_file = "schemas/crawl.json"

    @classmethod
    def semantic_check(cls, message: dict[str, Any]) -> tuple[dict[str, Any], Cause | None]:
        url = normalise_url(message["url"])
        if url is None:
            return message, (f"{excerpt(message['url'])} is not an absolute http(s) URL", "/url")
        # Before any IDNA step (the frontier buckets the seed by its registered domain): encoding
        # a huge host costs the square of its length.
        problem = host_problem(urlsplit(url).hostname or "")
        if problem is not None:
            return message, (problem, "/url")
        message["url"] = url
        for i, domain in enumerate(message.get("allowed_domains") or []):
            problem = host_problem(domain)
            if problem is not None:
                return message, (problem, f"/allowed_domains/{i}")
        for name in message.get("headers") or {}:
            if forbidden_header(name):
                return message, (f"header {excerpt(name)} is not allowed", "/headers/" + json_pointer_token(name))
        fetch = message.get("fetch")
        if fetch == "render":  # one way to say it to the frontier, which queues by render (§25)
            message["render"] = True
        elif fetch is not None and message.get("render"):
            return message, (f"fetch: {fetch} and render: true disagree (render is fetch: render)", "/fetch")
        if message.get("render") and message.get("headers"):
            # The browser would carry them across redirects to other sites (§15); cookies are
            # scoped to the seed's host by the browser itself, so those are allowed.
            return message, ("headers cannot be sent with render: true (use cookie or cookies)", "/headers")
        return message, None

    @classmethod
    def limits_check(cls, message: dict[str, Any], limits: RequestLimits) -> Cause | None:
        """The ``proxy_pool`` is a pool in force (§21.1); a ``recrawl`` is within its bounds (§19.1);
        every ``allow_regex`` / ``deny_regex`` / ``ban_regex`` pattern compiles with RE2 (what the crawler will
        match with, §10.4) within SCHEMA_REGEX_MAX_REPEAT, SCHEMA_REGEX_MAX_PROGRAM and, all
        together, SCHEMA_REGEX_MAX_TOTAL_PROGRAM (:attr:`RequestLimits.check_patterns`)."""
        if message.get("proxy_pool"):
            refused = limits.pool_problem(message["proxy_pool"])
            if refused is not None:
                return refused, "/proxy_pool"
        if message.get("render"):
            through = _rendered_through_proxy(message, limits)
            if through is not None:
                return through, "/render"
        recrawl = message.get("recrawl")
        if recrawl is not None:  # §19.1: bounds from RECRAWL_MIN_EVERY, then the defaults filled in
            min_every = limits.recrawl_min_every
            problem = check_recrawl(recrawl, min_every)
            if problem is not None:
                return problem
            config = RecrawlConfig.of(recrawl, int(message.get("priority") or 1), min_every)
            message["recrawl"] = {
                "every": config.every,
                "adaptive": config.adaptive,
                "min": min(config.min, config.every),
                "max": max(config.max, config.every),
                "until": config.until,
            }
        fields = {field: message.get(field) for field in ("allow_regex", "deny_regex", "ban_regex")}
        if not any(fields.values()):
            return None
        return limits.check_patterns(fields)


def _rendered_through_proxy(message: dict[str, Any], limits: RequestLimits) -> str | None:
    """Why a ``render: true`` seed cannot be crawled: its pages would go through a proxy pool (its
    ``proxy_pool``, the operator's pool of its domain, PROXY_POOL_DEFAULT), which the browser does
    not (§15, §21.1); a rendered page is refused rather than fetched directly. None: it may."""
    if message.get("proxy_pool"):
        return "render: true cannot be sent with proxy_pool (rendered pages do not go through proxies)"
    pool = limits.render_pool(urlsplit(message["url"]).hostname or "")
    if not pool:
        return None
    return (
        f"render: true cannot be crawled here: its pages go through proxy pool {pool} "
        "(PROXY_DOMAIN_POOLS or PROXY_POOL_DEFAULT), and rendered pages do not go through proxies"
    )


class ActionRequest(MessageKind):
    """``info`` and ``stop`` (docs/contract.md §2.3)."""

    kind = "action"
    name = "ActionHandler"
    schema_file = "schemas/action.json"


class StatsRequest(MessageKind):
    """Stats of one type, or all (docs/contract.md §2.4)."""

    kind = "stats"
    name = "StatsHandler"
    schema_file = "schemas/stats.json"

    @classmethod
    def schema(cls, limits: RequestLimits) -> dict[str, Any]:
        """The schema with the ``stats`` types of *limits* (those of the registered process kinds,
        :func:`~crawlhive.utils.process.kinds.stats_types`) besides those it names."""
        schema = copy.deepcopy(super().schema(limits))
        types = schema["properties"]["stats"]["enum"]
        schema["properties"]["stats"]["enum"] = [*types, *(t for t in limits.stats_types if t not in types)]
        return schema


class DomainConfigRequest(MessageKind):
    """domain-update, domain-remove, blacklist-update, blacklist-remove (docs/contract.md §2.5)."""

    kind = "domain-config"
    name = "DomainConfigHandler"
    schema_file = "schemas/domain_config.json"

    @classmethod
    def semantic_check(cls, message: dict[str, Any]) -> tuple[dict[str, Any], Cause | None]:
        # Before any IDNA step: encoding a huge host costs the square of its length (1 MB: 4 s).
        problem = host_problem(message["domain"])
        if problem is not None:
            return message, (problem, "/domain")
        return message, None

    @classmethod
    def limits_check(cls, message: dict[str, Any], limits: RequestLimits) -> Cause | None:
        """The ``domain`` is normalised to its registered domain (§3.2, :attr:`RequestLimits.domain_of`).
        A ``domain-update``'s ``proxy_pool`` is accepted only with PROXY_POOL_DOMAIN_UPDATES (a
        domain's pool is the operator's otherwise: PROXY_DOMAIN_POOLS), names a pool a request may
        name (PROXY_CLIENT_POOLS) and a pool in force (§21.1)."""
        raw = message["domain"]
        domain = "" if any(c in raw for c in "/?#@ \t\r\n") else limits.domain_of(raw)
        if not domain:
            return f"{excerpt(raw)} is not a valid domain", "/domain"
        message["domain"] = domain
        if not message.get("proxy_pool"):
            return None
        if message.get("action") != "domain-update":
            return "proxy_pool belongs to domain-update only", "/proxy_pool"
        if not limits.pool_domain_updates:
            reason = "a domain's proxy pool is set by the operator (PROXY_DOMAIN_POOLS), not by domain-update"
            return f"{reason} (PROXY_POOL_DOMAIN_UPDATES is off)", "/proxy_pool"
        problem = limits.pool_problem(message["proxy_pool"])
        return None if problem is None else (problem, "/proxy_pool")
