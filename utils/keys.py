"""Every Redis key crawlhive uses: its format, its Redis type, what it holds, and its parser.

Call sites never build a key by hand: they hold a :class:`Keys` (built once from the setting
``REDIS_KEY_PREFIX``) and call the method for the key they need. ``docs/redis-keys.md`` is generated
from this module (``python -m crawlhive.utils.keys``) and a test checks that it is current.

Key parts are joined with ``:``. A part that may itself contain ``:`` (a domain such as the IPv6
literal ``::1``, a throttle key) always comes last, so parsers split from the left with a bounded
count. Spider names, appids and crawlids never contain ``:`` (the schemas of API.md §2 do not
forbid it, so the kafka-monitor rejects such ids before they reach Redis).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from crawlhive.utils.errors import KeyFormatError

F = TypeVar("F", bound=Callable[..., str])


@dataclass(frozen=True)
class KeyDoc:
    """One row of docs/redis-keys.md."""

    pattern: str
    redis_type: str
    ttl: str
    doc: str


def key(redis_type: str, ttl: str = "none") -> Callable[[F], F]:
    """Mark a :class:`Keys` method as a key format, for the generated documentation."""

    def mark(func: F) -> F:
        func._redis_type = redis_type  # type: ignore[attr-defined]
        func._ttl = ttl  # type: ignore[attr-defined]
        return func

    return mark


class Keys:
    """The key formats of one crawlhive cluster, all under ``<prefix>:``."""

    def __init__(self, prefix: str) -> None:
        if not prefix or ":" in prefix:
            raise KeyFormatError(f"REDIS_KEY_PREFIX: must be non-empty and contain no ':', got {prefix!r}")
        self.prefix = prefix

    def _parse(self, key_: str, kind: str, parts: int) -> list[str]:
        """Split *key_* into its *parts* variable parts after ``<prefix>:<kind>:``."""
        head = f"{self.prefix}:{kind}:"
        if not key_.startswith(head):
            raise KeyFormatError(f"not a {kind} key under prefix {self.prefix!r}: {key_!r}")
        pieces = key_[len(head) :].split(":", parts - 1)
        if len(pieces) != parts or not all(pieces):
            raise KeyFormatError(f"not a {kind} key: {key_!r}")
        return pieces

    # --- frontier -------------------------------------------------------------------------------

    @key("zset")
    def queue(self, spider: str, domain: str) -> str:
        """Pending requests of one spider type for one domain: member = encoded request, score =
        -priority (higher priority first) plus an arrival sequence (FIFO among equals)."""
        return f"{self.prefix}:queue:{spider}:{domain}"

    def parse_queue(self, key_: str) -> tuple[str, str]:
        """``<prefix>:queue:link:example.com`` -> ``("link", "example.com")``."""
        spider, domain = self._parse(key_, "queue", 2)
        return spider, domain

    @key("string (integer)")
    def queue_sequence(self) -> str:
        """Arrival counter: every push takes the next value, so equal priorities pop in order."""
        return f"{self.prefix}:queue-seq"

    # --- throttle -------------------------------------------------------------------------------

    @key("zset", ttl="window")
    def throttle(self, throttle_key: str) -> str:
        """Fetch starts of one throttle key (domain, plus spider type and egress id when enabled)
        in the current rolling window: member = unique start id, score = Redis server time (s)."""
        return f"{self.prefix}:throttle:{throttle_key}"

    def parse_throttle(self, key_: str) -> str:
        (throttle_key,) = self._parse(key_, "throttle", 1)
        return throttle_key

    # --- stats and heartbeats -----------------------------------------------------------------

    @key("zset", ttl="longest STATS_TIMES window")
    def stats_window(self, component: str, name: str) -> str:
        """Rolling-window counter ``name`` of ``component`` (e.g. ``kafka-monitor``, ``total``):
        member = time bucket, score = count in that bucket."""
        return f"{self.prefix}:stats:{component}:{name}"

    def parse_stats_window(self, key_: str) -> tuple[str, str]:
        component, name = self._parse(key_, "stats", 2)
        return component, name

    @key("string (integer)", ttl="none")
    def stats_lifetime(self, component: str, name: str) -> str:
        """Lifetime total of counter ``name`` of ``component``."""
        return f"{self.prefix}:stats-lifetime:{component}:{name}"

    @key("hyperloglog", ttl="longest STATS_TIMES window, renewed on write")
    def stats_unique(self, component: str, name: str) -> str:
        """Lifetime count of distinct values (e.g. crawl ids) seen by counter ``name``."""
        return f"{self.prefix}:stats-unique:{component}:{name}"

    @key("set")
    def stats_index(self) -> str:
        """Every ``component:name`` that has stats keys, so readers never need ``KEYS``."""
        return f"{self.prefix}:stats-index"

    @key("string (JSON)", ttl="HEARTBEAT_TIMEOUT")
    def heartbeat(self, component: str, node_id: str) -> str:
        """One live process: ``{"host", "pid", "node_id", "component", "started"}``, renewed every
        HEARTBEAT_INTERVAL; gone when the process stops or dies."""
        return f"{self.prefix}:heartbeat:{component}:{node_id}"

    def parse_heartbeat(self, key_: str) -> tuple[str, str]:
        component, node_id = self._parse(key_, "heartbeat", 2)
        return component, node_id

    @key("zset")
    def heartbeat_index(self, component: str) -> str:
        """Node ids of ``component`` that have sent a heartbeat: score = when it expires (Redis
        time, s); entries past their score are pruned by readers."""
        return f"{self.prefix}:nodes:{component}"


def document(prefix: str = "<prefix>") -> list[KeyDoc]:
    """One :class:`KeyDoc` per key format of :class:`Keys`, in definition order."""
    keys = Keys.__new__(Keys)
    keys.prefix = prefix
    rows = []
    for name, func in Keys.__dict__.items():
        if not hasattr(func, "_redis_type"):
            continue
        params = list(inspect.signature(func).parameters)[1:]
        pattern = getattr(keys, name)(*(f"<{p}>" for p in params))
        doc = " ".join(inspect.getdoc(func).split())  # type: ignore[union-attr]
        rows.append(KeyDoc(pattern, func._redis_type, func._ttl, doc))
    return rows


def render_markdown() -> str:
    """The text of docs/redis-keys.md."""
    lines = [
        "# Redis keys",
        "",
        "Generated from `utils/keys.py` by `python -m crawlhive.utils.keys > docs/redis-keys.md`;",
        "`tests/unit/test_keys.py` fails when this file is stale. Every key starts with the setting",
        "`REDIS_KEY_PREFIX` (default `ch`). These names are internal, not part of the wire contract.",
        "",
        "| Key | Type | TTL | Holds |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{r.pattern}` | {r.redis_type} | {r.ttl} | {r.doc} |" for r in document()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    sys.stdout.write(render_markdown())
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


__all__ = ["KeyDoc", "Keys", "document", "render_markdown"]
