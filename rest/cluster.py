"""Cluster-wide state read from Redis for ``/crawls``, ``/metrics`` and the dashboard (no ``KEYS``).

Everything comes from the shared library's structures: heartbeats (:func:`live_nodes`), the active
crawls set and crawl state (:class:`FrontierReader`), the lease sets, the throttle windows and the
stats counters (:class:`Stats`), named by the helpers of :mod:`crawlhive.utils.state.stats` (lifetime totals):

* kafka-monitor: ``fail`` (rejected requests, i.e. validation dead letters) and
  ``plugin_counter_name(<plugin>)`` (requests a plugin handled; the kind comes from the plugin class).
* crawler: ``crawler_counter_name(spider, code)`` (responses per status), ``items_counter_name(spider)``
  (items emitted) and ``failed_counter_name(spider)`` (crawl dead letters). Per-machine counters
  are not exposed (their label would be a host name).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crawlhive.rest.recrawl_view import mark_recurring
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.config.errors import KeyFormatError
from crawlhive.utils.frontier import CrawlState, FrontierReader
from crawlhive.utils.process.kinds import heartbeat_components
from crawlhive.utils.process.views import KindView, ViewContext, views
from crawlhive.utils.rules.budgets import budget_fields, page_budget
from crawlhive.utils.state.crawls import MAX_CRAWLS, epoch, newest_active, text
from crawlhive.utils.state.heartbeat import crawler_lanes, live_heartbeats, live_nodes, unserved_reason
from crawlhive.utils.state.proxies import domain_notes
from crawlhive.utils.state.stats import (
    CLEANER,
    CLEANER_COUNTERS,
    CRAWLER,
    FAIL,
    KAFKA_MONITOR,
    Stats,
    failed_counter_name,
    items_counter_name,
    parse_plugin_counter_name,
    parse_status_counter_name,
)

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

#: Components whose live processes are counted (docs/contract.md §7.2 ``crawlhive_nodes``).
#: Spider type always reported, even with nothing queued (the default spiderid).
DEFAULT_SPIDER = "link"
#: Most domains the dashboard lists (largest backlog first).
MAX_DOMAINS = 50


@dataclass(frozen=True)
class Counters:
    """Lifetime counters of the cluster, grouped as ``/metrics`` exposes them."""

    incoming: dict[str, int]
    pages_crawled: dict[str, int]
    responses: dict[tuple[str, str], int]
    requests_failed: dict[str, int]
    dead_letters: dict[str, int]
    cleaner: dict[str, int] = field(default_factory=dict)
    """The cleaners' lifetime counters: cleaned, skipped, duplicates, dead_letters (§13)."""


#: Why an active crawl served by crawlers waits: the throttle or a domain config holds every domain.
PARKED = "nothing in flight and every domain with queued work waits for the throttle or a domain config"


def waiting_reason(state: CrawlState, serving: set[tuple[str, bool]]) -> str | None:
    """Why *state* waits for a crawler, or None: see :func:`~crawlhive.utils.state.heartbeat.unserved_reason`
    (*serving*: ``(spiderid, render)`` of the live crawlers, §11, §15)."""
    return unserved_reason(state.spiderid, state.lanes, serving)


@dataclass
class SpiderSummary:
    spiderid: str
    backlog: int = 0
    domains: int = 0
    inflight: int = 0
    active_crawls: int = 0
    crawlers: int = 0
    """Live crawler processes serving this spider type (0 with a backlog: its crawls wait)."""
    render_crawlers: int = 0
    """Live rendering crawler processes of this spider type (§15; counted in ``crawlers`` too)."""


@dataclass
class Snapshot:
    """One consistent-enough read of everything the dashboard and ``/metrics`` show."""

    server_time: int
    nodes: dict[str, dict[str, list[str]]]
    crawls: list[CrawlState]
    spiders: dict[str, SpiderSummary]
    domains: list[dict[str, Any]] = field(default_factory=list)
    counters: Counters | None = None


