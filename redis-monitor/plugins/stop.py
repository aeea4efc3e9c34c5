"""stop (docs/contract.md §3.9, §4.4): purge one crawl, cancel its leases, blacklist it, disarm its timer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from crawlhive.redis_monitor.plugins import MonitorPlugin, Outbound, server_time
from crawlhive.utils.frontier import FrontierReader

if TYPE_CHECKING:
    from crawlhive.redis_monitor.monitor import RedisMonitor


class StopMonitor(MonitorPlugin):
    """Answers ``{"action": "stop", ...}`` with ``total_purged`` (0 for an unknown crawl). The
    ``complete`` event follows from the completion check once nothing is in flight."""

    name = "StopMonitor"

    def __init__(self, frontier: FrontierReader) -> None:
        self.frontier = frontier

    @classmethod
    def from_monitor(cls, monitor: RedisMonitor) -> Self:
        return cls(monitor.frontier)

    def accepts(self, kind: str, request: dict[str, Any]) -> bool:
        return kind == "action" and request.get("action") == "stop"

    def handle(self, kind: str, request: dict[str, Any]) -> list[Outbound]:
        spider, appid, crawlid = request["spiderid"], request["appid"], request["crawlid"]
        purged = self.frontier.purge(spider, appid, crawlid)
        return [
            Outbound(
                {
                    "action": "stop",
                    "appid": appid,
                    "crawlid": crawlid,
                    "spiderid": spider,
                    "total_purged": purged,
                    "uuid": request["uuid"],
                    "server_time": server_time(),
                }
            )
        ]
