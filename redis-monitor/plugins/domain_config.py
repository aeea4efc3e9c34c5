"""domain-config (docs/contract.md §2.5, §3.11, §4.8): throttle overrides and the domain blacklist.

Writes ``keys.domain_config(shard)`` (field = domain, value = JSON ``{"hits", "window", "scale"}``
and, when set, ``"fetch"`` (§25) and, when PROXY_POOL_DOMAIN_UPDATES allows it, ``"proxy_pool"``) and
``keys.domain_blacklist(shard)`` of the domain's frontier shard; the crawlers' pop script reads
both on every pop. A domain a pop parked under the old limit is made ready again
(:func:`~crawlhive.utils.frontier.recheck_domain`) and idle crawlers woken, so a loosened or
removed limit applies at once, not after the old delay.
Every action is idempotent. SC's ZookeeperMonitor in Redis.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Self

from redis.exceptions import ResponseError

from crawlhive.redis_monitor.plugins import MonitorPlugin, Outbound, server_time
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.frontier import FrontierReader, recheck_domain
from crawlhive.utils.rules.domains import domain_of_host

if TYPE_CHECKING:
    from crawlhive.redis_monitor.monitor import RedisMonitor
    from crawlhive.utils.backends.keys import Keys

ACTIONS = ("domain-update", "domain-remove", "blacklist-update", "blacklist-remove")
STORE_ERROR = "Unable to store domain config"
"""``error`` of an answer whose change was not stored (docs/contract.md §4.8)."""


class DomainConfigMonitor(MonitorPlugin):
    """Applies domain-update / domain-remove / blacklist-update / blacklist-remove."""

    name = "DomainConfigMonitor"

    def __init__(self, redis: RedisClient, keys: Keys, frontier: FrontierReader, pool_updates: bool = False) -> None:
        self.redis = redis
        self.keys = keys
        self.frontier = frontier
        self.pool_updates = pool_updates
        """Whether a domain-update's ``proxy_pool`` is stored (PROXY_POOL_DOMAIN_UPDATES; the
        kafka-monitor refuses one otherwise, and crawlers ignore one stored before)."""

    @classmethod
    def from_monitor(cls, monitor: RedisMonitor) -> Self:
        return cls(monitor.redis, monitor.keys, monitor.frontier, monitor.settings.PROXY_POOL_DOMAIN_UPDATES)

    def accepts(self, kind: str, request: dict[str, Any]) -> bool:
        return kind == "domain-config" and request.get("action") in ACTIONS

    def handle(self, kind: str, request: dict[str, Any]) -> list[Outbound]:
        action = request["action"]
        domain = domain_of_host(request["domain"]) or request["domain"]
        answer = self._answer(request, domain)
        try:
            if action == "domain-update":
                config: dict[str, float | str] = {
                    "hits": int(request["hits"]),
                    "window": int(request["window"]),
                    "scale": float(request.get("scale", 1.0)),
                }
                if request.get("fetch"):  # the domain's fetch mode, where its crawl says none (§25)
                    config["fetch"] = str(request["fetch"])
                if request.get("proxy_pool") and self.pool_updates:  # wins over a crawl's pool (§21.1)
                    config["proxy_pool"] = str(request["proxy_pool"])
                self.redis.hset(self.keys.domain_config(self.keys.shard_of(domain)), domain, json.dumps(config))
            elif action == "domain-remove":
                self.redis.hdel(self.keys.domain_config(self.keys.shard_of(domain)), domain)
            elif action == "blacklist-update":
                self.redis.sadd(self.keys.domain_blacklist(self.keys.shard_of(domain)), domain)
            else:
                self.redis.srem(self.keys.domain_blacklist(self.keys.shard_of(domain)), domain)
            if action != "blacklist-update":
                recheck_domain(self.redis, self.keys, self.frontier.active_spiders(), domain)
        except ResponseError:
            # Redis answered but refused the write (wrong key type, out of memory, read-only
            # replica): nothing was changed. Connection failures propagate and are retried.
            answer["error"] = STORE_ERROR
        return [Outbound(answer)]

    def failed(self, kind: str, request: dict[str, Any], error: str) -> list[Outbound] | None:
        answer = self._answer(request, domain_of_host(str(request.get("domain", ""))) or request.get("domain"))
        answer["error"] = STORE_ERROR
        return [Outbound(answer)]

    @staticmethod
    def _answer(request: dict[str, Any], domain: Any) -> dict[str, Any]:
        return {
            "action": request.get("action"),
            "domain": domain,
            "appid": request.get("appid"),
            "uuid": request.get("uuid"),
            "server_time": server_time(),
        }
