"""Redirects, meta refreshes and ``<base>``: Scrapy's redirect middlewares in their place, ending
the lease of a page they give up on and forgetting its validators on the hop
(:class:`FrontierRedirectMiddleware`, order 600; :class:`FrontierMetaRefreshMiddleware`, 580), and
the guards on the hosts they name (:class:`LocationHostGuardMiddleware`, 610;
:class:`PageHostGuardMiddleware`, 585)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Self

from scrapy import Request
from scrapy.downloadermiddlewares.redirect import MetaRefreshMiddleware, RedirectMiddleware
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import TextResponse
from scrapy.spidermiddlewares.referer import RefererMiddleware
from scrapy.utils import response as scrapy_response

from crawlhive.crawler.links import names_impossible_host
from crawlhive.crawler.requests import context_of
from crawlhive.crawler.runtime import CrawlRuntime, RuntimeComponent
from crawlhive.utils.frontier.recrawl import CONDITIONAL_HEADERS

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response


logger = logging.getLogger(__name__)


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


class _OwnReferer:
    """Mixed into Scrapy's redirect middlewares: the Referer header of a hop set as Scrapy sets it
    (REFERER_ENABLED, REFERRER_POLICY), by a ``RefererMiddleware`` of their own. Scrapy's look for
    the one in the spider middleware chain when the engine starts and warn without it; crawlhive
    keeps it out of the chain (crawler/settings.py), where it would only act on the requests a
    callback yields, which the frontier spider middleware has taken before it sees them.
    ``_engine_started`` is Scrapy's (private) lookup; ``tests/unit/test_fetch_parts.py`` checks that
    a hop still gets its Referer and that nothing warns."""

    crawler: Crawler
    _referer_spider_middleware: RefererMiddleware | None

    def _engine_started(self) -> None:
        try:
            self._referer_spider_middleware = RefererMiddleware.from_crawler(self.crawler)
        except NotConfigured:  # REFERER_ENABLED false: hops are sent without a Referer
            self._referer_spider_middleware = None


class FrontierRedirectMiddleware(_OwnReferer, _ForgetsValidators, _DropsLeaseOnIgnore, RedirectMiddleware):
    """Scrapy's ``RedirectMiddleware`` (order 600, in its place), ending the lease of a page it
    gives up on, and forgetting the page's validators on the hop."""


class FrontierMetaRefreshMiddleware(_OwnReferer, _ForgetsValidators, _DropsLeaseOnIgnore, MetaRefreshMiddleware):
    """Scrapy's ``MetaRefreshMiddleware`` (order 580, in its place), ending the lease of a page it
    gives up on, and forgetting the page's validators on the hop."""


class LocationHostGuardMiddleware(RuntimeComponent):
    """A redirect whose ``Location`` names a host that cannot be a host name
    (:func:`~crawlhive.utils.contract.hosts.host_problem`) is refused before Scrapy's ``RedirectMiddleware``
    (600) IDNA-encodes it, which is quadratic in the length of a label: the page is dropped like a
    redirect out of ``allowed_domains`` (§10.7). Order 610: its ``process_response`` runs first."""

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
