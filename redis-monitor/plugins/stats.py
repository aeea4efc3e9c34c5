"""stats (docs/contract.md §4.7): cluster statistics, answered by each process kind's view.

The registry (:mod:`crawlhive.utils.process.kinds`) lists the stats types: ``all``, each kind that
is one, then the further types of each kind's view (the crawler's ``spider``, ``machine``,
``queue``, ``proxies``). The answer's body is the view's (:mod:`crawlhive.utils.process.views`:
``crawler/view.py``, ``cleaner/view.py``, ``sink/view.py``, ``rest/view.py``, loaded by dotted
path, so this plugin never imports another service); a kind that names no view is answered with
its counters (``total``, ``fail``, ``plugin:<name>``) and live nodes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Self

from crawlhive.redis_monitor.plugins import MonitorPlugin, Outbound, server_time
from crawlhive.utils.process.kinds import stats_kinds, stats_types
from crawlhive.utils.process.views import KindView, ViewContext, views
from crawlhive.utils.rules.proxy_pools import ProxyConfigError, ProxyPools, pools_from_settings

if TYPE_CHECKING:
    from crawlhive.redis_monitor.monitor import RedisMonitor

logger = logging.getLogger(__name__)


class StatsMonitor(MonitorPlugin):
    """Answers stats requests of every type, through the views of the registry's kinds.

    Args:
        context: what the views read (the monitor's Redis, keys, stats and frontier reader, and the
            settings that shape the answers), built once.
    """

    name = "StatsMonitor"

    def __init__(self, context: ViewContext) -> None:
        self.context = context

    @classmethod
    def from_monitor(cls, monitor: RedisMonitor) -> Self:
        settings = monitor.settings
        pools: ProxyPools | None = None
        try:
            pools = pools_from_settings(settings)
        except ProxyConfigError as exc:  # the crawlers refuse to start on it; stats still answer
            logger.warning("%s; stats proxies lists the proxies that served requests only", exc)
        return cls(
            ViewContext(
                redis=monitor.redis,
                keys=monitor.keys,
                stats=monitor.stats,
                frontier=monitor.frontier,
                response_codes=frozenset(int(c) for c in settings.STATS_RESPONSE_CODES),
                queue_max_domains=settings.STATS_QUEUE_MAX_DOMAINS,
                window_s=settings.QUEUE_WINDOW,
                heartbeat_timeout_s=settings.HEARTBEAT_TIMEOUT,
                proxy_pools=pools,
            )
        )

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
        """The type-specific part of a stats answer: ``all`` is every kind that is a stats type
        (in the registry's order); any other type is answered by the view that declares it."""
        shown = views(self.context)
        if kind == "all":
            by_kind = {view.kind: view for view in shown}
            return {name: by_kind[name].stats_body(name) for name in stats_kinds()}
        for view in shown:
            if view.answers(kind):
                return view.stats_body(kind)
        return KindView(kind, self.context).counters_body()  # a component no kind declares
