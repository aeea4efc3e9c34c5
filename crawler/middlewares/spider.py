"""The spider middleware between a spider and the frontier: :class:`FrontierSpiderMiddleware`
(order 950, nearest the spider)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Self

from redis.exceptions import RedisError
from scrapy import Request

from crawlhive.crawler.admit import Verdict
from crawlhive.crawler.leases import REDIS_FAILURES
from crawlhive.crawler.limits import too_large
from crawlhive.crawler.links import in_scope, link_allowed
from crawlhive.crawler.requests import CannotTravel, FrontierLinks, Unfetchable, context_of, is_seed
from crawlhive.crawler.runtime import CrawlRuntime
from crawlhive.crawler.sitemaps import SITEMAP, Discovered, SitemapTooLarge, discover, robots_request, sitemap_request

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from crawlhive.crawler.leases import LeaseContext
    from crawlhive.utils.frontier import FrontierRequest

logger = logging.getLogger(__name__)


#: Seconds before an admit that failed on a Redis error is tried again, doubled up to ADMIT_RETRY_MAX_S
#: (for as long as LEASE_TIMEOUT from the first failure).
ADMIT_RETRY_S = 0.5
ADMIT_RETRY_MAX_S = 5.0


class FrontierSpiderMiddleware:
    """Between a spider and the rest: its requests become frontier requests of the same crawl
    (depth + 1, priority - 10, options inherited; docs/contract.md §3.1, §3.5, §11), queued only after the
    page's items were acknowledged by Kafka; its items are registered with the page's lease for the
    item processor (:class:`~crawlhive.crawler.pipelines.FrontierItemProcessor`).

    The whole output of a callback is collected first, so links and items are decided together:
    the lease is checked (a stopped crawl's in-flight page yields nothing) and the links pass the
    per-crawl dupefilter and page caps in one round trip (:meth:`CrawlRuntime.admit`).
    """

    def __init__(self, crawler: Crawler, runtime: CrawlRuntime) -> None:
        self.crawler = crawler
        self.runtime = runtime

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler, CrawlRuntime.of(crawler))

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterator[Any]:
        context = context_of(response.request)
        if context is None:
            yield from result
            return
        outputs = list(result)
        if context.done:
            return
        items, children = self._split(context, outputs)
        try:
            verdict = self.runtime.admission.admit(context, children)
        except REDIS_FAILURES:
            self._admit_failed(context)
            return
        yield from self._apply(context, verdict, items)

    async def process_spider_output_async(self, response: Response, result: AsyncIterator[Any]) -> AsyncIterator[Any]:
        outputs = [output async for output in result]
        context = context_of(response.request)
        if context is None:
            for output in outputs:
                yield output
            return
        if context.done:
            return
        items, children = self._split(context, outputs)
        delay, first_failed = ADMIT_RETRY_S, 0.0
        while True:
            try:
                verdict = await self.runtime.admission.admit_async(context, children)  # the reactor goes on meanwhile
                break
            except RedisError as exc:
                # A Redis Cluster node failing over, a restart: the admit is idempotent (a page may
                # queue again the links it queued), so try again while the lease (renewed
                # meanwhile) lasts, rather than leave the page to be fetched again after it expires.
                now = time.monotonic()
                first_failed = first_failed or now
                if context.done or self.runtime.leases.closed or now + delay - first_failed > self.runtime.lease_s:
                    self._admit_failed(context)
                    return
                log = logger.warning if delay == ADMIT_RETRY_S else logger.debug
                log("checking %s failed (%s); trying again in %.1fs (check REDIS_URL)", context.request.url, exc, delay)
                await asyncio.sleep(delay)
                delay = min(2 * delay, ADMIT_RETRY_MAX_S)
        if first_failed and context.done:  # given up on while retrying
            return
        for output in self._apply(context, verdict, items):
            yield output

    def _admit_failed(self, context: LeaseContext) -> None:
        """Redis kept failing while checking the page: give up on it without ending its lease,
        which expires and is reclaimed (the page is fetched again). Kept in flight it would be
        renewed forever and its crawl would never complete."""
        logger.warning(
            "checking %s failed on a Redis error; its lease will expire and be reclaimed (check REDIS_URL)",
            context.request.url,
        )
        self.runtime.leases.abandon(context)

    def process_spider_input(self, response: Response) -> None:
        """A robots.txt or sitemap document of a ``sitemap: true`` crawl (or its seed, when that is
        a sitemap) never reaches the spider: :class:`_SitemapDocument` takes it to
        :meth:`process_spider_exception`, which queues what it lists (§14)."""
        context = context_of(response.request)
        if context is None or context.done or not context.request.sitemap:
            return
        kind = response.request.meta.get(SITEMAP) if response.request is not None else None
        if kind is None and not is_seed(context.request):
            return
        try:
            found = discover(response, kind, self.runtime.settings.DOWNLOAD_MAXSIZE)
        except SitemapTooLarge as exc:
            raise _SitemapDocument(None, too_large(str(exc))) from None
        if found is not None:
            raise _SitemapDocument(found)

    def _sitemap_document(self, context: LeaseContext, document: _SitemapDocument) -> None:
        """Queue what a robots.txt or sitemap lists, and end its lease without an item or count:
        sitemaps to read next, and pages at depth 1 through the crawl's link filters (§14)."""
        if document.error is not None:
            self.runtime.emitter.fail(context, document.error)
            return
        found = document.found
        assert found is not None
        spider = self.crawler.spider
        assert spider is not None
        crawl = context.request
        limits = self.runtime.link_limits
        children = [
            self.runtime.admission.child(context, sitemap_request(u), spider, i)
            for i, u in enumerate(found.sitemaps)
            if in_scope(u, crawl, limits)  # http(s) only, in the crawl's scope (sitemaps.py)
        ]
        offset = len(found.sitemaps)
        for i, url in enumerate(found.pages):
            if link_allowed(url, crawl, limits):
                child, fingerprint = self.runtime.admission.child(context, Request(url), spider, offset + i)
                children.append((dataclasses.replace(child, depth=1, sitemap=False), fingerprint))
        try:
            verdict = self.runtime.admission.admit(context, children)  # rare: blocking is fine
        except REDIS_FAILURES:
            self._admit_failed(context)
            return
        if verdict is Verdict.LOST:
            self.runtime.leases.abandon(context)
        elif verdict is Verdict.CANCELLED:
            self.runtime.leases.drop(context)
        else:
            if verdict is Verdict.EMIT_NO_LINKS:
                context.children = []
            logger.debug("%s lists %d sitemaps, %d pages", crawl.url, len(found.sitemaps), len(found.pages))
            self.runtime.leases.finish(context, "")

    def process_spider_exception(self, response: Response, exception: Exception) -> list[Any] | None:
        """A callback raised: the page ends as a crawl dead letter ``spider error: …``, never
        retried (a retry would fail the same way), with the traceback in the log (§11)."""
        context = context_of(response.request)
        if context is None or context.done:
            return None
        if isinstance(exception, _SitemapDocument):
            self._sitemap_document(context, exception)
            return []
        logger.error("spider failed on %s", response.url, exc_info=exception)
        self.runtime.emitter.fail(context, f"spider error: {type(exception).__name__}: {exception}")
        return []

    def _split(self, context: LeaseContext, outputs: list[Any]) -> tuple[list[Any], list[tuple[FrontierRequest, str]]]:
        """The items of a callback's *outputs*, and its requests as frontier requests of the crawl
        that pass the crawl's link filters (§11): ``maxdepth``, ``allowed_domains``,
        ``allow_regex``/``deny_regex``, ``deny_extensions``, http(s) only. The built-in spiders
        filter their links themselves (``filters_own_links``) and are not checked twice."""
        spider = self.crawler.spider
        assert spider is not None, "a page is parsed only while the spider is open"
        items = [o for o in outputs if o is not None and not isinstance(o, Request | FrontierLinks)]
        requests = [o for o in outputs if isinstance(o, Request)]
        found = [url for o in outputs if isinstance(o, FrontierLinks) for url in o.urls]
        extra = []
        if context.request.sitemap and is_seed(context.request):  # an ordinary page: look for sitemaps (§14)
            extra.append(self.runtime.admission.child(context, robots_request(context.request.url), spider, -1))
        if requests and not getattr(spider, "filters_own_links", False):
            crawl = context.request
            if crawl.depth >= crawl.maxdepth:
                requests = []
            requests = [r for r in requests if link_allowed(r.url, crawl, self.runtime.link_limits)]
        children = self.runtime.admission.link_children(context, found) if found else []
        for i, request in enumerate(requests, start=len(children)):
            try:
                children.append(self.runtime.admission.child(context, request, spider, i))
            except Unfetchable as exc:
                logger.warning("dropping a request the spider yielded on %s: %s", context.request.url, exc)
            except CannotTravel as exc:
                logger.error("dropping a request the spider yielded on %s: %s", context.request.url, exc)
        return items, children + extra

    def _apply(self, context: LeaseContext, verdict: Verdict, items: list[Any]) -> list[Any]:
        """End or go on with *context*'s page after the admit's *verdict*; the items to pass on."""
        if context.done:
            return []
        if verdict is Verdict.LOST:
            self.runtime.leases.abandon(context)
            return []
        if verdict is Verdict.CANCELLED:
            self.runtime.leases.drop(context)
            return []
        if verdict is Verdict.EMIT_NO_LINKS:
            context.children = []
        self.runtime.leases.page_items(context, items)
        return items


class _SitemapDocument(Exception):  # noqa: N818 - a signal between two hooks, not an error
    """Raised by :meth:`FrontierSpiderMiddleware.process_spider_input` for a robots.txt or sitemap
    response: Scrapy then skips the spider's callback and calls ``process_spider_exception``."""

    def __init__(self, found: Discovered | None, error: str | None = None) -> None:
        super().__init__(error or "sitemap document")
        self.found = found
        self.error = error
