"""Rolling-window and lifetime counters in Redis, for the stats responses of docs/contract.md §4.7.

A counter is named by ``(component, name)``, e.g. ``("kafka-monitor", "total")`` or
``("crawler", "link:200")``. Per counter:

* ``keys.stats_window(component, name)``, a sorted set of time buckets: member ``"<window>:<index>"``
  (``index = floor(t / (window / BUCKETS_PER_WINDOW))``, ``t`` epoch seconds), score = events in
  that bucket. Each window has its own series of ``BUCKETS_PER_WINDOW`` buckets, so one event costs
  one ``ZINCRBY`` per window whatever the event rate, and a read sums at most
  ``BUCKETS_PER_WINDOW`` entries per window. TTL: the longest window plus one of its buckets,
  renewed on every write.
* ``keys.stats_lifetime(component, name)``, an integer (``INCRBY``). No TTL: lifetime totals are
  exempt, as in Scrapy Cluster; except a per-process counter's (its name starts with ``machine:``,
  one per host, and hosts come and go where containers scale): the window set's TTL, renewed on
  every write, so a host gone for the longest window leaves nothing behind.
* ``keys.stats_unique(component, name)``, a HyperLogLog of distinct values (``PFADD``; ``PFCOUNT``
  is within about 0.81 % of the truth). TTL: the longest window, renewed on every write, so it counts
  distinct values over the counter's active life.
* its ``component:name`` in ``keys.stats_index()`` (a set, no TTL), so readers enumerate counters
  without ``KEYS``; a per-process counter whose keys expired is dropped from it by the reader
  that finds it empty (:meth:`Stats.read_many`).

Bucket error bound: a window ``W`` is read as the sum of the ``BUCKETS_PER_WINDOW`` most recent
buckets of width ``w = W / BUCKETS_PER_WINDOW``, the current (partial) one included. That covers
between ``W - w`` and ``W`` seconds of history, so a read can miss only events older than
``W - w``: it never over-counts and under-counts by at most the events of one bucket width at the
old end (with 60 buckets, the first 15 s of a 900 s window, 1/60 of the window).

Clocks: bucket indexes come from the writer's clock (``clock``, default :func:`time.time`); hosts are
assumed NTP-synchronised, and a skew much smaller than a bucket width does not matter. Stale
buckets are removed by readers (the read script) and by writers when they enter a new bucket (a
``ZREM`` of the buckets that just left the window, folded into the same round trip).

Why not Scrapy Cluster's ``RollingTimeWindow``: it stores one sorted-set member per event and runs
one thread per counter.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.backends.scripts import scripts
from crawlhive.utils.frontier.model import FETCH_COUNTS

if TYPE_CHECKING:
    from crawlhive.utils.backends.keys import Keys
    from crawlhive.utils.backends.redis_types import RedisPipeline

BUCKETS_PER_WINDOW = 60
"""Buckets per window; every process of a cluster must use the same value (members carry it
implicitly)."""
LIFETIME = "lifetime"
"""The window-map key of the lifetime total (docs/contract.md §4.1)."""
_ZREM_CHUNK = 1000


def bucket_index(now: float, window: int) -> int:
    """Index of the bucket of *window* that holds time *now* (the read script computes the same)."""
    return math.floor(now / (window / BUCKETS_PER_WINDOW))


class Stats:
    """Counters with rolling windows, lifetime totals and lifetime distinct counts.

    Args:
        redis: the client (either response decoding works).
        keys: the cluster's key formats.
        windows: the rolling windows in seconds (``STATS_TIMES``), positive integers.
        clock: epoch seconds now; tests inject their own.

    Raises:
        ValueError: *windows* is empty or has a non-positive or non-integer value.

    Writes and reads raise ``redis.RedisError`` when Redis fails; a failed write may have been
    applied in part, which only misstates counts.
    """

    def __init__(
        self, redis: RedisClient, keys: Keys, windows: Sequence[int], clock: Callable[[], float] = time.time
    ) -> None:
        if not windows or any(isinstance(w, bool) or not isinstance(w, int) or w <= 0 for w in windows):
            raise ValueError(f"STATS_TIMES: expected positive whole seconds, got {list(windows)!r}")
        self.redis = redis
        self.keys = keys
        self.windows: tuple[int, ...] = tuple(sorted(set(windows)))
        self.clock = clock
        longest = self.windows[-1]
        self.window_ttl_ms = math.ceil((longest + longest / BUCKETS_PER_WINDOW) * 1000)
        self.unique_ttl_ms = longest * 1000
        # (component, name, window) -> last bucket index this process wrote: when it changes, the
        # buckets that just left the window are known without reading, and removed with the write.
        self._last_bucket: dict[tuple[str, str, int], int] = {}
        self.scripts = scripts(redis)

    # --- writes ---------------------------------------------------------------------------------

    def incr(
        self, component: str, name: str, n: int = 1, *, pipe: RedisPipeline | None = None, now: float | None = None
    ) -> None:
        """Count *n* events of counter ``(component, name)`` at time *now* (default: the clock).

        Touches the counter's window set (one ``ZINCRBY`` per window, ``PEXPIRE``, sometimes a
        ``ZREM`` of stale buckets), its lifetime total and ``keys.stats_index()``.

        Args:
            n: events to count; 0 does nothing.
            pipe: a pipeline to add the commands to; the caller executes it (so the count costs no
                round trip of its own). Without one, the commands run now in one ``MULTI``.
            now: epoch seconds of the events.

        Raises:
            ValueError: *n* is negative.
        """
        self.incr_many([(component, name, n)], pipe=pipe, now=now)

    def incr_many(
        self, counts: Iterable[tuple[str, str, int]], *, pipe: RedisPipeline | None = None, now: float | None = None
    ) -> None:
        """:meth:`incr` for several ``(component, name, n)`` at once, in one pipeline.

        Raises:
            ValueError: an *n* is negative; nothing was written.
        """
        batch = [(c, m, n) for c, m, n in counts if n]
        if any(n < 0 for _, _, n in batch):
            raise ValueError(f"stats counts must be >= 0, got {batch!r}")
        if not batch:
            return
        now = self.clock() if now is None else now
        target = self.redis.pipeline(transaction=True) if pipe is None else pipe
        for component, name, n in batch:
            key = self.keys.stats_window(component, name)
            for window in self.windows:
                index = bucket_index(now, window)
                target.zincrby(key, n, f"{window}:{index}")
                stale = self._newly_stale(component, name, window, index)
                if stale:
                    target.zrem(key, *stale)
            target.pexpire(key, self.window_ttl_ms)
            target.incrby(self.keys.stats_lifetime(component, name), n)
            if name.startswith(PER_PROCESS):
                target.pexpire(self.keys.stats_lifetime(component, name), self.window_ttl_ms)
            target.sadd(self.keys.stats_index(), f"{component}:{name}")
        if pipe is None:
            target.execute()

    def _newly_stale(self, component: str, name: str, window: int, index: int) -> list[str]:
        """Members of *window* that left it since this process last wrote the counter (at most
        ``BUCKETS_PER_WINDOW``; on the first write, the one bucket that just left)."""
        slot = (component, name, window)
        last = self._last_bucket.get(slot, index - 1)
        if index <= last:
            return []
        self._last_bucket[slot] = index
        first = max(last - BUCKETS_PER_WINDOW + 1, index - 2 * BUCKETS_PER_WINDOW + 1)
        return [f"{window}:{i}" for i in range(first, index - BUCKETS_PER_WINDOW + 1)]

    def unique(self, component: str, name: str, value: str | bytes, *, pipe: RedisPipeline | None = None) -> None:
        """Record *value* in the distinct count of ``(component, name)``.

        Touches ``keys.stats_unique(component, name)`` (``PFADD``, ``PEXPIRE``) and the index.

        Args:
            pipe: as for :meth:`incr`.
        """
        self.unique_many(component, name, [value], pipe=pipe)

    def unique_many(
        self, component: str, name: str, values: Iterable[str | bytes], *, pipe: RedisPipeline | None = None
    ) -> None:
        """:meth:`unique` for several values at once."""
        batch = list(values)
        if not batch:
            return
        key = self.keys.stats_unique(component, name)
        target = self.redis.pipeline(transaction=True) if pipe is None else pipe
        target.pfadd(key, *batch)
        target.pexpire(key, self.unique_ttl_ms)
        target.sadd(self.keys.stats_index(), f"{component}:{name}")
        if pipe is None:
            target.execute()

    # --- reads ----------------------------------------------------------------------------------

    def read(self, component: str, name: str, *, now: float | None = None) -> dict[str, int]:
        """The window map of ``(component, name)`` (docs/contract.md §4.1), in one round trip.

        Returns:
            ``{"<window>": count, ..., "lifetime": total}`` with zero entries left out, so ``{}`` for
            a counter never incremented. Stale buckets are removed on the way.
        """
        return self._window_map(
            self.scripts["stats_read"](keys=self._read_keys(component, name), args=self._read_args(now))
        )

    def read_many(
        self, counters: Iterable[tuple[str, str]], *, now: float | None = None
    ) -> dict[tuple[str, str], dict[str, int]]:
        """:meth:`read` for several counters in one pipeline (one round trip)."""
        wanted = list(dict.fromkeys(counters))
        if not wanted:
            return {}
        args = self._read_args(now)

        def build() -> RedisPipeline:
            pipe = self.redis.pipeline(transaction=False)
            for component, name in wanted:
                self.scripts.queue(pipe, "stats_read", self._read_keys(component, name), args)
            return pipe

        replies = self.scripts.execute(build)
        maps = {counter: self._window_map(reply) for counter, reply in zip(wanted, replies, strict=True)}
        gone = [f"{c}:{n}" for (c, n), found in maps.items() if not found and n.startswith(PER_PROCESS)]
        if gone:  # a host's counters expired with it: forget them (a new write indexes them again)
            self.redis.srem(self.keys.stats_index(), *gone)
        return maps

    def read_unique(self, component: str, name: str) -> int:
        """Distinct values recorded by :meth:`unique` (``PFCOUNT``; 0 when none)."""
        return int(self.redis.pfcount(self.keys.stats_unique(component, name)))

    def counters(self, component: str | None = None) -> list[tuple[str, str]]:
        """Every ``(component, name)`` with stats keys (sorted), optionally of one *component*.

        Read from ``keys.stats_index()``; a listed counter whose keys all expired reads as ``{}``.
        """
        found = []
        for raw in self.redis.smembers(self.keys.stats_index()):
            entry = raw.decode() if isinstance(raw, bytes) else raw
            comp, _, name = entry.partition(":")
            if name and (component is None or comp == component):
                found.append((comp, name))
        return sorted(found)

    def _read_keys(self, component: str, name: str) -> list[str]:
        return [self.keys.stats_window(component, name), self.keys.stats_lifetime(component, name)]

    def _read_args(self, now: float | None) -> list[str | int]:
        now = self.clock() if now is None else now
        return [repr(float(now)), BUCKETS_PER_WINDOW, *(str(w) for w in self.windows)]

    def _window_map(self, reply: Sequence[int]) -> dict[str, int]:
        labels = [str(w) for w in self.windows] + [LIFETIME]
        return {label: int(count) for label, count in zip(labels, reply, strict=True) if int(count)}


# --- counter names: the one contract between the processes that count and the stats readers -------
#
# kafka-monitor and redis-monitor: component = their name; counters TOTAL (every request or entry
# processed, valid or not), FAIL (rejected or failed ones) and plugin_counter_name(<plugin name>)
# (what each plugin handled). Crawler: component CRAWLER; per response, crawler_counter_name(spider,
# code) and machine_counter_name(host, code) (network-level failures count as NETWORK_FAILURE_CODE,
# as in Scrapy Cluster); per item emitted items_counter_name(spider); per crawl dead letter
# failed_counter_name(spider). Spider types and host names never contain ':'.

KAFKA_MONITOR = "kafka-monitor"
"""Stats component of the kafka-monitor."""
REDIS_MONITOR = "redis-monitor"
"""Stats component of the redis-monitor."""
CRAWLER = "crawler"
"""Stats component of the crawlers."""
CLEANER = "cleaner"
"""Stats component of the cleaners (counters ``cleaned``, ``skipped``, ``duplicates``, ``dead_letters``)."""
CLEANER_COUNTERS = ("cleaned", "skipped", "duplicates", "dead_letters", "near_duplicates")
"""The counters of a cleaner (docs/contract.md §13)."""
TOTAL = "total"
"""A monitor's counter of everything it processed."""
FAIL = "fail"
"""A monitor's counter of what it rejected or failed on."""
NETWORK_FAILURE_CODE = 504
"""The status code under which crawler stats count a network-level failure (docs/contract.md §4.7)."""

