"""expire (docs/contract.md §3.4, §4.5): fire crawls' expiry timers, purge like stop, emit ``expired``.

On each tick :meth:`FrontierReader.fire_expiries` moves the timers whose time has passed (Redis
clock) from ``keys.expiries()`` to the control stream as ``expire`` entries, in one script: the
removal is the claim, so with several monitors each timer fires once, and the entry survives a
crash until its ``expired`` message is acknowledged by Kafka.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Self

from crawlhive.redis_monitor.plugins import MonitorPlugin, Outbound, server_time
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.config.errors import NotConfigured
from crawlhive.utils.frontier import FrontierReader

if TYPE_CHECKING:
    from crawlhive.redis_monitor.monitor import RedisMonitor
    from crawlhive.utils.backends.keys import Keys


class ExpireMonitor(MonitorPlugin):
    """Fires expiry timers every tick and answers the ``expire`` entries they cause."""

    name = "ExpireMonitor"
    tick_every = 1

    def __init__(self, redis: RedisClient, keys: Keys, frontier: FrontierReader) -> None:
        self.redis = redis
        self.keys = keys
        self.frontier = frontier

    @classmethod
    def from_monitor(cls, monitor: RedisMonitor) -> Self:
        if not monitor.settings.REDIS_MONITOR_EXPIRE_ENABLED:
            raise NotConfigured("REDIS_MONITOR_EXPIRE_ENABLED is false")
        return cls(monitor.redis, monitor.keys, monitor.frontier)

    def tick(self) -> None:
        self.frontier.fire_expiries()

    def accepts(self, kind: str, request: dict[str, Any]) -> bool:
        return kind == "expire"

    def handle(self, kind: str, request: dict[str, Any]) -> list[Outbound]:
        spider, appid, crawlid = request["spiderid"], request["appid"], request["crawlid"]
        armed = self.redis.hget(self.keys.crawl(spider, appid, crawlid), "expires")
        if armed is None or int(armed) > time.time():
            # Disarmed by a stop, or re-armed later by a resubmission (whose timer is queued again):
            # this firing no longer applies.
            return []
        expired = self.frontier.purge(spider, appid, crawlid, ended_as="expired")
        return [
            Outbound(
                {
                    "action": "expired",
                    "appid": appid,
                    "crawlid": crawlid,
                    "spiderid": spider,
                    "total_expired": expired,
                    "server_time": server_time(),
                }
            )
        ]
