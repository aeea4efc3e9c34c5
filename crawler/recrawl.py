"""The crawler's side of continuous crawling (docs/contract.md §19; the schedule is
``utils/frontier/recrawl.py``).

* :class:`RecrawlMiddleware` (downloader): before a page of a recrawling crawl is fetched, reads
  its schedule state (one script on the hot path's batcher) and its crawl's settings (cached for
  RECRAWL_CONFIG_CACHE_S), and sends ``If-None-Match`` / ``If-Modified-Since`` from the stored
  validators; on the response decides the visit (:func:`~crawlhive.utils.frontier.recrawl.next_visit`):
  an unchanged page ends there as a policy drop (nothing emitted) unless RECRAWL_EMIT_UNCHANGED.
* :class:`RecrawlItemMiddleware` (spider): a revisit's item gets ``visit``, ``changed`` and
  ``previous_fetch`` (an unchanged one, emitted only with RECRAWL_EMIT_UNCHANGED, an empty body).
* :class:`RecrawlSitemapMiddleware` (spider): a sitemap of a recrawling crawl that lists pages
  with a ``<lastmod>`` after their last fetch makes them due at once when its visit ends (§19.7).
* :meth:`RecrawlMiddleware.queue_visits`: called by the lease table when pages finish (in the same
  ``MULTI`` as their acks): each page's new state and slot, or its leaving the schedule.

A crawler killed mid-visit writes nothing: the lease is reclaimed and the visit done again by
another crawler, with the state as it was (still ``visiting``, so it is released by no one
meanwhile).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
import weakref
from typing import TYPE_CHECKING, Any, Self

from redis.exceptions import RedisError
from scrapy import Request
from scrapy.exceptions import IgnoreRequest

from crawlhive.crawler.items import CrawledItem
from crawlhive.crawler.requests import context_of
from crawlhive.crawler.runtime import CrawlRuntime
from crawlhive.crawler.sitemaps import Discovered
from crawlhive.utils.contract.recrawl import RecrawlConfig
from crawlhive.utils.frontier.recrawl import (
    FAILED_STATUS,
    RECORD_FIELD,
    Observation,
    PageState,
    Schedule,
    SlotEntry,
    VisitResult,
    body_hash,
    http_date,
    next_visit,
    schedule_fingerprint,
)
from crawlhive.utils.rules.budgets import app_ceiling, schedule_cap

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Iterator

    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from crawlhive.crawler.leases import LeaseContext
    from crawlhive.utils.backends.redis_types import RedisPipeline
    from crawlhive.utils.frontier import FrontierRequest

logger = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False)
class Visit:
    """One visit of a scheduled page while it is in flight here."""

    fingerprint: bytes
    shard: int
    before: PageState | None
    config: RecrawlConfig
    result: VisitResult | None = None
    joins: bool | None = None
    """A first visit's place in its appid's count of scheduled pages (§19.1): True counted, False
    kept off the schedule by a limit (the crawl's cap, the appid's ceiling), None not counted (a
    revisit, or no limit)."""


#: The visit of each page in flight (a page's lease context is the key; gone with it).
VISITS: weakref.WeakKeyDictionary[LeaseContext, Visit] = weakref.WeakKeyDictionary()
#: What a recrawling crawl's sitemap document listed with ``<lastmod>`` dates, until its visit ends.
SITEMAPS: weakref.WeakKeyDictionary[LeaseContext, Discovered] = weakref.WeakKeyDictionary()


class RecrawlMiddleware:
    """Conditional requests and the changed / unchanged decision of a recrawling crawl's pages."""

    def __init__(
        self,
        runtime: CrawlRuntime,
        schedule: Schedule,
        gone_after: int,
        emit_unchanged: bool,
        cache_s: float,
        cap_default: int | None = None,
        ceiling: int | None = None,
    ) -> None:
        self.runtime = runtime
        self.schedule = schedule
        self.gone_after = gone_after
        self.emit_unchanged = emit_unchanged
        self.cache_s = cache_s
        self.cap_default = cap_default
        """RECRAWL_MAX_PAGES_DEFAULT: the schedule cap of a crawl sent without ``max_pages``."""
        self.ceiling = app_ceiling(ceiling)
        """APPID_MAX_SCHEDULED_PAGES: the pages all recurring crawls of an appid keep together."""
        self._reported_full: set[tuple[str, str, str]] = set()
        self._configs: dict[tuple[str, str, str], tuple[float, RecrawlConfig | None]] = {}
        runtime.leases.finish_hooks.append(self.queue_visits)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        runtime = CrawlRuntime.of(crawler)
        settings = runtime.settings
        schedule = Schedule(runtime.redis, runtime.keys, settings.RECRAWL_STATE_BUCKETS, settings.CRAWL_RECORD_TTL)
        return cls(
            runtime,
            schedule,
            settings.RECRAWL_GONE_AFTER,
            settings.RECRAWL_EMIT_UNCHANGED,
            settings.RECRAWL_CONFIG_CACHE_S,
            settings.RECRAWL_MAX_PAGES_DEFAULT,
            settings.APPID_MAX_SCHEDULED_PAGES,
        )

    async def _config(self, spider: str, appid: str, crawlid: str) -> RecrawlConfig | None:
        """The crawl's recrawl settings from its record (None: it no longer recurs: stopped, expired)."""
        crawl = (spider, appid, crawlid)
        now = time.monotonic()
        cached = self._configs.get(crawl)
        if cached is not None and cached[0] > now:
            return cached[1]
        raw = await self.runtime.batcher.client.hget(self.runtime.keys.crawl(spider, appid, crawlid), RECORD_FIELD)
        config = None
        if raw:
            try:
                config = RecrawlConfig.from_json(raw)
            except (ValueError, KeyError, TypeError):
                logger.error("the recrawl settings of crawl %s/%s are unreadable: %r", appid, crawlid, raw[:200])
        if len(self._configs) > 10_000:
            self._configs.clear()
        self._configs[crawl] = (now + self.cache_s, config)
        return config

    async def process_request(self, request: Request) -> None:
        context = context_of(request)
        if context is None or context.done or not context.request.recrawl or context in VISITS:
            return  # not a recrawling crawl's page, or a redirect hop of a visit already on
        frontier = context.request
        try:
            config = await self._config(frontier.spiderid, frontier.appid, frontier.crawlid)
            if config is None:
                return
            fingerprint = schedule_fingerprint(context.fingerprint)
            shard = self.runtime.keys.shard_of(frontier.domain)
            key = self.schedule.state_key(frontier.spiderid, frontier.appid, frontier.crawlid, fingerprint, shard)
            raw = await self.runtime.batcher.call("recrawl_read", [key], [fingerprint])
            before = PageState.unpack(raw) if raw else None
            joins = None if before is not None else await self._may_join(frontier)
        except RedisError as exc:
            # fetched unconditionally and judged as a first visit would be: the schedule is kept
            logger.warning("reading the schedule of %s failed (%s); fetching it without validators", frontier.url, exc)
            return
        VISITS[context] = Visit(fingerprint, shard, before, config, joins=joins)
        if before is not None:
            for name, value in before.conditional_headers().items():
                request.headers.setdefault(name, value)

    async def _may_join(self, frontier: FrontierRequest) -> bool | None:
        """Whether a page of *frontier*'s crawl not yet scheduled may join the schedule after this
        visit (§19.1): counted in its appid's scheduled pages unless the crawl's cap (its
        ``max_pages``, else RECRAWL_MAX_PAGES_DEFAULT) or the appid's ceiling is reached. The
        page is fetched either way (the frontier admitted it); past a limit it is not fetched again.
        True: counted; False: refused; None: no limit (not counted)."""
        cap = schedule_cap(frontier.max_pages, self.cap_default)
        if cap is None and self.ceiling is None:
            return None
        crawl = (frontier.spiderid, frontier.appid, frontier.crawlid)
        keys, args = self.schedule.join_call(*crawl, cap, self.ceiling)
        verdict = int(await self.runtime.batcher.call("recrawl_join", keys, args))
        if verdict == 1:
            return True
        if verdict == -2:
            return False  # the crawl was stopped (or is past its until) meanwhile: nothing joins
        if crawl not in self._reported_full:  # once per crawl and process
            if len(self._reported_full) > 10_000:
                self._reported_full.clear()
            self._reported_full.add(crawl)
            limit = cap if verdict == 0 else self.ceiling
            logger.info(
                "crawl %s/%s: its schedule is full (%s=%s): pages fetched from now on are not scheduled",
                frontier.appid,
                frontier.crawlid,
                limit.name if limit is not None else "?",
                limit.value if limit is not None else "?",
                extra={"appid": frontier.appid, "crawlid": frontier.crawlid, "spiderid": frontier.spiderid},
            )
        return False

    def process_response(self, request: Request, response: Response) -> Response:
        context = context_of(request)
        visit = VISITS.get(context) if context is not None else None
        if context is None or visit is None or visit.result is not None or context.done:
            return response
        seen = Observation(
            status=response.status,
            body_hash=body_hash(response.body),
            etag=(response.headers.get(b"ETag") or b"")[:200],
            last_modified=http_date(response.headers.get(b"Last-Modified")),
            fetched=int(time.time()),
        )
        visit.result = next_visit(visit.before, seen, visit.config, self.gone_after)
        if visit.before is not None and not visit.result.changed and not self.emit_unchanged:
            self.runtime.leases.drop(context)  # the schedule is written with the drop's finish
            raise IgnoreRequest(f"{context.request.url}: unchanged since its last visit")
        if visit.before is not None:  # a revisit queues only links new to the crawl (see link_owner)
            token = visit.fingerprint + visit.result.visit.to_bytes(4, "big")
            context.link_owner = hashlib.blake2b(token, digest_size=4).digest()
        return response

    def queue_visits(self, batch: list[tuple[LeaseContext, str]], pipe: RedisPipeline) -> None:
        """Queue on *pipe* the end of the visits among *batch* (finished pages, with the counter
        each ends with): called by :class:`~crawlhive.crawler.leases.LeaseTable` before the acks."""
        now = int(time.time())
        for context, _counter in batch:
            request = context.request
            if not request.recrawl:
                continue
            visit = VISITS.pop(context, None)
            listed = SITEMAPS.pop(context, None)
            if listed is not None and visit is not None:
                self._queue_touches(pipe, context, listed, visit.config, now)
            if not context.fingerprint:
                continue
            fingerprint = schedule_fingerprint(context.fingerprint)
            shard = self.runtime.keys.shard_of(request.domain)
            result: VisitResult | None = None
            entry = None
            if visit is not None:
                result = visit.result
                if result is None:  # the fetch failed for good (a dead letter) or never got an answer
                    failed = Observation(FAILED_STATUS, b"\0" * 6, b"", 0, now)
                    result = visit.result = next_visit(visit.before, failed, visit.config, self.gone_after)
                options = request.option_set
                if result.state is not None and options is not None and not options.lost and visit.joins is not False:
                    priority = visit.config.priority - 10 * request.depth
                    again = dataclasses.replace(request, retry_times=0, priority=priority)
                    entry = SlotEntry(
                        result.state.next_due, fingerprint, priority, request.render, request.domain, again.member()
                    )
                if entry is None:
                    result = dataclasses.replace(result, state=None)
                    if visit.joins:  # counted by _may_join, and not joining
                        self.schedule.queue_give(pipe, request.spiderid, request.appid, request.crawlid)
            # no visit (dropped before its fetch, its crawl no longer recurring): it leaves the schedule
            self.schedule.queue_visit(
                pipe,
                spider=request.spiderid,
                appid=request.appid,
                crawlid=request.crawlid,
                shard=shard,
                fingerprint=fingerprint,
                result=result,
                entry=entry,
                now=now,
            )

    def _queue_touches(
        self, pipe: RedisPipeline, context: LeaseContext, listed: Discovered, config: RecrawlConfig, now: int
    ) -> None:
        """The scheduled pages a sitemap lists with a ``<lastmod>`` after their last fetch are due
        at once (§19.7): built as the sitemap's page links are (depth 1), one script each."""
        spider = self.runtime.crawler.spider
        if spider is None:
            return
        request = context.request
        priority = config.priority - 10
        for i, (url, lastmod) in enumerate(listed.lastmod.items()):
            try:
                child, fingerprint = self.runtime.admission.child(context, Request(url), spider, i)
            except ValueError:  # not a URL Scrapy takes: the sitemap's link filter dropped it too
                continue
            page = dataclasses.replace(child, depth=1, sitemap=False, retry_times=0, priority=priority)
            if page.option_set is None or page.option_set.lost:
                continue
            entry = SlotEntry(now, schedule_fingerprint(fingerprint), priority, page.render, page.domain, page.member())
            self.schedule.queue_touch(
                pipe,
                spider=request.spiderid,
                appid=request.appid,
                crawlid=request.crawlid,
                shard=self.runtime.keys.shard_of(page.domain),
                entry=entry,
                lastmod=lastmod,
                now=now,
            )


