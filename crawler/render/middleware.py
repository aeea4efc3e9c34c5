"""The downloader middleware of rendering crawlers: :class:`RenderMiddleware`."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

from scrapy.exceptions import IgnoreRequest

from crawlhive.crawler.links import allowed_domains, host_allowed
from crawlhive.crawler.netguard import installed_resolver
from crawlhive.crawler.render.guard_proxy import GuardProxy, take_proxy_socket
from crawlhive.crawler.render.page import NAVIGATED, PageTooLarge, render_meta
from crawlhive.crawler.requests import context_of, end_for_good
from crawlhive.crawler.sitemaps import SITEMAP

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from crawlhive.utils.config.settings import Settings


class RenderMiddleware:
    """Downloader middleware of rendering crawlers (order 980): checks a page's host with the
    network guard before the browser loads it, serves the :class:`GuardProxy`, closes each page's
    browser context when its download ends, and drops a page the browser was redirected out of the
    crawl's ``allowed_domains`` (Chromium follows redirects itself, so Scrapy never sees them)."""

    def __init__(self, proxy: GuardProxy, timeout_s: float, user_agent: str, runtime: Any, max_bytes: int) -> None:
        self.proxy = proxy
        self.timeout_s = timeout_s
        self.user_agent = user_agent
        self.runtime = runtime
        self.leases = runtime.leases
        self.max_bytes = max_bytes

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        from scrapy import signals

        from crawlhive.crawler.runtime import CrawlRuntime  # here: importing it installs the reactor

        settings: Settings = crawler.settings["CRAWLHIVE_SETTINGS"]
        sock = take_proxy_socket(crawler.settings.getint("CRAWLHIVE_RENDER_PROXY_PORT"))
        proxy = GuardProxy(
            sock,
            _guarded_lookup,
            idle_timeout_s=settings.RENDER_PROXY_IDLE_TIMEOUT,
            max_connections=settings.RENDER_PROXY_MAX_CONNECTIONS,
        )
        middleware = cls(
            proxy,
            settings.RENDER_TIMEOUT,
            settings.user_agent,
            CrawlRuntime.of(crawler),
            settings.DOWNLOAD_MAXSIZE,
        )
        crawler.signals.connect(middleware._engine_started, signal=signals.engine_started)
        crawler.signals.connect(middleware._engine_stopped, signal=signals.engine_stopped)
        return middleware

    async def _engine_started(self) -> None:
        await self.proxy.start()

    async def _engine_stopped(self) -> None:
        await self.proxy.close()

    async def process_request(self, request: Request) -> None:
        context = context_of(request)
        if context is None or request.meta.get(SITEMAP):
            return  # robots.txt and sitemaps are fetched without the browser, through the guard
        request.meta.update(render_meta(self.timeout_s, context.request.useragent or self.user_agent, self.max_bytes))
        host = urlsplit(request.url).hostname or ""
        await _guarded_lookup(host)  # BlockedNetwork: NetworkGuardMiddleware ends it for good

    async def process_response(self, request: Request, response: Response) -> Response:
        await _close_page(request)
        context = context_of(request)
        if context is not None and response.url != request.url and context.request.allowed_domains:
            if not host_allowed(response.url, allowed_domains(context.request)):
                # A policy drop, as for a plain redirect out (§10.7). Scrapy hands an IgnoreRequest
                # raised here to no process_exception, so the lease is ended here.
                self.leases.drop(context)
                raise IgnoreRequest(f"redirect to {response.url} leaves the crawl's allowed_domains")
        from crawlhive.crawler.limits import too_large  # here: importing it installs the reactor

        if context is not None and 0 < self.max_bytes < len(response.body):
            # Measured in the page first (settle); this catches the escapes it does not count.
            if not context.done:
                self.runtime.emitter.fail(context, too_large(f"the rendered page's DOM is over {self.max_bytes} bytes"))
            raise IgnoreRequest(f"the rendered page's DOM is over {self.max_bytes} bytes")
        return response

    async def process_exception(self, request: Request, exception: Exception) -> None:
        await _close_page(request)
        if isinstance(exception, PageTooLarge):
            from crawlhive.crawler.limits import too_large

            end_for_good(request, too_large(str(exception)))
            return
        resolver = installed_resolver()
        for url in request.meta.get(NAVIGATED, ()):
            reason = resolver.refusal(urlsplit(url).hostname or "") if resolver is not None else None
            if reason is not None:  # a redirect to a blocked address: not a network error
                end_for_good(request, reason)
                return


async def _close_page(request: Request) -> None:
    """Close the browser context of *request*'s page (and so the page), if it has one."""
    page = request.meta.pop("playwright_page", None)
    if page is None:
        return
    with contextlib.suppress(Exception):  # a crashed browser took it already
        await page.context.close()


async def _guarded_lookup(host: str) -> str:
    """The address the crawler's guarded resolver gives *host*.

    Raises:
        BlockedNetwork: the guard refused it (the reason is remembered for the dead letter).
        DNSLookupError: it does not resolve.
    """
    resolver = installed_resolver()
    if resolver is None:
        raise RuntimeError("the network guard's resolver is not installed (TWISTED_DNS_RESOLVER)")
    deferred = resolver.getHostByName(host)
    address: str = await deferred.asFuture(asyncio.get_running_loop())
    return address
