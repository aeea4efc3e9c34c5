"""info (docs/contract.md §4.2, §4.3): a crawl's or an appid's backlog, from the frontier's counters.

Cost: two pipelined round trips, O(domains of the crawls asked about), never O(backlog): per domain
one ``ZCARD`` and the first and last score of its queue (:class:`FrontierReader`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from crawlhive.redis_monitor.plugins import MonitorPlugin, Outbound, server_time
from crawlhive.utils.frontier import CrawlState, FrontierReader
from crawlhive.utils.frontier.recrawl import RECORD_FIELD, Schedule
from crawlhive.utils.rules.budgets import Limit, budget_fields, page_budget
from crawlhive.utils.state.proxies import domain_notes

if TYPE_CHECKING:
    from crawlhive.redis_monitor.monitor import RedisMonitor


def domain_entries(state: CrawlState) -> dict[str, dict[str, Any]]:
    """The per-domain entries (docs/contract.md §4.1) of *state*."""
    return {
        domain: {"total": d.total, "high_priority": d.high_priority, "low_priority": d.low_priority}
        for domain, d in sorted(state.domains.items())
    }


class InfoMonitor(MonitorPlugin):
    """Answers ``{"action": "info", ...}``: by crawlid when the request has one, else by appid."""

    name = "InfoMonitor"

    def __init__(self, frontier: FrontierReader, default_budget: int | None = None, window_s: float = 60.0) -> None:
        self.frontier = frontier
        self.default_budget = default_budget
        self.window_s = window_s

    @classmethod
    def from_monitor(cls, monitor: RedisMonitor) -> Self:
        settings = monitor.settings
        return cls(monitor.frontier, settings.CRAWL_MAX_PAGES_DEFAULT, settings.QUEUE_WINDOW)

    def with_notes(self, domains: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """*domains* (per-domain entries) with ``proxy_wait_until`` and ``rate_factor`` where they
        apply (§21.3, §21.4: every proxy rests, the adaptive throttle slowed it)."""
        notes = domain_notes(self.frontier.redis, self.frontier.keys, list(domains), self.window_s)
        for domain, extra in notes.items():
            domains[domain].update(extra)
        return domains

    def budget(self, state: CrawlState) -> Limit | None:
        """The page budget that holds for *state*'s crawl (§10.7): the smaller of its
        ``max_pages`` and CRAWL_MAX_PAGES_DEFAULT; None = none."""
        return page_budget(state.max_pages or None, self.default_budget)

    def accepts(self, kind: str, request: dict[str, Any]) -> bool:
        return kind == "action" and request.get("action") == "info"

    def handle(self, kind: str, request: dict[str, Any]) -> list[Outbound]:
        if request.get("crawlid") is not None:
            return [Outbound(self.by_crawlid(request))]
        return [Outbound(self.by_appid(request))]

    def by_crawlid(self, request: dict[str, Any]) -> dict[str, Any]:
        """The info-by-crawlid message (§4.2); zeros and ``domains: {}`` for an unknown crawl."""
        spider, appid, crawlid = request["spiderid"], request["appid"], request["crawlid"]
        state = self.frontier.crawl_state(spider, appid, crawlid)
        message: dict[str, Any] = {
            "uuid": request["uuid"],
            "appid": appid,
            "crawlid": crawlid,
            "spiderid": spider,
            "server_time": server_time(),
            "total_pending": state.pending,
            "total_domains": len(state.domains),
            "domains": self.with_notes(domain_entries(state)),
        }
        if state.expires:
            message["expires"] = str(state.expires)  # a string, as in Scrapy Cluster
        message.update(total_inflight=state.inflight, total_crawled=state.crawled, total_failed=state.failed)
        budget = self.budget(state)
        if budget is not None and self.frontier.redis.exists(self.frontier.keys.crawl(spider, appid, crawlid)):
            # ours (§10.7): the crawl stops being fed past it (an unknown crawl has none yet)
            (admitted,) = self.frontier.admitted([(spider, appid, crawlid)])
            message.update(budget_fields(budget, admitted))
        hits = self.frontier.bloom_hits(spider, appid, crawlid)
        if hits is not None:  # its seen-set went on in a Bloom filter (DUPEFILTER_BLOOM_ABOVE, §3.8)
            message["bloom_hits"] = hits
        near = self.frontier.near_duplicates(spider, appid, crawlid)
        if near is not None:  # the cleaners found near-duplicates among its pages (§26.1)
            message["near_duplicates"] = near
        (fetched,) = self.frontier.fetch_counts([(spider, appid, crawlid)])
        if fetched is not None:  # pages per fetch rung and the ladder's climbs (§25.7)
            message["fetch"] = fetched
        if self.frontier.redis.hexists(self.frontier.keys.crawl(spider, appid, crawlid), RECORD_FIELD):
            message["recrawl"] = Schedule(self.frontier.redis, self.frontier.keys, 1, 0).counts(spider, appid, crawlid)
        return message

    def by_appid(self, request: dict[str, Any]) -> dict[str, Any]:
        """The info-by-appid message (§4.3): the appid's crawls of this spider type that have
        queued or in-flight requests."""
        spider, appid = request["spiderid"], request["appid"]
        states = self.frontier.crawl_states(spider, appid, self.frontier.app_crawlids(spider, appid))
        crawlids: dict[str, Any] = {}
        domains: set[str] = set()
        for state in states:
            if not state.pending and not state.inflight:
                continue
            entry: dict[str, Any] = {"total": state.pending, "distinct_domains": len(state.domains)}
            if state.expires:
                entry["expires"] = state.expires  # an integer here, as in Scrapy Cluster
            entry["domains"] = domain_entries(state)
            entry.update(total_inflight=state.inflight, total_crawled=state.crawled, total_failed=state.failed)
            crawlids[state.crawlid] = entry
            domains.update(state.domains)
        return {
            "uuid": request["uuid"],
            "appid": appid,
            "spiderid": spider,
            "server_time": server_time(),
            "total_pending": sum(c["total"] for c in crawlids.values()),
            "total_crawlids": len(crawlids),
            "total_domains": len(domains),
            "crawlids": crawlids,
            "total_inflight": sum(c["total_inflight"] for c in crawlids.values()),
            "total_crawled": sum(c["total_crawled"] for c in crawlids.values()),
            "total_failed": sum(c["total_failed"] for c in crawlids.values()),
        }