class RecrawlSitemapMiddleware:
    """Notes what a recrawling crawl's sitemap lists with ``<lastmod>`` (§19.7): it runs before
    the frontier spider middleware, which queues the sitemap's pages from the same signal."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls()

    def process_spider_exception(self, response: Response, exception: Exception) -> None:
        found = getattr(exception, "found", None)  # the frontier middleware's sitemap signal
        context = context_of(response.request)
        if isinstance(found, Discovered) and found.lastmod and context is not None and context.request.recrawl:
            SITEMAPS[context] = found


class RecrawlItemMiddleware:
    """Adds ``visit``, ``changed`` and ``previous_fetch`` to the item of a revisit (§19.4)."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls()

    @staticmethod
    def _tag(response: Response, output: Any) -> Any:
        if not isinstance(output, CrawledItem):
            return output
        context = context_of(response.request)
        visit = VISITS.get(context) if context is not None else None
        if visit is None or visit.result is None or visit.result.visit < 2:
            return output
        output["visit"] = visit.result.visit
        output["changed"] = visit.result.changed
        output["previous_fetch"] = visit.result.previous_fetch
        if not visit.result.changed:
            output["body"] = ""
        return output

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterator[Any]:
        for output in result:
            yield self._tag(response, output)

    async def process_spider_output_async(self, response: Response, result: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for output in result:
            yield self._tag(response, output)


__all__ = ["SITEMAPS", "VISITS", "RecrawlItemMiddleware", "RecrawlMiddleware", "RecrawlSitemapMiddleware", "Visit"]
