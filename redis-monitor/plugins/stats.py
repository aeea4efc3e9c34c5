"""stats (docs/contract.md §4.7): cluster statistics from the rolling counters, heartbeats and frontier.

Counter names are the contract in :mod:`crawlhive.utils.state.stats` (``total``, ``fail``,
``plugin:<name>`` per monitor; ``spider:<spider>:<code>`` and ``machine:<host>:<code>`` for the
crawlers). Live processes come from heartbeats (:func:`live_heartbeats`); crawler heartbeats carry
their spider type as ``spider``. Queue backlogs are summed per domain by one script per spider type
(:meth:`FrontierReader.spider_backlog`), never by reading queued requests.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Any, Self

from crawlhive.redis_monitor.plugins import MonitorPlugin, Outbound, server_time
from crawlhive.utils.frontier import FrontierReader
from crawlhive.utils.process.kinds import stats_kinds, stats_types
from crawlhive.utils.rules.proxy_pools import ProxyConfigError, ProxyPools, pools_from_settings
from crawlhive.utils.state.heartbeat import live_heartbeats, live_nodes
from crawlhive.utils.state.proxies import proxy_overview
from crawlhive.utils.state.sinks import stats_body as sink_stats_body
from crawlhive.utils.state.stats import (
    CLEANER,
    CLEANER_COUNTERS,
    CRAWLER,
    FAIL,
    TOTAL,
    Stats,
    parse_cleaner_machine_counter_name,
    parse_plugin_counter_name,
    parse_status_counter_name,
)

if TYPE_CHECKING:
    from crawlhive.redis_monitor.monitor import RedisMonitor
    from crawlhive.utils.backends.keys import Keys
    from crawlhive.utils.backends.redis_types import RedisClient

#: Suffix of the ``queues`` entry of a spider type's rendering lane (``+`` is not allowed in spider ids).
RENDER_QUEUE_SUFFIX = "+render"
logger = logging.getLogger(__name__)
REST = "rest"


class StatsMonitor(MonitorPlugin):
    """Answers stats requests of every type."""

    name = "StatsMonitor"

    def __init__(
        self,
        redis: RedisClient,
        keys: Keys,
        stats: Stats,
        frontier: FrontierReader,
        response_codes: list[int],
        max_domains: int,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.stats = stats
        self.frontier = frontier
        self.response_codes = {int(c) for c in response_codes}
        self.max_domains = max_domains
        self.default_window_s = 60.0
        self.pools: ProxyPools | None = None
        #: Seconds after which a sink's published state is stale (HEARTBEAT_TIMEOUT).
        self.heartbeat_timeout_s = 30.0

    @classmethod
    def from_monitor(cls, monitor: RedisMonitor) -> Self:
        settings = monitor.settings
        plugin = cls(
            monitor.redis,
            monitor.keys,
            monitor.stats,
            monitor.frontier,
            settings.STATS_RESPONSE_CODES,
            settings.STATS_QUEUE_MAX_DOMAINS,
        )
        plugin.default_window_s = settings.QUEUE_WINDOW
        try:
            plugin.pools = pools_from_settings(settings)
        except ProxyConfigError as exc:  # the crawlers refuse to start on it; stats still answer
            logger.warning("%s; stats proxies lists the proxies that served requests only", exc)
        plugin.heartbeat_timeout_s = settings.HEARTBEAT_TIMEOUT
        return plugin

    def accepts(self, kind: str, request: dict[str, Any]) -> bool:
        return kind == "stats"

    def handle(self, kind: str, request: dict[str, Any]) -> list[Outbound]:
        kind_ = request.get("stats") or "all"
        if kind_ not in stats_types():
            raise ValueError(f"unknown stats type {kind_!r}")
        message: dict[str, Any] = {
            "stats": kind_,
            "appid": request["appid"],
            "uuid": request["uuid"],
            "server_time": server_time(),
        }
        message.update(self.body(kind_))
        return [Outbound(message)]

    def body(self, kind: str) -> dict[str, Any]:
        """The type-specific part of a stats answer."""
        if kind == "crawler":
            return self.crawler_body()
        if kind == "spider":
            return {"spiders": self.spiders()}
        if kind == "machine":
            return {"machines": self.machines()}
        if kind == "queue":
            return {"queues": self.queues()}
        if kind == REST:
            return self.rest_body()
        if kind == CLEANER:
            return self.cleaner_body()
        if kind == "proxies":
            return {"proxies": proxy_overview(self.redis, self.keys, self.default_window_s, self.pools)}
        if kind == "sink":  # the sinks' own view (utils/state/sinks.py; §20.7)
            return sink_stats_body(self.redis, self.keys, self.stats, self.heartbeat_timeout_s)
        if kind == "all":  # every kind that is a stats type (crawlhive.utils.process.kinds)
            return {name: self.body(name) for name in stats_kinds()}
        return self.monitor_body(kind)  # a kind of the registry: its counters and live nodes

    def cleaner_body(self) -> dict[str, Any]:
        """The cleaners' counters (docs/contract.md §13), each a window map, the same per host
        (``machines``) and their live nodes."""
        per_host = [c for c in self.stats.counters(CLEANER) if parse_cleaner_machine_counter_name(c[1])]
        maps = self.stats.read_many([(CLEANER, name) for name in CLEANER_COUNTERS] + per_host)
        body: dict[str, Any] = {name: maps.get((CLEANER, name)) or {} for name in CLEANER_COUNTERS}
        machines: dict[str, dict[str, Any]] = {}
        for counter in per_host:
            parsed = parse_cleaner_machine_counter_name(counter[1])
            if parsed and maps.get(counter):
                machines.setdefault(parsed[0], {})[parsed[1]] = maps[counter]
        if machines:
            body["machines"] = dict(sorted(machines.items()))
        nodes = live_nodes(self.redis, self.keys, CLEANER)
        if nodes:
            body["nodes"] = nodes
        return body

    def monitor_body(self, component: str) -> dict[str, Any]:
        """``total``, ``fail``, ``plugins`` and ``nodes`` of a monitor, each only with data."""
        maps = self.stats.read_many(self.stats.counters(component))
        body: dict[str, Any] = {}
        for name in (TOTAL, FAIL):
            if maps.get((component, name)):
                body[name] = maps[(component, name)]
        plugins = {}
        for (_, name), window_map in sorted(maps.items()):
            plugin = parse_plugin_counter_name(name)
            if plugin and window_map:
                plugins[plugin] = window_map
        if plugins:
            body["plugins"] = plugins
        nodes = live_nodes(self.redis, self.keys, component)
        if nodes:
            body["nodes"] = nodes
        return body

    def rest_body(self) -> dict[str, Any]:
        nodes = live_nodes(self.redis, self.keys, REST)
        return {"nodes": nodes} if nodes else {}

    def crawler_body(self) -> dict[str, Any]:
        queues = self.queues()
        return {"spiders": self.spiders(), "machines": self.machines(), "queue": queues, "queues": dict(queues)}

    def _status_maps(self, wanted: str) -> dict[str, dict[str, dict[str, int]]]:
        """``who -> {"<code>": window map}`` of the crawler's ``wanted`` (spider or machine)
        counters, codes in STATS_RESPONSE_CODES only, empty maps left out."""
        names = []
        for component, name in self.stats.counters(CRAWLER):
            parsed = parse_status_counter_name(name)
            if parsed and parsed[0] == wanted and parsed[2] in self.response_codes:
                names.append((component, name))
        out: dict[str, dict[str, dict[str, int]]] = {}
        for (_, name), window_map in self.stats.read_many(names).items():
            parsed = parse_status_counter_name(name)
            if parsed and window_map:
                out.setdefault(parsed[1], {})[str(parsed[2])] = window_map
        return out

    def spiders(self) -> dict[str, Any]:
        """The ``spiders`` map: live crawler processes per spider type, plus response counters."""
        live = Counter(str(beat.get("spider") or "unknown") for beat in live_heartbeats(self.redis, self.keys, CRAWLER))
        counters = self._status_maps("spider")
        spiders: dict[str, Any] = {
            "unique_spider_count": len(live),
            "total_spider_count": sum(live.values()),
        }
        for spider in sorted(set(live) | set(counters)):
            spiders[spider] = {"count": live.get(spider, 0), **dict(sorted(counters.get(spider, {}).items()))}
        return spiders

    def machines(self) -> dict[str, Any]:
        """The ``machines`` map: per host with crawler counters, status code -> window map."""
        counters = self._status_maps("machine")
        machines: dict[str, Any] = {"count": len(counters)}
        for host in sorted(counters):
            machines[host] = dict(sorted(counters[host].items()))
        return machines

    def queues(self) -> dict[str, Any]:
        """The ``queues`` map: backlog per spider type with queued requests, domains capped, and
        ``crawlers``: the live crawler processes of that spider type (0: its crawls wait for a
        crawler nobody runs, docs/contract.md §11). The rendering lane of a spider type is
        ``queue_<spider>+render``, with its rendering crawlers (§15)."""
        live = Counter(
            (str(beat.get("spider") or "unknown"), bool(beat.get("render")))
            for beat in live_heartbeats(self.redis, self.keys, CRAWLER)
        )
        queues: dict[str, Any] = {}
        total = 0
        for spider, render in [(s, r) for s in sorted(self.frontier.active_spiders()) for r in (False, True)]:
            backlog = self.frontier.spider_backlog(spider, render)
            if not backlog:
                continue
            spider_total = sum(backlog.values())
            ranked = sorted(backlog.items(), key=lambda item: (-item[1], item[0]))[: self.max_domains]
            queues[f"queue_{spider}{RENDER_QUEUE_SUFFIX if render else ''}"] = {
                "spider_backlog": spider_total,
                "num_domains": len(backlog),
                "crawlers": live.get((spider, render), 0),
                "domains": [{"domain": domain, "backlog": n} for domain, n in ranked],
            }
            total += spider_total
        queues["total_backlog"] = total
        return queues
