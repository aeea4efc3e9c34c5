"""``GET /metrics``: Prometheus text format 0.0.4 (docs/contract.md §7.2).

Cluster-wide values are read from Redis at scrape time by :class:`ClusterCollector`: the nodes,
queues and counters of one :meth:`ClusterView.snapshot`, then each kind's own families from its
view, in the registry's order (:mod:`crawlhive.utils.process.views`: the crawler's proxies and
recrawl schedules, the sinks'); the REST process adds its own (responses by status, answers waiting
and stored, and prometheus-client's process and platform collectors). Labels are only ``component``,
``spiderid``, ``code``, ``kind``, ``stage``, ``method``, ``le``, ``outcome``, ``lane`` (``plain``,
``render``), ``rung`` (``plain``, ``impersonate``, ``render``, §25), ``node`` (a Redis node's
address), for proxies (§21.6) ``pool`` and ``proxy`` (``host:port``), and ``domain`` for the
METRICS_TOP_DOMAINS busiest domains only (§22.3), and those two only as METRICS_NAMES says: never
an appid, crawlid, URL or credential.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from redis.cluster import RedisCluster

from crawlhive.utils.process.kinds import heartbeat_components
from crawlhive.utils.state.response_metrics import read_histograms, read_top_domains

if TYPE_CHECKING:
    from crawlhive.rest.cluster import ClusterView

#: The Content-Type of the text exposition format this endpoint writes.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ClusterCollector(Collector):
    """Collects the metrics table of docs/contract.md §7.2 from Redis on every scrape.

    A Redis failure propagates out of :meth:`collect` (``redis.RedisError``); the endpoint answers
    500 ``Unable to connect to Redis``.
    """

    def __init__(self, view: ClusterView) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        snap = self.view.snapshot()
        counters = snap.counters
        assert counters is not None

        nodes = GaugeMetricFamily("crawlhive_nodes", "Live processes per component (heartbeats).", labels=["component"])
        for component in heartbeat_components():
            nodes.add_metric([component], sum(len(ids) for ids in snap.nodes.get(component, {}).values()))
        yield nodes

        backlog = GaugeMetricFamily("crawlhive_queue_backlog", "Queued requests per spider type.", labels=["spiderid"])
        domains = GaugeMetricFamily(
            "crawlhive_queue_domains", "Domains with queued requests per spider type.", labels=["spiderid"]
        )
        inflight = GaugeMetricFamily(
            "crawlhive_inflight_requests", "Leased (in-flight) requests per spider type.", labels=["spiderid"]
        )
        active = GaugeMetricFamily(
            "crawlhive_active_crawls", "Crawls with queued or in-flight work per spider type.", labels=["spiderid"]
        )
        crawlers = GaugeMetricFamily(
            "crawlhive_spider_crawlers", "Live crawler processes per spider type.", labels=["spiderid"]
        )
        render_crawlers = GaugeMetricFamily(
            "crawlhive_spider_render_crawlers",
            "Live rendering crawler processes per spider type (docs/contract.md §15).",
            labels=["spiderid"],
        )
        for spider, summary in sorted(snap.spiders.items()):
            crawlers.add_metric([spider], summary.crawlers)
            render_crawlers.add_metric([spider], summary.render_crawlers)
            backlog.add_metric([spider], summary.backlog)
            domains.add_metric([spider], summary.domains)
            inflight.add_metric([spider], summary.inflight)
            active.add_metric([spider], summary.active_crawls)
        yield from (backlog, domains, inflight, active, crawlers, render_crawlers)

        spiders = sorted(set(snap.spiders) | set(counters.pages_crawled) | set(counters.requests_failed))
        pages = CounterMetricFamily("crawlhive_pages_crawled", "Items emitted per spider type.", labels=["spiderid"])
        failed = CounterMetricFamily(
            "crawlhive_requests_failed", "Requests that failed permanently (crawl dead letters).", labels=["spiderid"]
        )
        for spider in spiders:
            pages.add_metric([spider], counters.pages_crawled.get(spider, 0))
            failed.add_metric([spider], counters.requests_failed.get(spider, 0))
        responses = CounterMetricFamily(
            "crawlhive_responses", "Responses per spider type and status code.", labels=["spiderid", "code"]
        )
        for (spider, code), count in sorted(counters.responses.items()):
            responses.add_metric([spider, code], count)
        yield from (pages, responses, failed)

        seconds = HistogramMetricFamily(
            "crawlhive_response_seconds",
            "Download time of responses per spider type (crawlers' download_latency; §22.3).",
            labels=["spiderid"],
        )
        for spider, (buckets, total) in sorted(read_histograms(self.view.redis, self.view.keys, spiders).items()):
            seconds.add_metric([spider], buckets, total)
        by_domain = CounterMetricFamily(
            "crawlhive_domain_responses",
            "Responses of the METRICS_TOP_DOMAINS busiest domains by outcome: success (status < 400) or "
            "failure (status >= 400 or a network failure); §22.3.",
            labels=["domain", "outcome"],
        )
        top = self.view.metrics_top_domains if self.view.metrics_names else 0  # METRICS_NAMES
        for domain, ok, bad in read_top_domains(self.view.redis, self.view.keys, top):
            by_domain.add_metric([domain, "success"], ok)
            by_domain.add_metric([domain, "failure"], bad)
        yield from (seconds, by_domain)

        incoming = CounterMetricFamily("crawlhive_incoming", "Incoming requests by kind.", labels=["kind"])
        for kind, count in counters.incoming.items():
            incoming.add_metric([kind], count)
        dead = CounterMetricFamily("crawlhive_dead_letter", "Dead letters by stage.", labels=["stage"])
        for stage, count in counters.dead_letters.items():
            dead.add_metric([stage], count)
        cleaned = CounterMetricFamily(
            "crawlhive_cleaner_records",
            "Records the cleaners handled, by outcome: cleaned, skipped, duplicates, dead_letters (§13).",
            labels=["kind"],
        )
        for kind, count in counters.cleaner.items():
            cleaned.add_metric([kind], count)
        yield from (incoming, dead, cleaned)
        for view in self.view.views():  # each kind's own families (§19.6, §20.7, §21.6)
            yield from view.metrics()


class RedisMemoryCollector(Collector):
    """``crawlhive_redis_memory_used_bytes`` and ``crawlhive_redis_memory_max_bytes`` (0 = no
    ``maxmemory``) of the frontier's Redis, per node (``host:port``; each primary of a Redis
    Cluster), from ``INFO memory`` at scrape time: what the alert on Redis memory near its limit
    reads (docker/monitoring/alerts.yml, §22.3). The crawl work is data: at ``maxmemory`` writes
    fail (§17)."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        client = self.view.redis
        if isinstance(client, RedisCluster):
            raw = client.info("memory", target_nodes=RedisCluster.PRIMARIES)
            infos = {str(node): info for node, info in raw.items()} if isinstance(raw, dict) else {}
            if infos and all(not isinstance(v, dict) for v in infos.values()):  # one node answered
                infos = {"cluster": raw}
        else:
            kwargs = client.connection_pool.connection_kwargs
            infos = {f"{kwargs.get('host', 'unix')}:{kwargs.get('port', 0)}": client.info("memory")}
        used = GaugeMetricFamily(
            "crawlhive_redis_memory_used_bytes", "Memory the frontier's Redis uses, per node.", labels=["node"]
        )
        limit = GaugeMetricFamily(
            "crawlhive_redis_memory_max_bytes", "The node's maxmemory (0: no limit).", labels=["node"]
        )
        for node, info in sorted(infos.items()):
            used.add_metric([node], float(info.get("used_memory", 0)))
            limit.add_metric([node], float(info.get("maxmemory", 0)))
        yield from (used, limit)


