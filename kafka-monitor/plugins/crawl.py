"""Crawl requests (docs/contract.md §2.2): seeds into the Redis frontier."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

from crawlhive.kafka_monitor.plugins import Cause, Incoming, IncomingPlugin
from crawlhive.utils.control import ORIGIN_MARKER_TTL_S
from crawlhive.utils.domains import host_problem
from crawlhive.utils.frontier import Frontier, seed_from_request
from crawlhive.utils.log import excerpt
from crawlhive.utils.patterns import PatternLimits, check_patterns
from crawlhive.utils.proxies import pools_from_settings

if TYPE_CHECKING:
    from redis.client import Pipeline

    from crawlhive.kafka_monitor.monitor import KafkaMonitor
    from crawlhive.utils.settings import Settings

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


class ScraperHandler(IncomingPlugin):
    """Queues each crawl request as a seed in its spider's per-domain frontier."""

    kind = "crawl"
    name = "ScraperHandler"
    schema_file = "crawl.json"

    def __init__(self, frontier: Frontier) -> None:
        self.frontier = frontier

    @classmethod
    def from_monitor(cls, monitor: KafkaMonitor) -> Self:
        return cls(Frontier.from_settings(monitor.redis, monitor.settings))

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
        """The ``proxy_pool`` is a pool in force (§21.1); every ``allow_regex`` / ``deny_regex`` /
        ``ban_regex`` pattern compiles with RE2 (what the crawler will
        match with, §10.4) within SCHEMA_REGEX_MAX_REPEAT, SCHEMA_REGEX_MAX_PROGRAM and, all
        together, SCHEMA_REGEX_MAX_TOTAL_PROGRAM (:func:`~crawlhive.utils.patterns.check_patterns`)."""
        if message.get("proxy_pool"):
            unknown = pools_from_settings(settings).unknown(message["proxy_pool"])
            if unknown is not None:
                return unknown, "/proxy_pool"
        fields = {field: message.get(field) for field in ("allow_regex", "deny_regex", "ban_regex")}
        if not any(fields.values()):
            return None
        return check_patterns(fields, PatternLimits.from_settings(settings))

    def handle(self, requests: list[Incoming], pipe: Pipeline) -> None:
        """Queue the seeds of *requests* whose Kafka record was never queued before.

        A record's seed is queued together with a marker of its origin (same ``MULTI``), so a
        redelivered record finds the marker and queues nothing, even when its seed was crawled
        meanwhile (``ZADD NX`` alone would queue it again, and its links after it). One round trip
        reads the markers first; a deliberate resubmission is a new record, so it is queued.
        """
        keys = self.frontier.keys
        seeds = [seed_from_request(r.message, r.origin) for r in requests]
        # the marker is in the seed's frontier shard, beside its queue (one slot on a cluster)
        markers = [
            keys.seed_origin(r.origin, keys.shard_of(seed.domain)) for r, seed in zip(requests, seeds, strict=True)
        ]
        pipe_read = self.frontier.redis.pipeline(transaction=False)
        for marker in markers:
            pipe_read.get(marker)
        queued_before = pipe_read.execute() if markers else []
        fresh = [(s, m) for s, m, before in zip(seeds, markers, queued_before, strict=True) if before is None]
        for _, marker in fresh:
            pipe.set(marker, b"1", ex=ORIGIN_MARKER_TTL_S)
        self.frontier.push([seed for seed, _ in fresh], pipe)
