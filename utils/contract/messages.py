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
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from crawlhive.utils.config.log import excerpt
from crawlhive.utils.process.kinds import stats_types
from crawlhive.utils.rules.domains import domain_of_host, host_problem, tenant_site
from crawlhive.utils.rules.patterns import PatternLimits, check_patterns
from crawlhive.utils.rules.proxy_pools import pools_from_settings

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

#: (cause message, JSON pointer) of a failed semantic check; pointer '' means the root.
Cause = tuple[str, str]


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
    def limits_check(cls, message: dict[str, Any], settings: Settings) -> Cause | None:
        """Checks bounded by settings, run after :meth:`semantic_check` passed (the cause, or None).

        For checks that cost CPU or memory in proportion to the request (compiling its patterns), so
        the limit is the operator's (docs/contract.md §2.7).
        """
        return None


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
        if message.get("render") and message.get("headers"):
            # The browser would carry them across redirects to other sites (§15); cookies are
            # scoped to the seed's host by the browser itself, so those are allowed.
            return message, ("headers cannot be sent with render: true (use cookie or cookies)", "/headers")
        return message, None

    @classmethod
    def limits_check(cls, message: dict[str, Any], settings: Settings) -> Cause | None:
        """The ``proxy_pool`` is a pool in force (§21.1); a ``recrawl`` is within its bounds (§19.1);
        every ``allow_regex`` / ``deny_regex`` / ``ban_regex`` pattern compiles with RE2 (what the crawler will
        match with, §10.4) within SCHEMA_REGEX_MAX_REPEAT, SCHEMA_REGEX_MAX_PROGRAM and, all
        together, SCHEMA_REGEX_MAX_TOTAL_PROGRAM (:func:`~crawlhive.utils.rules.patterns.check_patterns`)."""
        if message.get("proxy_pool"):
            pools = pools_from_settings(settings)
            refused = pools.refused(message["proxy_pool"]) or pools.unknown(message["proxy_pool"])
            if refused is not None:
                return refused, "/proxy_pool"
        if message.get("render"):
            through = _rendered_through_proxy(message, settings)
            if through is not None:
                return through, "/render"
        recrawl = message.get("recrawl")
        if recrawl is not None:  # §19.1: bounds from RECRAWL_MIN_EVERY, then the defaults filled in
            # imported here: the frontier package imports the contract (its dead-letter builders)
            from crawlhive.utils.frontier.recrawl import RecrawlConfig, check_recrawl

            min_every = settings.RECRAWL_MIN_EVERY
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
        return check_patterns(fields, PatternLimits.from_settings(settings))


def _rendered_through_proxy(message: dict[str, Any], settings: Settings) -> str | None:
    """Why a ``render: true`` seed cannot be crawled: its pages would go through a proxy pool (its
    ``proxy_pool``, the operator's pool of its domain, PROXY_POOL_DEFAULT), which the browser does
    not (§15, §21.1); a rendered page is refused rather than fetched directly. None: it may."""
    if message.get("proxy_pool"):
        return "render: true cannot be sent with proxy_pool (rendered pages do not go through proxies)"
    if not (settings.PROXY_POOLS or settings.PROXY_POOLS_FILE):
        return None
    pools = pools_from_settings(settings)
    host = urlsplit(message["url"]).hostname or ""
    pool = pools.pin(domain_of_host(host), tenant_site(host)) or pools.default
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
    def load_schema(cls) -> dict[str, Any]:
        """The schema with the ``stats`` types of the registered process kinds
        (:func:`~crawlhive.utils.process.kinds.stats_types`) besides those it names."""
        schema = copy.deepcopy(super().load_schema())
        types = schema["properties"]["stats"]["enum"]
        schema["properties"]["stats"]["enum"] = [*types, *(t for t in stats_types() if t not in types)]
        return schema


class DomainConfigRequest(MessageKind):
    """domain-update, domain-remove, blacklist-update, blacklist-remove (docs/contract.md §2.5)."""

    kind = "domain-config"
    name = "DomainConfigHandler"
    schema_file = "schemas/domain_config.json"

    @classmethod
    def semantic_check(cls, message: dict[str, Any]) -> tuple[dict[str, Any], Cause | None]:
        raw = message["domain"]
        # Before any IDNA step: encoding a huge host costs the square of its length (1 MB: 4 s).
        problem = host_problem(raw)
        if problem is not None:
            return message, (problem, "/domain")
        domain = "" if any(c in raw for c in "/?#@ \t\r\n") else domain_of_host(raw)
        if not domain:
            return message, (f"{excerpt(raw)} is not a valid domain", "/domain")
        message["domain"] = domain
        return message, None

    @classmethod
    def limits_check(cls, message: dict[str, Any], settings: Settings) -> Cause | None:
        """A ``domain-update``'s ``proxy_pool`` is accepted only with PROXY_POOL_DOMAIN_UPDATES (a
        domain's pool is the operator's otherwise: PROXY_DOMAIN_POOLS), names a pool a request may
        name (PROXY_CLIENT_POOLS) and a pool in force (§21.1)."""
        if not message.get("proxy_pool"):
            return None
        if message.get("action") != "domain-update":
            return "proxy_pool belongs to domain-update only", "/proxy_pool"
        if not settings.PROXY_POOL_DOMAIN_UPDATES:
            reason = "a domain's proxy pool is set by the operator (PROXY_DOMAIN_POOLS), not by domain-update"
            return f"{reason} (PROXY_POOL_DOMAIN_UPDATES is off)", "/proxy_pool"
        pools = pools_from_settings(settings)
        problem = pools.refused(message["proxy_pool"]) or pools.unknown(message["proxy_pool"])
        return None if problem is None else (problem, "/proxy_pool")


#: The built-in plugins of the kafka-monitor and their ranks (docs/contract.md §2.1); PLUGINS /
#: KAFKA_MONITOR_PLUGINS merge over this. The paths are names (the monitor loads them); the
#: contract knows the kind each one validates, so a validator needs no kafka-monitor import.
BUILTIN_PLUGINS: dict[str, int] = {
    "crawlhive.kafka_monitor.plugins.crawl.ScraperHandler": 100,
    "crawlhive.kafka_monitor.plugins.action.ActionHandler": 200,
    "crawlhive.kafka_monitor.plugins.stats.StatsHandler": 300,
    "crawlhive.kafka_monitor.plugins.domain_config.DomainConfigHandler": 400,
}
#: The kind each built-in plugin validates.
BUILTIN_KINDS: dict[str, type[MessageKind]] = dict(
    zip(BUILTIN_PLUGINS, (CrawlRequest, ActionRequest, StatsRequest, DomainConfigRequest), strict=True)
)
