"""What the cluster shows of its crawlers (:mod:`crawlhive.utils.process.views`): the ``crawler``,
``spider``, ``machine``, ``queue`` and ``proxies`` stats types (docs/contract.md §4.7, §21.6), the
proxy and recrawl ``/metrics`` families (§21.6, §19.6) and the dashboard's proxies card.

Read from Redis only, and imports no Scrapy: the redis-monitor and REST load it by its dotted path
(``crawler/kind.py``), never importing the crawler itself.

Counter names are the contract in :mod:`crawlhive.utils.state.stats` (``spider:<spider>:<code>`` and
``machine:<host>:<code>``). Live processes come from heartbeats (:func:`live_heartbeats`); crawler
heartbeats carry their spider type as ``spider`` and ``render`` for a rendering crawler. Queue
backlogs are summed per domain by one script per spider type
(:meth:`~crawlhive.utils.frontier.FrontierReader.spider_backlog`), never by reading queued requests.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from crawlhive.utils.process.views import KindView
from crawlhive.utils.state.crawls import MAX_CRAWLS, newest_active
from crawlhive.utils.state.heartbeat import live_heartbeats
from crawlhive.utils.state.proxies import proxy_overview
from crawlhive.utils.state.recrawl import Crawl, recrawl_summaries
from crawlhive.utils.state.stats import CRAWLER, LIFETIME, parse_fetch_counter_name, parse_status_counter_name

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from crawlhive.utils.backends.keys import Keys
    from crawlhive.utils.backends.redis_types import RedisClient

#: Suffix of the ``queues`` entry of a spider type's rendering lane (``+`` is not allowed in spider ids).
RENDER_QUEUE_SUFFIX = "+render"


class CrawlerView(KindView):
    """The crawlers' stats bodies, metric families and card (see the module docstring)."""

    def crawler_body(self) -> dict[str, Any]:
        """``stats: crawler``: the spiders, machines and queues maps (``queue`` and ``queues``: the
        same), and the fetch ladder's counts (``fetch``, §25.7)."""
        queues = self.queues()
        return {
            "spiders": self.spiders(),
            "machines": self.machines(),
            "queue": queues,
            "queues": dict(queues),
            "fetch": self.fetch(),
        }

    def spider_body(self) -> dict[str, Any]:
        return {"spiders": self.spiders()}

    def machine_body(self) -> dict[str, Any]:
        return {"machines": self.machines()}

    def queue_body(self) -> dict[str, Any]:
        return {"queues": self.queues()}

    def fetch_body(self) -> dict[str, Any]:
        """``stats: fetch`` (§25.7): :meth:`fetch`."""
        return {"fetch": self.fetch()}

    def proxies_body(self) -> dict[str, Any]:
        """``stats: proxies`` (§21.6): :func:`proxy_overview` with the configured pools."""
        return {"proxies": self.proxy_overview()}

    bodies = {
        "crawler": crawler_body,
        "spider": spider_body,
        "machine": machine_body,
        "queue": queue_body,
        "proxies": proxies_body,
        "fetch": fetch_body,
    }

    # --- the maps ----------------------------------------------------------------------------------

    def _status_maps(self, wanted: str) -> dict[str, dict[str, dict[str, int]]]:
        """``who -> {"<code>": window map}`` of the crawler's ``wanted`` (spider or machine)
        counters, codes in STATS_RESPONSE_CODES only, empty maps left out."""
        names = []
        for component, name in self.stats.counters(CRAWLER):
            parsed = parse_status_counter_name(name)
            if parsed and parsed[0] == wanted and parsed[2] in self.context.response_codes:
                names.append((component, name))
        out: dict[str, dict[str, dict[str, int]]] = {}
        for (_, name), window_map in self.stats.read_many(names).items():
            parsed = parse_status_counter_name(name)
            if parsed and window_map:
                out.setdefault(parsed[1], {})[str(parsed[2])] = window_map
        return out

    def fetch(self) -> dict[str, Any]:
        """The fetch ladder's counts (§25.7): ``{"spiders": {spider: {what: window map}}, "machines":
        {host: {what: window map}}}``, *what* a rung (``plain``, ``impersonate``, ``render``: the
        responses it fetched) or ``climbs``; counters never incremented left out."""
        names = [(c, n) for c, n in self.stats.counters(CRAWLER) if parse_fetch_counter_name(n)]
        out: dict[str, dict[str, dict[str, Any]]] = {"spiders": {}, "machines": {}}
        for (_, name), window_map in sorted(self.stats.read_many(names).items()):
            parsed = parse_fetch_counter_name(name)
            if parsed and window_map:
                kind, who, what = parsed
                out[f"{kind}s"].setdefault(who, {})[what] = window_map
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
        frontier = self.context.frontier
        live = Counter(
            (str(beat.get("spider") or "unknown"), bool(beat.get("render")))
            for beat in live_heartbeats(self.redis, self.keys, CRAWLER)
        )
        queues: dict[str, Any] = {}
        total = 0
        for spider, render in [(s, r) for s in sorted(frontier.active_spiders()) for r in (False, True)]:
            backlog = frontier.spider_backlog(spider, render)
            if not backlog:
                continue
            spider_total = sum(backlog.values())
            ranked = sorted(backlog.items(), key=lambda item: (-item[1], item[0]))[: self.context.queue_max_domains]
            queues[f"queue_{spider}{RENDER_QUEUE_SUFFIX if render else ''}"] = {
                "spider_backlog": spider_total,
                "num_domains": len(backlog),
                "crawlers": live.get((spider, render), 0),
                "domains": [{"domain": domain, "backlog": n} for domain, n in ranked],
            }
            total += spider_total
        queues["total_backlog"] = total
        return queues

    def proxy_overview(self) -> dict[str, Any]:
        """Proxies, rests, waiting domains and slowed domains (:func:`proxy_overview`, §21.6)."""
        return proxy_overview(self.redis, self.keys, self.context.window_s, self.context.proxy_pools)

    # --- /metrics and the dashboard ----------------------------------------------------------------

    def ready(self) -> dict[tuple[str, bool], tuple[int, int]]:
        """``(spider, rendering lane) -> (domains, queued requests)`` of the work ready to fetch
        now: in domains whose ready time (their score in ``domains``, pushed on by the throttle, a
        Retry-After or a domain config) is not after the Redis clock; a throttled or parked domain's
        work is left out. What autoscalers read (deploy/kubernetes/, docs/kubernetes.md)."""
        frontier = self.context.frontier
        now = float(self.redis.time()[0])
        out: dict[tuple[str, bool], tuple[int, int]] = {}
        for spider in sorted(frontier.active_spiders()):
            for render in (False, True):
                backlog = frontier.spider_backlog(spider, render)
                if not backlog:
                    continue
                pipe = self.redis.pipeline(transaction=False)
                for shard in range(self.keys.shards):
                    pipe.zrangebyscore(self.keys.domains(spider, render, shard), "-inf", now)
                ready = {d.decode() if isinstance(d, bytes) else d for reply in pipe.execute() for d in reply}
                ready &= set(backlog)
                out[(spider, render)] = (len(ready), sum(backlog[d] for d in ready))
        return out

    def metrics(self) -> Iterator[Metric]:
        """The ready work (:meth:`ready`), the fetch ladder's counts (§25.7), the proxy and
        adaptive-throttle families (§21.6), then the recrawl schedule's (§19.6)."""
        yield from ready_metrics(self.ready())
        yield from fetch_metrics(self.fetch())
        yield from proxy_metrics(self.proxy_overview(), names=self.context.metrics_names)
        crawls = [ref for ref, _started in newest_active(self.redis, self.keys, MAX_CRAWLS)]
        yield from recrawl_metrics(self.redis, self.keys, crawls)

    def cards(self) -> dict[str, Any]:
        """The proxies card (§21.6)."""
        return {"proxies": proxy_rows(self.proxy_overview())}