_PLUGIN = "plugin:"
PER_PROCESS = "machine:"
"""The prefix of the counters of one host (:func:`machine_counter_name`,
:func:`cleaner_machine_counter_name`), whose every key expires."""


def plugin_counter_name(plugin: str) -> str:
    """Counter of the requests a monitor plugin handled: ``plugin:<name>``."""
    return f"{_PLUGIN}{plugin}"


def parse_plugin_counter_name(name: str) -> str | None:
    """The plugin name of a :func:`plugin_counter_name`, or None for another counter."""
    return name[len(_PLUGIN) :] if name.startswith(_PLUGIN) and len(name) > len(_PLUGIN) else None


def crawler_counter_name(spider: str, code: int) -> str:
    """Crawler counter of responses with status *code* fetched by spider type *spider*:
    ``spider:<spider>:<code>``."""
    return f"spider:{spider}:{int(code)}"


def machine_counter_name(host: str, code: int) -> str:
    """Crawler counter of responses with status *code* fetched on *host* (``CRAWLER_NODE_NAME``),
    all spider types together: ``machine:<host>:<code>``."""
    return f"machine:{host}:{int(code)}"


def cleaner_machine_counter_name(host: str, counter: str) -> str:
    """Cleaner counter *counter* (one of CLEANER_COUNTERS) of the cleaners on *host*
    (``CRAWLER_NODE_NAME``): ``machine:<host>:<counter>``."""
    return f"machine:{host}:{counter}"


