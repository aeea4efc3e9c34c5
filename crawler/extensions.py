"""The crawler's maintenance loops as Scrapy extensions (``EXTENSIONS``), so a user can switch one off
(``EXTENSIONS = {"crawlhive.crawler.extensions.ProgressLog": None}``) or add their own.

Each extension names its loops, ``(interval, call)`` on the crawler's runtime
(:class:`~crawlhive.crawler.runtime.CrawlRuntime`), which starts them when the spider opens and
stops them first when it closes, before it flushes and removes the heartbeat: a loop never runs
after the close began. Lease renewal is not among them: without it every page's lease would expire
under it, so it stays part of the runtime.

* :class:`HeartbeatLoop`: the process's heartbeat (HEARTBEAT_INTERVAL); without it the crawler is
  not counted as live (``stats``, ``/metrics``, a crawl then shows ``waiting``).
* :class:`StatsFlush`: the response counters written to Redis (CRAWLER_STATS_FLUSH_S).
* :class:`ProgressLog`: one INFO line a PROGRESS_EVERY_S while pages are fetched.
* :class:`RedisOnlySeeds`: Redis-only mode (docs/contract.md §12): the start-URLs list read into the
  frontier every second, and expired leases reclaimed (no redis-monitor runs there).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from crawlhive.crawler.runtime import CrawlRuntime

#: Seconds between two progress lines of a crawler that is fetching pages (none while idle).
PROGRESS_EVERY_S = 10.0
#: Seconds between two reads of the start-URLs list in Redis-only mode.
REDIS_ONLY_SEEDS_EVERY_S = 1.0

Loop = tuple[float, Callable[[], Any]]

_REGISTERED: weakref.WeakKeyDictionary[Crawler, list[MaintenanceLoop]] = weakref.WeakKeyDictionary()


class MaintenanceLoop:
    """Base of the extensions: registered with their crawler; :meth:`loops` names the calls."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        extension = cls()
        _REGISTERED.setdefault(crawler, []).append(extension)
        return extension

    def loops(self, runtime: CrawlRuntime) -> list[Loop]:
        """``(interval in seconds, call)`` of each loop, for *runtime* (called when the spider opens)."""
        raise NotImplementedError


def maintenance_loops(crawler: Crawler, runtime: CrawlRuntime) -> list[Loop]:
    """The loops of every enabled maintenance extension of *crawler*."""
    return [loop for extension in _REGISTERED.get(crawler, []) for loop in extension.loops(runtime)]


class HeartbeatLoop(MaintenanceLoop):
    """The heartbeat: once when the spider opens, then every HEARTBEAT_INTERVAL."""

    def loops(self, runtime: CrawlRuntime) -> list[Loop]:
        runtime.heartbeat.beat()
        return [(runtime.context.heartbeat_interval_s, runtime.beat)]


class StatsFlush(MaintenanceLoop):
    """The response counters, written every CRAWLER_STATS_FLUSH_S (and once more at close)."""

    def loops(self, runtime: CrawlRuntime) -> list[Loop]:
        return [(runtime.settings.CRAWLER_STATS_FLUSH_S, runtime.flush_stats)]


class ProgressLog(MaintenanceLoop):
    """One INFO line a PROGRESS_EVERY_S while pages are fetched, nothing while idle (§17.4)."""

    def loops(self, runtime: CrawlRuntime) -> list[Loop]:
        return [(PROGRESS_EVERY_S, runtime.log_progress)]


class RedisOnlySeeds(MaintenanceLoop):
    """Redis-only mode: seeds every second, expired leases reclaimed; nothing with Kafka."""

    def loops(self, runtime: CrawlRuntime) -> list[Loop]:
        if runtime.seeds is None:
            return []
        return [(REDIS_ONLY_SEEDS_EVERY_S, runtime.read_seeds), (max(1.0, runtime.lease_s / 2), runtime.reclaim)]


#: The extensions and their orders in crawlhive's Scrapy settings (``crawler/settings.py``).
EXTENSIONS = {
    f"{__name__}.HeartbeatLoop": 100,
    f"{__name__}.StatsFlush": 110,
    f"{__name__}.ProgressLog": 120,
    f"{__name__}.RedisOnlySeeds": 130,
}