def ready_metrics(ready: dict[tuple[str, bool], tuple[int, int]]) -> Iterator[Metric]:
    """``crawlhive_queue_ready_domains`` and ``crawlhive_queue_ready_backlog`` per spider type and
    lane (``plain``, ``render``) from :meth:`CrawlerView.ready`; a lane with nothing queued shows 0."""
    domains = GaugeMetricFamily(
        "crawlhive_queue_ready_domains",
        "Domains with queued requests that may be fetched now (not throttled or parked), per spider type and lane.",
        labels=["spiderid", "lane"],
    )
    backlog = GaugeMetricFamily(
        "crawlhive_queue_ready_backlog",
        "Queued requests in the domains that may be fetched now, per spider type and lane.",
        labels=["spiderid", "lane"],
    )
    for spider in sorted({spider for spider, _ in ready}):
        for render, lane in ((False, "plain"), (True, "render")):
            n_domains, n_requests = ready.get((spider, render), (0, 0))
            domains.add_metric([spider, lane], n_domains)
            backlog.add_metric([spider, lane], n_requests)
    yield from (domains, backlog)


def fetch_metrics(fetch: dict[str, Any]) -> Iterator[Metric]:
    """``crawlhive_fetch_responses{spiderid, rung}`` and ``crawlhive_fetch_climbs{spiderid}``
    (counters, lifetime) from :meth:`CrawlerView.fetch`'s spider maps; per host: ``stats fetch``."""
    responses = CounterMetricFamily(
        "crawlhive_fetch_responses",
        "Responses each fetch rung (plain, impersonate, render) fetched, per spider type (docs/contract.md §25).",
        labels=["spiderid", "rung"],
    )
    climbs = CounterMetricFamily(
        "crawlhive_fetch_climbs", "Climbs of the auto fetch ladder past a wall, per spider type.", labels=["spiderid"]
    )
    for spider, counts in sorted(fetch["spiders"].items()):
        for rung in ("plain", "impersonate", "render"):
            if rung in counts:
                responses.add_metric([spider, rung], counts[rung].get(LIFETIME, 0))
        climbs.add_metric([spider], counts.get("climbs", {}).get(LIFETIME, 0))
    yield from (responses, climbs)