def parse_cleaner_machine_counter_name(name: str) -> tuple[str, str] | None:
    """``(host, counter)`` of a :func:`cleaner_machine_counter_name`; None for any other name."""
    kind, sep, rest = name.partition(":")
    host, sep2, counter = rest.rpartition(":")
    if kind != "machine" or not sep or not sep2 or not host or counter not in CLEANER_COUNTERS:
        return None
    return host, counter


def items_counter_name(spider: str) -> str:
    """Crawler counter of the items spider type *spider* emitted: ``items:<spider>``."""
    return f"items:{spider}"


def failed_counter_name(spider: str) -> str:
    """Crawler counter of the crawl dead letters of spider type *spider*: ``failed:<spider>``."""
    return f"failed:{spider}"


def fetch_counter_name(spider: str, what: str) -> str:
    """Crawler counter of the pages rung *what* fetched for spider type *spider* (or, *what*
    ``climbs``, of the climbs of the ``auto`` ladder): ``fetch:<spider>:<what>``."""
    return f"fetch:{spider}:{what}"


def machine_fetch_counter_name(host: str, what: str) -> str:
    """:func:`fetch_counter_name` of the crawlers on *host* (``CRAWLER_NODE_NAME``), all spider
    types together: ``machine:<host>:fetch:<what>`` (a per-host counter, its keys expire)."""
    return f"{PER_PROCESS}{host}:fetch:{what}"


