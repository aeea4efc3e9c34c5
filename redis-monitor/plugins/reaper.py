"""Lease reaper (docs/contract.md §3.12): what a dead crawler held goes back into the frontier.

Every fourth tick, for each spider type with active crawls (:meth:`FrontierReader.active_spiders`:
a request is queued or leased only while its crawl is active, so no ``KEYS`` scan is needed),
:func:`reclaim_expired_leases` requeues each expired lease as a retry (priority - 10,
``retry_times`` + 1) or, once RETRY_TIMES retries are used up, ends it as failed and appends a crawl
dead letter (error ``lease expired``) to the control stream, which this plugin then produces.
Those dead letters are counted like the crawlers' own, in ``failed_counter_name(spider)`` of
component ``crawler`` (what ``/metrics`` reports as failed requests).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Self

from crawlhive.redis_monitor.plugins import MonitorPlugin, Outbound
from crawlhive.utils.config.errors import NotConfigured
from crawlhive.utils.frontier import FrontierLeaser, FrontierReader, reclaim_expired_leases
from crawlhive.utils.state.stats import CRAWLER, Stats, failed_counter_name

if TYPE_CHECKING:
    from crawlhive.redis_monitor.monitor import RedisMonitor

logger = logging.getLogger(__name__)


class LeaseReaper(MonitorPlugin):
    """Reclaims expired leases and produces the dead letters of those out of retries."""

    name = "LeaseReaper"
    tick_every = 4

    def __init__(self, frontier: FrontierReader, worker: FrontierLeaser, stats: Stats, max_retries: int) -> None:
        self.frontier = frontier
        self.worker = worker
        self.stats = stats
        self.max_retries = max_retries

    @classmethod
    def from_monitor(cls, monitor: RedisMonitor) -> Self:
        if not monitor.settings.REDIS_MONITOR_REAPER_ENABLED:
            raise NotConfigured("REDIS_MONITOR_REAPER_ENABLED is false")
        worker = FrontierLeaser.from_settings(monitor.redis, monitor.settings)
        return cls(monitor.frontier, worker, monitor.stats, monitor.settings.RETRY_TIMES)

    def tick(self) -> None:
        for spider in sorted(self.frontier.active_spiders()):
            result = reclaim_expired_leases(self.worker, spider, self.max_retries)
            self.stats.incr(CRAWLER, failed_counter_name(spider), result.failed)
            if result.requeued or result.failed:
                logger.info(
                    "reclaimed expired leases of spider %s: %d requeued, %d out of retries",
                    spider,
                    result.requeued,
                    result.failed,
                    extra={"spider": spider},
                )

    def accepts(self, kind: str, request: dict[str, Any]) -> bool:
        return kind == "dead-letter"

    def handle(self, kind: str, request: dict[str, Any]) -> list[Outbound]:
        return [Outbound(request, dead_letter=True)]
