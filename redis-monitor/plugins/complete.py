"""complete (docs/contract.md §3.12, §4.6): one event per crawl once nothing is queued and nothing in flight.

On each tick :meth:`FrontierReader.scan_complete` walks ``keys.active_crawls()`` (``SSCAN``) and, in
one script per chunk, removes each crawl that is done from the active set and its appid's crawl set
and appends a ``complete`` entry with its counters to the control stream: with several monitors
each completion is reported once, and a crash before Kafka acknowledged the event loses nothing.
A resubmission makes the crawl active again, so a later drain reports a new ``complete``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from crawlhive.redis_monitor.plugins import MonitorPlugin, Outbound, server_time
from crawlhive.utils.config.errors import NotConfigured
from crawlhive.utils.frontier import FrontierReader

if TYPE_CHECKING:
    from crawlhive.redis_monitor.monitor import RedisMonitor

#: Most calls of the completion scan in one tick (each checks about 500 active crawls).
SCANS_PER_TICK = 20


class CompleteMonitor(MonitorPlugin):
    """Detects finished crawls every tick and emits their ``complete`` events."""

    name = "CompleteMonitor"
    tick_every = 1

    def __init__(self, frontier: FrontierReader) -> None:
        self.frontier = frontier
        self.cursor = 0

    @classmethod
    def from_monitor(cls, monitor: RedisMonitor) -> Self:
        if not monitor.settings.REDIS_MONITOR_COMPLETE_ENABLED:
            raise NotConfigured("REDIS_MONITOR_COMPLETE_ENABLED is false")
        return cls(monitor.frontier)

    def tick(self) -> None:
        # A pass over a large active set may span ticks; the cursor carries over.
        for _ in range(SCANS_PER_TICK):
            self.cursor, _found = self.frontier.scan_complete(self.cursor)
            if self.cursor == 0:
                break

    def accepts(self, kind: str, request: dict[str, Any]) -> bool:
        return kind == "complete"

    def handle(self, kind: str, request: dict[str, Any]) -> list[Outbound]:
        return [
            Outbound(
                {
                    "action": "complete",
                    "appid": request["appid"],
                    "crawlid": request["crawlid"],
                    "spiderid": request["spiderid"],
                    "total_crawled": int(request.get("total_crawled", 0)),
                    "total_failed": int(request.get("total_failed", 0)),
                    "server_time": server_time(),
                }
            )
        ]
