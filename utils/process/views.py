"""What each process kind shows of itself: its view (Celery's bootsteps have ``info()``).

A kind (:class:`~crawlhive.utils.process.kinds.ProcessKind`) names its view by a dotted path in
:attr:`~crawlhive.utils.process.kinds.ProcessKind.view` (``"crawlhive.crawler.view.CrawlerView"``),
loaded only when something observes the cluster: a kind's module stays cheap to import, and the
redis-monitor and REST reach a service's view without importing that service (import-linter keeps
the services apart; the registry loads the view by string, as :func:`worker_entry` loads a worker).

A view reads Redis state only (never a Kafka client, never Scrapy) and provides:

* its **stats bodies** (docs/contract.md §4.7): :attr:`KindView.bodies`, stats type -> the method
  that answers it. The kind's own type (its name) defaults to :meth:`KindView.counters_body`;
  further types (the crawler's ``spider``, ``machine``, ``queue``, ``proxies``) become stats types
  of the registry (:func:`~crawlhive.utils.process.kinds.stats_types`).
* its **metric families** for ``/metrics`` (:meth:`KindView.metrics`), after the cluster's own.
* its **dashboard cards** (:meth:`KindView.cards`): ``{key: JSON-able data}`` added to
  ``GET /dashboard/data``, which the page renders by key.

A kind that names no view gets :class:`KindView` itself: its counters (``total``, ``fail``,
``plugin:<name>``) and live nodes as its stats type, no metric family and no card beyond the node
card every heartbeat kind has.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self

from crawlhive.utils.config.errors import PluginLoadError
from crawlhive.utils.process.kinds import ProcessKind, kind_named, kinds
from crawlhive.utils.state.heartbeat import live_nodes
from crawlhive.utils.state.stats import FAIL, TOTAL, parse_plugin_counter_name

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from crawlhive.utils.backends.keys import Keys
    from crawlhive.utils.backends.redis_types import RedisClient
    from crawlhive.utils.config.settings import Settings
    from crawlhive.utils.frontier import FrontierReader
    from crawlhive.utils.rules.proxy_pools import ProxyPools
    from crawlhive.utils.state.stats import Stats

#: A stats body: called on a view, returns the type-specific part of a stats answer.
Body = Callable[[Any], dict[str, Any]]


@dataclass(frozen=True)
class ViewContext:
    """What a view reads from: the cluster's Redis and the settings that shape the answers.

    The redis-monitor's stats plugin and REST's cluster view each build one
    (:meth:`from_settings`, or field by field); views read, never write (except pruning stale
    entries, as the heartbeat and sink readers do).

    Attributes:
        redis: a bytes client on REDIS_URL.
        keys: the key formats (REDIS_KEY_PREFIX, FRONTIER_SHARDS).
        stats: the rolling counters (STATS_TIMES).
        frontier: reads queues and crawl state (CRAWL_RECORD_TTL).
        response_codes: the status codes stats answers and metrics count (STATS_RESPONSE_CODES).
        queue_max_domains: the domains listed per queue in ``stats queue`` (STATS_QUEUE_MAX_DOMAINS).
        window_s: the default throttle window, in seconds (QUEUE_WINDOW).
        heartbeat_timeout_s: how old a published state may be and still count (HEARTBEAT_TIMEOUT).
        proxy_pools: the configured proxy pools (PROXY_POOLS), or None when unknown or invalid.
        metrics_names: whether ``/metrics`` names proxies and domains (METRICS_NAMES).
        settings: the settings themselves, for a view of a kind outside crawlhive that has its own
            (None when the context was built field by field).
    """

    redis: RedisClient
    keys: Keys
    stats: Stats
    frontier: FrontierReader
    response_codes: frozenset[int]
    queue_max_domains: int = 10
    window_s: float = 60.0
    heartbeat_timeout_s: float = 30.0
    proxy_pools: ProxyPools | None = None
    metrics_names: bool = True
    settings: Settings | None = None

    @classmethod
    def from_settings(cls, redis: RedisClient, settings: Settings, keys: Keys | None = None) -> Self:
        """The context of *settings* on *redis* (invalid PROXY_POOLS: no pools, as the crawlers
        refuse to start on them and the views list the proxies that served requests only)."""
        from crawlhive.utils.backends.redis_clients import keys_from_settings
        from crawlhive.utils.frontier import FrontierReader
        from crawlhive.utils.rules.proxy_pools import ProxyConfigError, pools_from_settings
        from crawlhive.utils.state.stats import Stats

        keys = keys if keys is not None else keys_from_settings(settings)
        try:
            pools: ProxyPools | None = pools_from_settings(settings)
        except ProxyConfigError:
            pools = None
        names = settings.METRICS_NAMES if settings.METRICS_NAMES is not None else not settings.REST_API_KEY
        return cls(
            redis=redis,
            keys=keys,
            stats=Stats(redis, keys, settings.STATS_TIMES),
            frontier=FrontierReader(redis, keys, settings.CRAWL_RECORD_TTL),
            response_codes=frozenset(int(c) for c in settings.STATS_RESPONSE_CODES),
            queue_max_domains=settings.STATS_QUEUE_MAX_DOMAINS,
            window_s=settings.QUEUE_WINDOW,
            heartbeat_timeout_s=settings.HEARTBEAT_TIMEOUT,
            proxy_pools=pools,
            metrics_names=names,
            settings=settings,
        )


class KindView:
    """The view of one kind (the default view, and the base of every other).

    A subclass declares its stats types in :attr:`bodies` and overrides :meth:`metrics` and
    :meth:`cards` when it has any. Every method blocks on Redis and raises ``redis.RedisError``
    on failure (the caller answers with the failure: a stats request is retried, ``/metrics`` 500s).

    Args:
        kind: the kind's name (its heartbeat and stats component).
        context: what the view reads from.
    """

    #: Stats type -> the method (of this class) that answers it. A type that is the kind's own
    #: name overrides :meth:`counters_body`; every other one is a further stats type.
    bodies: ClassVar[Mapping[str, Body]] = {}

    def __init__(self, kind: str, context: ViewContext) -> None:
        self.kind = kind
        self.context = context
        self.redis = context.redis
        self.keys = context.keys
        self.stats = context.stats

    @classmethod
    def from_context(cls, kind: str, context: ViewContext) -> Self:
        """The view of *kind* on *context* (override to read what the view needs once)."""
        return cls(kind, context)

    @classmethod
    def stats_types(cls, kind: str) -> tuple[str, ...]:
        """The further stats types this view answers besides *kind*'s own, in declaration order."""
        return tuple(name for name in cls.bodies if name != kind)

    def answers(self, stats_type: str) -> bool:
        """Whether :meth:`stats_body` answers *stats_type*."""
        return stats_type == self.kind or stats_type in self.bodies

    def stats_body(self, stats_type: str) -> dict[str, Any]:
        """The type-specific part of the stats answer of *stats_type* (:meth:`answers` must say so).

        Raises:
            KeyError: the view does not answer *stats_type*.
        """
        body = self.bodies.get(stats_type)
        if body is not None:
            return body(self)
        if stats_type == self.kind:
            return self.counters_body()
        raise KeyError(stats_type)

    def counters_body(self) -> dict[str, Any]:
        """``total``, ``fail``, ``plugins`` (``plugin:<name>`` counters) and ``nodes`` of the kind,
        each only with data (the default stats body)."""
        component = self.kind
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
        nodes = self.nodes()
        if nodes:
            body["nodes"] = nodes
        return body

    def nodes(self) -> dict[str, list[str]]:
        """The node map of the kind's live processes (host -> node ids; docs/contract.md §4.1)."""
        return live_nodes(self.redis, self.keys, self.kind)

    def metrics(self) -> Iterator[Metric]:
        """The kind's own ``/metrics`` families (docs/contract.md §7.2); none by default."""
        return iter(())

    def cards(self) -> dict[str, Any]:
        """The kind's dashboard cards: ``{key of GET /dashboard/data: JSON-able data}``; none by default."""
        return {}


