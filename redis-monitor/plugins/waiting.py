"""waiting (docs/contract.md §17.6): one WARNING per crawl that waits for a crawler nobody runs.

A crawl request is accepted for any valid spider type, and ``render: true`` work is queued in the
rendering lane; if no live crawler serves that spider type (or no rendering crawler serves it), the
crawl waits without a word. Every few seconds this plugin reads the lanes live crawlers serve
(:func:`~crawlhive.utils.state.heartbeat.crawler_lanes`) and the active crawls, and logs one WARNING, with
what to start, for each crawl that has stayed unserved for two heartbeat intervals (a crawler that
just started has beaten by then). It warns again only if the crawl was served in between. Each
redis-monitor warns on its own; ``GET /crawls`` and the dashboard show the same ``reason``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Self

from crawlhive.redis_monitor.plugins import MonitorPlugin
from crawlhive.utils.state.heartbeat import crawler_lanes, unserved_reason

if TYPE_CHECKING:
    from crawlhive.redis_monitor.monitor import RedisMonitor
    from crawlhive.utils.backends.keys import Keys
    from crawlhive.utils.backends.redis_types import RedisClient
    from crawlhive.utils.frontier import FrontierReader

logger = logging.getLogger(__name__)

#: Longest pause between two checks (seconds); shorter when HEARTBEAT_INTERVAL is.
CHECK_EVERY_S = 5.0
#: Seconds the lanes read of a crawl are reused (two ``SCARD`` per shard to read them again).
LANES_REFRESH_S = 60.0

Crawl = tuple[str, str, str]


class WaitingCrawls(MonitorPlugin):
    """Warns once per crawl queued for a spider type (or lane) no live crawler serves.

    Args:
        redis: the monitor's client.
        keys: the cluster's key formats.
        frontier: reads the active crawls and their lanes.
        grace_s: seconds a crawl must stay unserved before the warning.
        check_every_s: seconds between two checks.
        clock: monotonic seconds (tests pass their own).
    """

    name = "WaitingCrawls"
    tick_every = 1

    def __init__(
        self,
        redis: RedisClient,
        keys: Keys,
        frontier: FrontierReader,
        grace_s: float,
        check_every_s: float = CHECK_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.frontier = frontier
        self.grace_s = grace_s
        self.check_every_s = check_every_s
        self.clock = clock
        self.unserved_since: dict[Crawl, float] = {}
        self.warned: set[Crawl] = set()
        self._lanes: dict[Crawl, tuple[frozenset[bool], float]] = {}
        self._next_check = 0.0

    @classmethod
    def from_monitor(cls, monitor: RedisMonitor) -> Self:
        interval = monitor.settings.HEARTBEAT_INTERVAL
        return cls(monitor.redis, monitor.keys, monitor.frontier, 2 * interval, min(CHECK_EVERY_S, interval))

    def tick(self) -> None:
        now = self.clock()
        if now < self._next_check:
            return
        self._next_check = now + self.check_every_s
        reasons = self.reasons()
        for crawl in [c for c in self.unserved_since if c not in reasons]:  # served now, or ended
            del self.unserved_since[crawl]
            self.warned.discard(crawl)
        for crawl, reason in reasons.items():
            since = self.unserved_since.setdefault(crawl, now)
            if crawl in self.warned or now - since < self.grace_s:
                continue
            self.warned.add(crawl)
            spider, appid, crawlid = crawl
            logger.warning(
                "crawl %s/%s waits: %s",
                appid,
                crawlid,
                reason,
                extra={"appid": appid, "crawlid": crawlid, "spiderid": spider},
            )

    def reasons(self) -> dict[Crawl, str]:
        """Why each active crawl no live crawler serves waits (one entry per such crawl).

        The crawls of a spider type served in both lanes need no read; the others' lanes
        (:meth:`FrontierReader.queued_lanes`) are read when first seen, then at most every
        LANES_REFRESH_S (a crawl's lanes change rarely: its requests' ``render`` decides them).
        """
        serving = crawler_lanes(self.redis, self.keys)
        now = self.clock()
        candidates = [
            crawl
            for crawl in self.frontier.active_refs()
            if (crawl[0], False) not in serving or (crawl[0], True) not in serving
        ]
        stale = [c for c in candidates if c not in self._lanes or now - self._lanes[c][1] >= LANES_REFRESH_S]
        for crawl, lanes in zip(stale, self.frontier.queued_lanes(stale), strict=True):
            self._lanes[crawl] = (lanes, now)
        kept = set(candidates)
        for crawl in [c for c in self._lanes if c not in kept]:
            del self._lanes[crawl]
        reasons: dict[Crawl, str] = {}
        for crawl in candidates:
            lanes = self._lanes[crawl][0]
            reason = unserved_reason(crawl[0], lanes, serving) if lanes else None
            if reason:
                reasons[crawl] = reason
        return reasons