def proxy_metrics(overview: dict[str, Any], names: bool = True) -> Iterator[Metric]:
    """The proxy and adaptive-throttle metrics of docs/contract.md §21.6 from :func:`proxy_overview`:
    proxies are labelled ``host:port`` (never their URL), or without *names* (METRICS_NAMES) by
    their place in their pool (``1``, ``2``, … in the order of their ``host:port``), and no label
    names a domain."""
    requests = CounterMetricFamily(
        "crawlhive_proxy_requests",
        "Responses and failures through each proxy, by pool and outcome (ok, ban) (docs/contract.md §21).",
        labels=["pool", "proxy", "outcome"],
    )
    resting = GaugeMetricFamily(
        "crawlhive_proxy_resting_domains", "Domains a proxy rests for after bans.", labels=["pool", "proxy"]
    )
    sessions = GaugeMetricFamily(
        "crawlhive_proxy_sessions", "Live sticky sessions per proxy.", labels=["pool", "proxy"]
    )
    waiting = GaugeMetricFamily(
        "crawlhive_proxy_waiting_domains", "Domains whose every proxy of the pool rests.", labels=["pool"]
    )
    for pool, proxies in sorted(overview["pools"].items()):
        for place, (host, info) in enumerate(sorted(proxies.items()), start=1):
            proxy = host if names else str(place)
            for outcome, count in sorted(info["requests"].items()):
                requests.add_metric([pool, proxy, outcome], count)
            resting.add_metric([pool, proxy], len(info["resting"]))
            sessions.add_metric([pool, proxy], info["sessions"])
        waiting.add_metric([pool], len(overview["waiting"].get(pool, {})))
    slowed = GaugeMetricFamily(
        "crawlhive_autothrottle_slowed_domains", "Domains the adaptive throttle holds below their limit (§21.4)."
    )
    slowed.add_metric([], len(overview["autothrottle"]))
    lowest = GaugeMetricFamily(
        "crawlhive_autothrottle_lowest_factor",
        "The lowest fraction of its configured rate any domain is held to (1: none slowed); per domain: stats proxies.",
    )
    lowest.add_metric([], min((d["factor"] for d in overview["autothrottle"].values()), default=1.0))
    yield from (requests, resting, sessions, waiting, slowed, lowest)


def recrawl_metrics(redis: RedisClient, keys: Keys, crawls: list[Crawl]) -> Iterator[Metric]:
    """``crawlhive_recrawl_scheduled``, ``crawlhive_recrawl_due`` (gauges) and
    ``crawlhive_recrawl_visits{outcome}`` (counter) per spider type, over the active recurring crawls."""
    scheduled = GaugeMetricFamily(
        "crawlhive_recrawl_scheduled", "Pages on a recrawl schedule per spider type.", labels=["spiderid"]
    )
    due = GaugeMetricFamily(
        "crawlhive_recrawl_due", "Scheduled pages due and not yet visited again (backlog).", labels=["spiderid"]
    )
    visits = CounterMetricFamily(
        "crawlhive_recrawl_visits",
        "Revisits of scheduled pages by outcome (changed, unchanged, gone).",
        labels=["spiderid", "outcome"],
    )
    totals: dict[str, dict[str, int]] = {}
    for (spider, _appid, _crawlid), counts in recrawl_summaries(redis, keys, crawls).items():
        total = totals.setdefault(spider, dict.fromkeys(("scheduled", "due", "changed", "unchanged", "gone"), 0))
        for name in total:
            total[name] += int(counts[name])
    for spider, total in sorted(totals.items()):
        scheduled.add_metric([spider], total["scheduled"])
        due.add_metric([spider], total["due"])
        for outcome in ("changed", "unchanged", "gone"):
            visits.add_metric([spider, outcome], total[outcome])
    yield scheduled
    yield due
    yield visits


def proxy_rows(overview: dict[str, Any]) -> dict[str, Any]:
    """The proxies card (§21.6): one row per pool and proxy (``host:port``: never a URL or a
    credential), the domains waiting for a proxy, and the domains the adaptive throttle slowed."""
    rows = [
        {
            "pool": pool,
            "proxy": proxy,
            "ok": info["requests"].get("ok", 0),
            "bans": info["requests"].get("ban", 0),
            "resting": sorted(info["resting"]),
            "sessions": info["sessions"],
        }
        for pool, proxies in sorted(overview["pools"].items())
        for proxy, info in sorted(proxies.items())
    ]
    waiting = [
        {"pool": pool, "domain": domain, "until": until}
        for pool, domains in sorted(overview["waiting"].items())
        for domain, until in sorted(domains.items())
    ]
    slowed = [{"domain": d, "factor": v["factor"]} for d, v in overview["autothrottle"].items()]
    return {"rows": rows, "waiting": waiting, "slowed": slowed}
