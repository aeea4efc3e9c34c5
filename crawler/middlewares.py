"""The crawler's downloader and spider middlewares: behaviour every spider shares.

Downloader middlewares (outermost first):

* :class:`LeaseOutcomeMiddleware` (order 50, so its ``process_exception`` runs after Scrapy's
  ``RetryMiddleware`` gave up): a request that finally failed ends its lease, as a crawl dead letter
  for a network error or as a policy drop for ``IgnoreRequest`` (robots.txt, …).
* :class:`RequestShapingMiddleware` (order 400, before Scrapy's ``UserAgentMiddleware``): applies a
  crawl's ``useragent`` to each request, and its ``headers`` and cookies to those of the seed's
  origin only (docs/contract.md §3.7, §10.6), redirects included.
* :class:`SiteGateMiddleware` (order 450): a request to one tenant site of a shared suffix
  (``mallory.github.io`` in bucket ``github.io``) waits while that site's own ``Retry-After`` or
  ``Crawl-delay`` says so, without parking its siblings.
* :class:`FrontierRedirectMiddleware` and :class:`FrontierMetaRefreshMiddleware` (600, 580):
  Scrapy's, in their place, ending the lease of a page whose redirects they give up on.
* :class:`LocationHostGuardMiddleware` (order 610) and :class:`PageHostGuardMiddleware` (585): a
  redirect, ``<base>`` or meta refresh naming a host that cannot be a host name is refused before
  Scrapy IDNA-encodes it.
* :class:`RetryAfterMiddleware` (order 600, so it sees a response before Scrapy's
  ``RetryMiddleware``): a 429 with ``Retry-After`` backs the domain off cluster-wide (the site
  alone, for a tenant of a shared suffix).
* :class:`CrawlDelayMiddleware` (order 960): a robots.txt ``Crawl-delay`` becomes a cluster-wide
  limit of its domain (of the site alone, for a tenant of a shared suffix).
* :class:`ResponseStatsMiddleware` (order 950): counts every response by status, and every network
  failure as 504 (docs/contract.md §4.7).
* :class:`~crawlhive.crawler.netguard.NetworkGuardMiddleware` (order 990, next to the downloader):
  a request the network guard refused is not retried and fails as ``blocked network: …``.

Spider middleware :class:`FrontierSpiderMiddleware` (order 950, nearest the spider) turns the
requests a spider yields into frontier requests of the same crawl, checks the lease and filters the
links (:meth:`CrawlRuntime.admit`), and passes the items on to the item pipelines, which end with
crawlhive's output (:mod:`crawlhive.crawler.pipelines`).

Retries are Scrapy's own ``RetryMiddleware`` (``get_retry_request``); its retry comes back to the
scheduler, which puts it into the frontier for any crawler. Scrapy's cookie jar is disabled
(``COOKIES_ENABLED = False``), so ``Set-Cookie`` is never carried to later requests, as in SC.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

from protego import Protego
from redis.exceptions import RedisError
from scrapy import Request
from scrapy.downloadermiddlewares.redirect import MetaRefreshMiddleware, RedirectMiddleware
from scrapy.exceptions import IgnoreRequest
from scrapy.http import TextResponse
from scrapy.utils import response as scrapy_response

from crawlhive.crawler.admit import Verdict
from crawlhive.crawler.leases import REDIS_FAILURES
from crawlhive.crawler.limits import too_large
from crawlhive.crawler.links import allowed_domains, host_allowed, in_scope, link_allowed, names_impossible_host
from crawlhive.crawler.requests import (
    FAILURE,
    RETRY_AFTER,
    CannotTravel,
    FrontierLinks,
    Unfetchable,
    context_of,
    cookie_pairs,
    is_seed,
)
from crawlhive.crawler.runtime import CrawlRuntime
from crawlhive.crawler.sitemaps import (
    SITEMAP,
    Discovered,
    SitemapTooLarge,
    discover,
    robots_request,
    sitemap_request,
)
from crawlhive.utils.frontier import defer_domain, defer_site, parse_retry_after, site_gate
from crawlhive.utils.frontier.recrawl import CONDITIONAL_HEADERS
from crawlhive.utils.rules.domains import domain_of_url, origin_of, tenant_site
from crawlhive.utils.state.stats import NETWORK_FAILURE_CODE

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


def error_text(exception: BaseException) -> str:
    """``<ExceptionClass>: <message>``, the ``error`` of a crawl dead letter (docs/contract.md §6 b).

    Scrapy (>= 2.19) wraps Twisted's network errors in its own ``Download*Error``; the original
    (e.g. Twisted's ``ConnectionRefusedError``) is named, as in SC.
    """
    if type(exception).__module__ == "scrapy.exceptions" and exception.__cause__ is not None:
        exception = exception.__cause__
    return f"{type(exception).__name__}: {exception}"


def cookie_header(request: FrontierRequest) -> str | None:
    """The ``Cookie`` header of a crawl's :func:`cookie_pairs`, or None without any."""
    pairs = cookie_pairs(request)
    return "; ".join(f"{k}={v}" for k, v in pairs.items()) if pairs else None


class RequestShapingMiddleware:
    """Applies ``useragent`` to every request of a crawl, and ``headers`` and the cookies only to
    requests whose scheme, host and port are the seed's (``FrontierRequest.seed_origin``), so
    credentials never reach another site, a sibling host under the same registered domain, or the
    target of a redirect elsewhere (docs/contract.md §3.7, §10.6). Runs again on every redirect:
    a request that left the seed's origin loses them, and one that leaves the crawl's
    ``allowed_domains`` is dropped like such a link (§10.7). Scrapy has no per-request equivalent."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls()

    def process_request(self, request: Request) -> None:
        context = context_of(request)
        if context is None:
            return
        crawl = context.request
        if request.meta.get("redirect_urls") and crawl.allowed_domains:
            # A redirect is a link the site chose: it must stay inside allowed_domains (§10.7).
            if not host_allowed(request.url, allowed_domains(crawl)):
                raise IgnoreRequest(f"redirect to {request.url} leaves the crawl's allowed_domains")
        same_origin = bool(crawl.seed_origin) and origin_of(request.url) == crawl.seed_origin
        cookie = cookie_header(crawl)
        for name, value in (crawl.headers or {}).items():
            if same_origin:
                request.headers[name] = value
            else:
                request.headers.pop(name, None)
        if cookie is not None:
            if same_origin:
                request.headers["Cookie"] = cookie
            else:
                request.headers.pop("Cookie", None)
        if crawl.useragent:
            request.headers["User-Agent"] = crawl.useragent


class _DropsLeaseOnIgnore:
    """Mixed into Scrapy's redirect middlewares: an ``IgnoreRequest`` they raise in
    ``process_response`` (``max redirections reached``: a redirect loop, or more than
    REDIRECT_MAX_TIMES hops) ends the page's lease as a policy drop. Scrapy passes an exception of
    ``process_response`` to no ``process_exception`` (LeaseOutcomeMiddleware never saw it), so
    the lease stayed in flight until given up and the loop was fetched again after every reclaim."""

    crawler: Crawler

    def process_response(self, request: Request, response: Response, spider: Any = None) -> Request | Response:
        try:
            return super().process_response(request, response)  # type: ignore[misc,no-any-return]
        except IgnoreRequest as exc:
            context = context_of(request)
            if context is not None and not context.done:
                logger.info("not following the redirects of %s: %s (REDIRECT_MAX_TIMES)", request.url[:200], exc)
                CrawlRuntime.of(self.crawler).leases.drop(context)
            raise


class _ForgetsValidators:
    """Mixed into Scrapy's redirect middlewares: a redirect hop is sent without the validators
    (``If-None-Match``, ``If-Modified-Since``) of the page it comes from. They name the stored
    version of *that* URL (§19.3); Scrapy copies every header to the hop, so another URL (another
    host even) was told the first page's ETag, and a 304 it answered to it by coincidence made the
    page "unchanged". The hop's answer is judged as a fetch without validators (its body)."""

    def _build_redirect_request(
        self, source_request: Request, response: Response, *, url: str, **kwargs: Any
    ) -> Request:
        redirected: Request = super()._build_redirect_request(source_request, response, url=url, **kwargs)  # type: ignore[misc]
        for name in CONDITIONAL_HEADERS:
            redirected.headers.pop(name, None)
        return redirected


class FrontierRedirectMiddleware(_ForgetsValidators, _DropsLeaseOnIgnore, RedirectMiddleware):
    """Scrapy's ``RedirectMiddleware`` (order 600, in its place), ending the lease of a page it
    gives up on, and forgetting the page's validators on the hop."""


class FrontierMetaRefreshMiddleware(_ForgetsValidators, _DropsLeaseOnIgnore, MetaRefreshMiddleware):
    """Scrapy's ``MetaRefreshMiddleware`` (order 580, in its place), ending the lease of a page it
    gives up on, and forgetting the page's validators on the hop."""


class LocationHostGuardMiddleware:
    """A redirect whose ``Location`` names a host that cannot be a host name
    (:func:`~crawlhive.utils.rules.domains.host_problem`) is refused before Scrapy's ``RedirectMiddleware``
    (600) IDNA-encodes it, which is quadratic in the length of a label: the page is dropped like a
    redirect out of ``allowed_domains`` (§10.7). Order 610: its ``process_response`` runs first."""

    def __init__(self, runtime: CrawlRuntime) -> None:
        self.runtime = runtime

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(CrawlRuntime.of(crawler))

    def process_response(self, request: Request, response: Response) -> Response:
        location = response.headers.get(b"Location") if 300 <= response.status < 400 else None
        if location and names_impossible_host(location.decode("utf-8", errors="replace"), ""):
            context = context_of(request)
            if context is not None:  # Scrapy skips process_exception for a process_response error
                self.runtime.leases.drop(context)
            raise IgnoreRequest("redirect to a host that cannot be a host name")
        return response


class PageHostGuardMiddleware:
    """A ``<base href>`` or ``<meta http-equiv="refresh">`` (read by Scrapy from the first 4096
    characters of a page) naming a host that cannot be a host name is ignored, as if absent:
    Scrapy would IDNA-encode it (quadratic in a label's length; a 1,300-character label cost 2 s)
    in ``response.selector`` (every spider's ``response.css``) and in ``MetaRefreshMiddleware``.
    Order 585: after the body is decoded (590), before ``MetaRefreshMiddleware`` (580).

    Scrapy keeps what it read in ``scrapy.utils.response._baseurl_cache`` and ``_metaref_cache``
    (per response); this stores the page's own URL (no base) and "no refresh" there. There is no
    public hook (``tests/unit/test_fetch_parts.py`` checks it still works)."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls()

    def process_response(self, request: Request, response: Response) -> Response:
        if not isinstance(response, TextResponse):
            return response
        head = response.text[:4096]
        if names_impossible_host(head, "<base"):
            scrapy_response._baseurl_cache[response] = response.url
        if names_impossible_host(head, "refresh"):
            scrapy_response._metaref_cache[response] = (None, None)
        return response


class ResponseStatsMiddleware:
    """Counts each response by status code and each network failure as 504 (SC's convention), per
    spider type and per machine, in the crawler's rolling-window stats (docs/contract.md §4.7)."""

    def __init__(self, runtime: CrawlRuntime) -> None:
        self.runtime = runtime

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(CrawlRuntime.of(crawler))

    def process_response(self, request: Request, response: Response) -> Response:
        self.runtime.count_response(response.status)
        self.runtime.observe_response(request.url, request.meta.get("download_latency"), response.status)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        if not isinstance(exception, IgnoreRequest):
            self.runtime.count_response(NETWORK_FAILURE_CODE)
            self.runtime.observe_response(request.url, None, None)


class LeaseOutcomeMiddleware:
    """Ends the lease of a request whose download finally failed (after Scrapy's retries): a crawl
    dead letter for a network error (docs/contract.md §3.10), a policy drop for ``IgnoreRequest``."""

    def __init__(self, runtime: CrawlRuntime) -> None:
        self.runtime = runtime

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(CrawlRuntime.of(crawler))

    def process_exception(self, request: Request, exception: Exception) -> None:
        context = context_of(request)
        if context is None or context.done:
            return
        if isinstance(exception, IgnoreRequest):
            self.runtime.leases.drop(context)
        else:
            ended = request.meta.get(FAILURE)  # a reason given by the network guard or the size limit
            self.runtime.emitter.fail(context, ended if isinstance(ended, str) else error_text(exception))


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


class CrawlDelayMiddleware:
    """Reads ``Crawl-delay`` from every robots.txt that Scrapy's ``RobotsTxtMiddleware`` (or a
    sitemap crawl) fetches, for our user agent, and stores it for the domain in Redis
    (``keys.crawl_delay``, capped at ROBOTSTXT_MAX_CRAWL_DELAY, refreshed with each read and gone a
    day after the last); the pop script then fetches that domain at most once per delay,
    cluster-wide, unless a stricter limit applies (docs/contract.md §14). Parsing is Protego's,
    the parser Scrapy's own robots.txt middleware uses."""

    #: Seconds a stored Crawl-delay lives without a new read of its robots.txt.
    CRAWL_DELAY_TTL_S = 86_400

    def __init__(self, runtime: CrawlRuntime, user_agent: str, obey: bool) -> None:
        self.runtime = runtime
        self.user_agent = user_agent
        self.obey = obey
        self.cap = runtime.settings.ROBOTSTXT_MAX_CRAWL_DELAY

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        user_agent = settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT") or "*"
        return cls(CrawlRuntime.of(crawler), str(user_agent), settings.getbool("ROBOTSTXT_OBEY"))

    def process_response(self, request: Request, response: Response) -> Response:
        if not self.obey or not request.meta.get("dont_obey_robotstxt") or response.status >= 500:
            return response  # a server error says nothing about the delay: keep what is known
        if urlsplit(request.url).path != "/robots.txt":
            return response
        delay = None  # no robots.txt (4xx), or one without a Crawl-delay for us
        if response.status == 200:
            try:
                delay = Protego.parse(response.body.decode("utf-8", errors="replace")).crawl_delay(self.user_agent)
            except Exception:  # noqa: BLE001 - a robots.txt Protego cannot read sets no delay
                delay = None
        domain = domain_of_url(request.url)
        site = tenant_site(urlsplit(request.url).hostname or "")
        keys = self.runtime.keys
        key = keys.crawl_delay(domain) if site is None else keys.site_delay(domain, site)
        try:
            if delay is not None and float(delay) > 0:
                seconds = min(float(delay), self.cap)
                self.runtime.redis.set(key, f"{seconds:g}", ex=self.CRAWL_DELAY_TTL_S)
                logger.info(
                    "%s asks for a Crawl-delay of %gs: applied cluster-wide to %s", request.url, seconds, site or domain
                )
            else:
                self.runtime.redis.delete(key)
        except RedisError as exc:
            logger.warning("could not store the Crawl-delay of %s (%r); check REDIS_URL", request.url, exc)
        return response


class SiteGateMiddleware:
    """Holds back a request to a tenant site of a shared suffix while that site asked for a pause.

    Buckets ignore the private section of the public suffix list (§3.2), so ``mallory.github.io``
    and ``alice.github.io`` share one queue and one throttle. What one tenant asks for itself, a
    ``Retry-After``, a ``Crawl-delay`` or the adaptive throttle's slow-down after its own 429s, 503s
    or slow answers (§21.4), is kept for that site alone (``keys.site_wait``, ``keys.site_delay``,
    the site's field in ``keys.autothrottle``) and applied here: a request to a paused site goes back to the frontier
    unchanged for the time left (:meth:`LeaseTable.postpone`: no attempt counted), its siblings are
    fetched meanwhile. Requests to other hosts cost nothing (:func:`tenant_site` is cached per host).
    Order 450: after the request is shaped, before anything is sent.
    """

    def __init__(self, runtime: CrawlRuntime) -> None:
        self.runtime = runtime

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(CrawlRuntime.of(crawler))

    def process_request(self, request: Request) -> None:
        context = context_of(request)
        if context is None or context.done:
            return
        site = tenant_site(urlsplit(request.url).hostname or "")
        if site is None:
            return
        try:
            settings = self.runtime.settings
            domain = domain_of_url(request.url)
            wait = site_gate(
                self.runtime.redis, self.runtime.keys, domain, site, settings.QUEUE_HITS, settings.QUEUE_WINDOW
            )
        except RedisError as exc:
            logger.warning("could not read the pause of %s (%r); fetching it anyway", site, exc)
            return
        if wait > 0:
            self.runtime.leases.postpone(context, wait)
            raise IgnoreRequest(f"{site} asked for a pause: {wait:.1f}s left")


class RetryAfterMiddleware:
    """On a 429 with ``Retry-After``, backs the request's domain off for every crawler of its
    spider type (:func:`crawlhive.utils.frontier.defer_domain`), so the retry that Scrapy's
    ``RetryMiddleware`` then queues, and every other request of that domain, waits in the frontier
    instead of hammering the server. Order 600: its ``process_response`` runs before the retry's."""

    def __init__(self, runtime: CrawlRuntime) -> None:
        self.runtime = runtime

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(CrawlRuntime.of(crawler))

    def process_response(self, request: Request, response: Response) -> Response:
        if response.status != 429:
            return response
        delay = parse_retry_after(response.headers.get("Retry-After"))
        context = context_of(request)
        if delay is None or context is None:
            return response
        request.meta[RETRY_AFTER] = delay  # the retry Scrapy makes of it (a copy) waits as long
        crawl = context.request
        domain = domain_of_url(request.url)
        site = tenant_site(urlsplit(request.url).hostname or "")
        try:
            if site is None:
                defer_domain(self.runtime.redis, self.runtime.keys, crawl.spiderid, domain, delay)
            else:
                defer_site(self.runtime.redis, self.runtime.keys, domain, site, delay)
        except RedisError as exc:
            logger.warning("could not back off %s after a 429 (%r); check REDIS_URL", site or domain, exc)
            return response
        what = f"domain {domain}" if site is None else f"site {site}"
        logger.info("%s answered 429: %s backs off for %.1fs", request.url, what, delay)
        return response