def parse_fetch_counter_name(name: str) -> tuple[str, str, str] | None:
    """``("spider", spider, what)`` or ``("machine", host, what)`` of a :func:`fetch_counter_name`
    or :func:`machine_fetch_counter_name`; None for any other counter."""
    kind, sep, rest = name.partition(":")
    if kind == "fetch":
        who, sep2, what = rest.rpartition(":")
        found = ("spider", who, what)
    elif kind == "machine":
        who, sep2, what = rest.rpartition(":fetch:")
        found = ("machine", who, what)
    else:
        return None
    return found if sep and sep2 and who and what in FETCH_COUNTS else None


def parse_status_counter_name(name: str) -> tuple[str, str, int] | None:
    """``("spider", spider, code)`` or ``("machine", host, code)`` of a :func:`crawler_counter_name`
    or :func:`machine_counter_name`; None for any other counter."""
    kind, sep, rest = name.partition(":")
    who, sep2, code = rest.rpartition(":")
    if kind not in ("spider", "machine") or not sep or not sep2 or not who or not code.isdigit():
        return None
    return kind, who, int(code)


def record_response(
    stats: Stats, spider: str, host: str, code: int, codes: Iterable[int], *, pipe: RedisPipeline | None = None
) -> None:
    """Count one response (or a network failure, as :data:`NETWORK_FAILURE_CODE`) in the crawler's
    per-spider and per-machine counters, if *code* is one of *codes* (``STATS_RESPONSE_CODES``)."""
    if int(code) in {int(c) for c in codes}:
        stats.incr_many(
            [(CRAWLER, crawler_counter_name(spider, code), 1), (CRAWLER, machine_counter_name(host, code), 1)],
            pipe=pipe,
        )


__all__ = [
    "BUCKETS_PER_WINDOW",
    "CRAWLER",
    "FAIL",
    "FETCH_COUNTS",
    "KAFKA_MONITOR",
    "LIFETIME",
    "NETWORK_FAILURE_CODE",
    "PER_PROCESS",
    "REDIS_MONITOR",
    "TOTAL",
    "Stats",
    "bucket_index",
    "crawler_counter_name",
    "failed_counter_name",
    "fetch_counter_name",
    "items_counter_name",
    "machine_counter_name",
    "machine_fetch_counter_name",
    "parse_fetch_counter_name",
    "parse_plugin_counter_name",
    "parse_status_counter_name",
    "plugin_counter_name",
    "record_response",
]