class ClusterView:
    """Reads cluster state; every method blocks on Redis and raises ``redis.RedisError`` on failure.

    Args:
        redis: a bytes client on REDIS_URL.
        settings: REDIS_KEY_PREFIX, CRAWL_RECORD_TTL, STATS_TIMES, STATS_RESPONSE_CODES, QUEUE_WINDOW,
            SCHEDULER_TYPE_ENABLED, SCHEDULER_IP_ENABLED, CRAWLER_EGRESS_ID.
        plugin_kinds: kafka-monitor plugin stats name -> request kind (``ScraperHandler`` -> crawl).
    """

    def __init__(self, redis: RedisClient, settings: Settings, plugin_kinds: dict[str, str]) -> None:
        self.redis = redis
        self.keys = keys_from_settings(settings)
        self.record_ttl_s = settings.CRAWL_RECORD_TTL
        self.reader = FrontierReader(redis, self.keys, self.record_ttl_s)
        self.stats = Stats(redis, self.keys, settings.STATS_TIMES)
        self.plugin_kinds = dict(plugin_kinds)
        self.response_codes = {str(c) for c in settings.STATS_RESPONSE_CODES}
        self.throttle_window_s = settings.QUEUE_WINDOW
        self.throttle_by_spider = settings.SCHEDULER_TYPE_ENABLED
        #: Domains with their own counters on /metrics (docs/contract.md §22.3).
        self.metrics_top_domains = settings.METRICS_TOP_DOMAINS
        #: Whether /metrics names domains and proxies (METRICS_NAMES; unset: only without REST_API_KEY).
        self.metrics_names = settings.METRICS_NAMES if settings.METRICS_NAMES is not None else not settings.REST_API_KEY
        self.egress_id = settings.CRAWLER_EGRESS_ID if settings.SCHEDULER_IP_ENABLED else None
        self.heartbeat_timeout_s = settings.HEARTBEAT_TIMEOUT
        self.default_budget = settings.CRAWL_MAX_PAGES_DEFAULT
        #: What each kind's view reads (:mod:`crawlhive.utils.process.views`): the same clients.
        self.context = ViewContext.from_settings(redis, settings, self.keys)

    def views(self) -> list[KindView]:
        """Each registered kind's view (its ``/metrics`` families and dashboard cards), in order."""
        return views(self.context)

    def domain_notes(self, domains: list[str]) -> dict[str, dict[str, Any]]:
        """``proxy_wait_until`` / ``rate_factor`` of those of *domains* that have one (§21.3, §21.4)."""
        return domain_notes(self.redis, self.keys, domains, self.throttle_window_s)

    # --- one crawl ---------------------------------------------------------------------------------

    def crawl(self, spider: str | None, appid: str, crawlid: str) -> CrawlState | None:
        """The state of one crawl, or None if the cluster has no record of it.

        Known means: something queued or in flight, or its crawl record (kept CRAWL_RECORD_TTL after
        the last activity) exists. With *spider* None, the crawl of any spider type: ``link`` if it
        has one, else :meth:`find_spider`.
        """
        if spider is None:
            state = self.crawl(DEFAULT_SPIDER, appid, crawlid)
            if state is not None:
                return state
            found = self.find_spider(appid, crawlid)
            return None if found is None else self.crawl(found, appid, crawlid)
        state = self.reader.crawl_state(spider, appid, crawlid)
        if state.pending or state.inflight or self.redis.exists(self.keys.crawl(spider, appid, crawlid)):
            return state
        return None

    def find_spider(self, appid: str, crawlid: str) -> str | None:
        """The spider type of a crawl known by appid and crawlid only: the first (by name) of the
        active crawls, else of the recently finished ones, that has them; None if there is none.
        Walks both sets (``SSCAN`` / ``ZSCAN``): O(crawls), for the rare request without ``spiderid``."""
        found: list[str] = []
        for ref in self.redis.sscan_iter(self.keys.active_crawls(), count=1000):
            found += self._spider_of(ref, appid, crawlid)
        if not found:
            for ref, _score in self.redis.zscan_iter(self.keys.finished_crawls(), count=1000):
                found += self._spider_of(ref, appid, crawlid)
        return min(found) if found else None

    @staticmethod
    def _spider_of(ref: Any, appid: str, crawlid: str) -> list[str]:
        try:
            spider, ref_appid, ref_crawlid = Keys.parse_crawl_ref(text(ref))
        except KeyFormatError:
            return []
        return [spider] if (ref_appid, ref_crawlid) == (appid, crawlid) else []

    # --- the whole cluster ---------------------------------------------------------------------------

    def nodes(self) -> dict[str, dict[str, list[str]]]:
        """Node map (host -> node ids) of every component."""
        return {component: live_nodes(self.redis, self.keys, component) for component in heartbeat_components()}

    def active_crawls(self) -> list[CrawlState]:
        """State of the crawls in ``keys.active_crawls()``: the MAX_CRAWLS most recently started,
        newest first (so that many old or crafted crawls cannot hide the new ones)."""
        return [state for state, _started in self._newest_active()]

    def _newest_active(self) -> list[tuple[CrawlState, Any]]:
        """``(state, started)`` of the MAX_CRAWLS most recently started active crawls, newest
        first: every ref's ``started`` is read (one pipelined round trip of ``HGET``), then the
        states of those kept."""
        newest = newest_active(self.redis, self.keys, MAX_CRAWLS)
        if not newest:
            return []
        groups: dict[tuple[str, str], list[str]] = defaultdict(list)
        for (spider, appid, crawlid), _started in newest:
            groups[(spider, appid)].append(crawlid)
        states: dict[tuple[str, str, str], CrawlState] = {}
        for (spider, appid), crawlids in groups.items():
            for state in self.reader.crawl_states(spider, appid, crawlids):
                states[(spider, appid, state.crawlid)] = state
        return [(states[ref], started) for ref, started in newest]

    def crawl_list(self, state: str = "all", limit: int = 100) -> list[dict[str, Any]]:
        """``GET /crawls`` (docs/contract.md §17.6): the active crawls (most recently started first),
        then the finished ones (most recently ended first), at most *limit* in all.

        *state* is ``active``, ``finished`` or ``all``. An active crawl is ``waiting`` when nothing
        queued for it can be served now: no live crawler of its spider type (a rendering one for
        work queued with ``render: true``), or nothing in flight
        and every domain it has work in parked by the throttle or a domain config; its ``reason``
        says which (None for the others). Otherwise it is ``running``.
        """
        rows: list[dict[str, Any]] = []
        if state in ("active", "all"):
            rows += self._active_rows()[:limit]
        if state in ("finished", "all") and len(rows) < limit:
            rows += self._finished_rows(limit - len(rows))
        refs = [(r["spiderid"], r["appid"], r["crawlid"]) for r in rows]
        for row, fetched in zip(rows, self.reader.fetch_counts(refs), strict=True):
            row["fetch"] = fetched  # pages per fetch rung and the ladder's climbs (§25.7); None: none counted
        return rows

    def _active_rows(self) -> list[dict[str, Any]]:
        active = self._newest_active()
        if not active:
            return []
        serving = crawler_lanes(self.redis, self.keys)
        now = float(self.redis.time()[0])
        pipe = self.redis.pipeline(transaction=False)
        asked: list[int] = []  # per crawl: the shards asked when its domains may be fetched next
        for c, _started in active:
            render = c.lanes == {True}  # only rendering work queued: its lane's domains say when
            by_shard: dict[int, list[str]] = {}
            for domain in c.domains:  # each domain's ready time is in its shard's index
                by_shard.setdefault(self.keys.shard_of(domain), []).append(domain)
            for shard, domains in by_shard.items():
                pipe.zmscore(self.keys.domains(c.spiderid, render, shard), domains)
            asked.append(len(by_shard))
        replies = pipe.execute() if any(asked) else []
        rows = []
        at = 0
        for (c, started), count in zip(active, asked, strict=True):
            ready_at = [score for reply in replies[at : at + count] for score in reply]
            at += count
            parked = bool(c.domains) and all(score is not None and float(score) > now for score in ready_at)
            reason = waiting_reason(c, serving) or (PARKED if c.inflight == 0 and parked else None)
            row = self._row(c.spiderid, c.appid, c.crawlid, "waiting" if reason else "running", c, started)
            rows.append({**row, "reason": reason})
        self._mark_budgets(rows, [c.max_pages for c, _ in active])
        mark_recurring(self.redis, self.keys, rows)  # §19.6: recurring crawls and their schedules
        return rows  # newest first already

    def _finished_rows(self, limit: int) -> list[dict[str, Any]]:
        now = float(self.redis.time()[0])
        entries: list[tuple[Any, float]] = self.redis.zrevrangebyscore(  # type: ignore[assignment]
            self.keys.finished_crawls(), "+inf", now - self.record_ttl_s, start=0, num=limit, withscores=True
        )
        refs = [(r.decode() if isinstance(r, bytes) else str(r), score) for r, score in entries]
        pipe = self.redis.pipeline(transaction=False)
        parsed = []
        for ref, score in refs:
            try:
                spider, appid, crawlid = Keys.parse_crawl_ref(ref)
            except KeyFormatError:
                continue
            parsed.append((spider, appid, crawlid, score))
            pipe.hgetall(self.keys.crawl(spider, appid, crawlid))
        rows = []
        records = pipe.execute() if parsed else []
        for (spider, appid, crawlid, score), record in zip(parsed, records, strict=True):
            fields = {text(k): text(v) for k, v in record.items()}
            ended_as = fields.get("ended_as", "complete")
            row = self._row(spider, appid, crawlid, ended_as if ended_as in ENDINGS else "complete", None, None)
            row.update(
                reason=None,
                total_crawled=int(fields.get("crawled") or 0),
                total_failed=int(fields.get("failed") or 0),
                started=epoch(fields.get("started")),
                ended=int(score),
            )
            rows.append(row)
        budgets = [{text(k): text(v) for k, v in record.items()}.get("max_pages") or "0" for record in records]
        self._mark_budgets(rows, [int(b) if b.isdigit() else 0 for b in budgets])
        return rows

    def budget_fields(self, state: CrawlState) -> dict[str, Any]:
        """What the info answer about *state*'s crawl says of its page budget (§10.7) and, when
        its seen-set went on in a Bloom filter (§3.8), ``bloom_hits``, as the redis-monitor's."""
        fields: dict[str, Any] = {}
        hits = self.reader.bloom_hits(state.spiderid, state.appid, state.crawlid)
        if hits is not None:
            fields["bloom_hits"] = hits
        near = self.reader.near_duplicates(state.spiderid, state.appid, state.crawlid)
        if near is not None:  # the cleaners found near-duplicates among its pages (§26.1)
            fields["near_duplicates"] = near
        (fetched,) = self.reader.fetch_counts([(state.spiderid, state.appid, state.crawlid)])
        if fetched is not None:  # pages per fetch rung and the ladder's climbs (§25.7)
            fields["fetch"] = fetched
        budget = page_budget(state.max_pages or None, self.default_budget)
        if budget is None:
            return fields
        (admitted,) = self.reader.admitted([(state.spiderid, state.appid, state.crawlid)])
        return {**budget_fields(budget, admitted), **fields}

    def _mark_budgets(self, rows: list[dict[str, Any]], max_pages: list[int]) -> None:
        """Give each row ``admission_stopped``: the name of the page budget (``max_pages`` or
        CRAWL_MAX_PAGES_DEFAULT, §10.7) that stopped its crawl's admission, else None."""
        budgets = [page_budget(m or None, self.default_budget) for m in max_pages]
        asked = [(r["spiderid"], r["appid"], r["crawlid"]) for r, b in zip(rows, budgets, strict=True) if b]
        admitted = iter(self.reader.admitted(asked))
        for row, budget in zip(rows, budgets, strict=True):
            row["admission_stopped"] = budget.name if budget is not None and next(admitted) >= budget.value else None

    @staticmethod
    def _row(
        spider: str, appid: str, crawlid: str, state: str, crawl: CrawlState | None, started: Any
    ) -> dict[str, Any]:
        return {
            "appid": appid,
            "crawlid": crawlid,
            "spiderid": spider,
            "state": state,
            "total_pending": crawl.pending if crawl else 0,
            "total_inflight": crawl.inflight if crawl else 0,
            "total_crawled": crawl.crawled if crawl else 0,
            "total_failed": crawl.failed if crawl else 0,
            "started": epoch(started),
            "ended": None,
        }

    def domain_config(self) -> dict[str, Any]:
        """The operators' domain config: throttle overrides (``domain-update``) and the blacklist."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(self.keys.shards):  # each domain's config is in its frontier shard
            pipe.hgetall(self.keys.domain_config(shard))
            pipe.smembers(self.keys.domain_blacklist(shard))
        replies = pipe.execute()
        overrides = {d: raw for reply in replies[::2] for d, raw in reply.items()}
        blacklist = {d for reply in replies[1::2] for d in reply}
        rows = []
        for domain, raw in sorted((text(d), r) for d, r in overrides.items())[:MAX_DOMAINS]:
            try:
                config = json.loads(raw)
            except ValueError:
                config = {}
            if not isinstance(config, dict):
                config = {}
            rows.append({"domain": domain, **{k: config.get(k) for k in ("hits", "window", "scale")}})
        return {"overrides": rows, "blacklist": sorted(text(d) for d in blacklist)[:MAX_DOMAINS]}

    def stopped(self, states: list[CrawlState]) -> list[bool]:
        """Whether each crawl is blacklisted by a stop or expiry (``keys.crawl_stopped``), in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for s in states:  # a stop marks every shard: shard 0 answers for the crawl
            pipe.exists(self.keys.crawl_stopped(s.spiderid, s.appid, s.crawlid))
        return [bool(flag) for flag in pipe.execute()] if states else []

    def snapshot(self, *, with_domains: bool = False) -> Snapshot:
        """Nodes, active crawls, per-spider totals and counters (and per-domain rows if asked)."""
        crawls = self.active_crawls()
        spiders: dict[str, SpiderSummary] = {DEFAULT_SPIDER: SpiderSummary(DEFAULT_SPIDER)}
        domain_backlog: dict[tuple[str, str], int] = defaultdict(int)
        for state in crawls:
            summary = spiders.setdefault(state.spiderid, SpiderSummary(state.spiderid))
            summary.backlog += state.pending
            summary.active_crawls += 1
            for domain, backlog in state.domains.items():
                domain_backlog[(state.spiderid, domain)] += backlog.total
        for (spider, _), _count in domain_backlog.items():
            spiders[spider].domains += 1
        for beat in live_heartbeats(self.redis, self.keys, "crawler"):
            served = str(beat.get("spider") or "unknown")
            summary = spiders.setdefault(served, SpiderSummary(served))
            summary.crawlers += 1
            summary.render_crawlers += bool(beat.get("render"))
        names = sorted(spiders)
        pipe = self.redis.pipeline(transaction=False)
        for spider in names:
            for shard in range(self.keys.shards):
                pipe.zcard(self.keys.leases(spider, shard))
        counts = pipe.execute()
        for i, spider in enumerate(names):
            spiders[spider].inflight = sum(int(n) for n in counts[i * self.keys.shards : (i + 1) * self.keys.shards])
        snapshot = Snapshot(
            server_time=int(time.time()),
            nodes=self.nodes(),
            crawls=crawls,
            spiders=spiders,
            counters=self.counters(),
        )
        if with_domains:
            snapshot.domains = self._domain_rows(domain_backlog)
        return snapshot

    def _domain_rows(self, backlog: dict[tuple[str, str], int]) -> list[dict[str, Any]]:
        """The MAX_DOMAINS largest (spider, domain) backlogs with their recent fetch rate.

        The rate counts the fetch starts recorded in the domain's throttle window (the throttle key
        as this process's settings build it) over the last QUEUE_WINDOW seconds, or the domain's
        configured window, scaled to fetches per minute.
        """
        top = sorted(backlog.items(), key=lambda item: (-item[1], item[0]))[:MAX_DOMAINS]
        if not top:
            return []
        now_s, now_us = self.redis.time()
        now = now_s + now_us / 1_000_000
        pipe = self.redis.pipeline(transaction=False)
        for (_, domain), _count in top:
            pipe.hget(self.keys.domain_config(self.keys.shard_of(domain)), domain)
        configs = pipe.execute()
        windows = []
        for raw in configs:
            window = self.throttle_window_s
            if raw:
                try:
                    window = float(json.loads(raw)["window"]) or window
                except (ValueError, KeyError, TypeError):
                    pass
            windows.append(max(window, 1.0))
        pipe = self.redis.pipeline(transaction=False)
        for ((spider, domain), _), window in zip(top, windows, strict=True):
            throttle_key = Keys.throttle_key(domain, spider if self.throttle_by_spider else None, self.egress_id)
            pipe.zcount(self.keys.throttle(throttle_key), now - window, "+inf")
        rows = []
        for ((spider, domain), count), window, fetches in zip(top, windows, pipe.execute(), strict=True):
            rate = round(int(fetches) * 60.0 / window, 2)
            rows.append({"spiderid": spider, "domain": domain, "backlog": count, "fetches_per_min": rate})
        return rows

    def counters(self) -> Counters:
        """Lifetime counters of the kafka-monitor and crawlers (see the module docstring for names)."""
        wanted = self.stats.counters(KAFKA_MONITOR) + self.stats.counters(CRAWLER)
        wanted += [(CLEANER, name) for name in CLEANER_COUNTERS]
        values = self.redis.mget([self.keys.stats_lifetime(c, n) for c, n in wanted]) if wanted else []
        incoming: dict[str, int] = {kind: 0 for kind in ("crawl", "action", "stats", "domain-config", "invalid")}
        pages: dict[str, int] = defaultdict(int)
        responses: dict[tuple[str, str], int] = defaultdict(int)
        failed: dict[str, int] = defaultdict(int)
        cleaner: dict[str, int] = dict.fromkeys(CLEANER_COUNTERS, 0)
        items_prefix, failed_prefix = items_counter_name(""), failed_counter_name("")
        for (component, name), raw in zip(wanted, values, strict=True):
            count = int(raw or 0)
            if component == CLEANER:
                cleaner[name] = count
            elif component == KAFKA_MONITOR:
                plugin = parse_plugin_counter_name(name)
                if name == FAIL:
                    incoming["invalid"] += count
                elif plugin in self.plugin_kinds:
                    incoming[self.plugin_kinds[plugin]] += count
            elif name.startswith(items_prefix) and len(name) > len(items_prefix):
                pages[name[len(items_prefix) :]] += count
            elif name.startswith(failed_prefix) and len(name) > len(failed_prefix):
                failed[name[len(failed_prefix) :]] += count
            elif (status := parse_status_counter_name(name)) is not None and status[0] == "spider":
                if str(status[2]) in self.response_codes:
                    responses[(status[1], str(status[2]))] += count
        dead = {"validation": incoming["invalid"], "crawl": sum(failed.values()), "clean": cleaner["dead_letters"]}
        return Counters(incoming, dict(pages), dict(responses), dict(failed), dead, cleaner)


#: How a finished crawl ended (the crawl record's ``ended_as``).
ENDINGS = ("complete", "stopped", "expired")