def view_class(name: str) -> type[KindView]:
    """The view class of the registered kind *name* (:class:`KindView` when it names none),
    imported on first use.

    Raises:
        KeyError: no kind is named *name*.
        PluginLoadError: its view does not import or is not a KindView subclass.
    """
    kind = kind_named(name)
    return _load_view(name, kind.view) if kind.view else KindView


@functools.cache
def _load_view(name: str, path: str) -> type[KindView]:
    from crawlhive.utils.process.plugins import load_object

    try:
        loaded = load_object(path)
    except Exception as exc:
        raise PluginLoadError(f"the view of process kind {name!r} ({path}) failed to load: {exc!r}") from exc
    if not (isinstance(loaded, type) and issubclass(loaded, KindView)):
        raise PluginLoadError(f"the view of process kind {name!r} ({path}) is not a KindView subclass")
    return loaded


def views(context: ViewContext) -> list[KindView]:
    """One view per registered kind, in the registry's order, on *context*.

    Raises:
        PluginLoadError: a kind's view does not load.
    """
    return [view_class(kind.name).from_context(kind.name, context) for kind in kinds()]


def extra_stats_types(kind: ProcessKind) -> tuple[str, ...]:
    """The stats types *kind*'s view answers besides the kind's own (imports the view)."""
    return view_class(kind.name).stats_types(kind.name)
