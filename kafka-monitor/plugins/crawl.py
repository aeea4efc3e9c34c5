"""Crawl requests (API.md §2.2): seeds into the Redis frontier."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

from crawlhive.kafka_monitor.plugins import Cause, Incoming, IncomingPlugin
from crawlhive.utils.frontier import Frontier, seed_from_request

if TYPE_CHECKING:
    from redis.client import Pipeline

    from crawlhive.kafka_monitor.monitor import KafkaMonitor

_HAS_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


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
            return message, (f"{message['url']!r} is not an absolute http(s) URL", "/url")
        message["url"] = url
        for field in ("allow_regex", "deny_regex"):
            for i, pattern in enumerate(message.get(field) or []):
                try:
                    re.compile(pattern)
                except (re.error, RecursionError, OverflowError) as exc:
                    return message, (f"invalid regular expression: {exc}", f"/{field}/{i}")
        return message, None

    def handle(self, requests: list[Incoming], pipe: Pipeline) -> None:
        seeds = [seed_from_request(r.message, r.origin) for r in requests]
        self.frontier.push(seeds, pipe)