class FrontierTailCollector(Collector):
    """The queue tails (docs/contract.md §23), summed over the shards: what the store holds, what
    waits in Redis for it while it cannot be written, and how much has moved."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        totals = self.view.reader.tail_totals()
        gauges = (
            ("crawlhive_frontier_tail_requests", "Queued requests in tail segments of FRONTIER_TAIL_URL.", "requests"),
            ("crawlhive_frontier_tail_segments", "Tail segments in FRONTIER_TAIL_URL.", "segments"),
            ("crawlhive_frontier_tail_bytes", "Bytes of the tail segments in FRONTIER_TAIL_URL.", "bytes"),
            (
                "crawlhive_frontier_tail_waiting",
                "Requests waiting in Redis beyond their heads because FRONTIER_TAIL_URL cannot be written.",
                "waiting",
            ),
        )
        for name, doc, field in gauges:
            yield GaugeMetricFamily(name, doc, value=float(totals[field]))
        for name, doc, field in (
            ("crawlhive_frontier_tail_spilled", "Requests spilled from heads into tail segments.", "spilled"),
            ("crawlhive_frontier_tail_refilled", "Requests refilled from tail segments into heads.", "refilled"),
        ):
            yield CounterMetricFamily(name, doc, value=float(totals[field]))


class _Read(Collector):
    """One unlabelled gauge or counter whose value a callable gives at scrape time."""

    def __init__(
        self, family: type[GaugeMetricFamily | CounterMetricFamily], name: str, doc: str, read: Callable[[], float]
    ) -> None:
        self.family, self.name, self.doc, self.read = family, name, doc, read

    def collect(self) -> Iterator[Metric]:
        yield self.family(self.name, self.doc, value=self.read())


class RestMetrics:
    """The registry of one REST process: the cluster collector plus the process's own metrics."""

    def __init__(
        self,
        view: ClusterView,
        waiting: Callable[[], float],
        stored: Callable[[], float],
        cleaner_lag: Callable[[], float] | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ClusterCollector(view))
        self.registry.register(RedisMemoryCollector(view))
        self.registry.register(FrontierTailCollector(view))
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.responses = Counter(
            "crawlhive_rest_responses",
            "HTTP responses of this REST process by method and status code.",
            ["method", "code"],
            registry=self.registry,
        )
        self.registry.register(
            _Read(GaugeMetricFamily, "crawlhive_rest_feeds_waiting", "POST /feed calls waiting for an answer.", waiting)
        )
        self.registry.register(
            _Read(CounterMetricFamily, "crawlhive_rest_answers_stored", "Answers stored for POST /poll.", stored)
        )
        if cleaner_lag is not None:
            doc = "Records of crawled_firehose the cleaners have not committed yet (consumer lag, §13)."
            self.registry.register(_Read(GaugeMetricFamily, "crawlhive_cleaner_lag", doc, cleaner_lag))

    def render(self) -> bytes:
        """The exposition text (blocking: reads Redis; raises ``redis.RedisError`` on failure)."""
        return generate_latest(self.registry)
