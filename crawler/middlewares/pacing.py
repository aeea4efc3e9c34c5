"""What a site asks of our pace, applied cluster-wide: a tenant site's own pause
(:class:`SiteGateMiddleware`, order 450), a 429's ``Retry-After`` (:class:`RetryAfterMiddleware`,
600) and a robots.txt ``Crawl-delay`` (:class:`CrawlDelayMiddleware`, 960)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Self
from urllib.parse import urlsplit

from protego import Protego
from redis.exceptions import RedisError
from scrapy import Request
from scrapy.exceptions import IgnoreRequest

from crawlhive.crawler.requests import RETRY_AFTER, context_of
from crawlhive.crawler.runtime import CrawlRuntime, RuntimeComponent
from crawlhive.utils.frontier import defer_domain, defer_site, parse_retry_after, site_gate
from crawlhive.utils.rules.domains import domain_of_url, tenant_site

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response


logger = logging.getLogger(__name__)


class SiteGateMiddleware(RuntimeComponent):
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


class RetryAfterMiddleware(RuntimeComponent):
    """On a 429 with ``Retry-After``, backs the request's domain off for every crawler of its
    spider type (:func:`crawlhive.utils.frontier.defer_domain`), so the retry that Scrapy's
    ``RetryMiddleware`` then queues, and every other request of that domain, waits in the frontier
    instead of hammering the server. Order 600: its ``process_response`` runs before the retry's."""

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
