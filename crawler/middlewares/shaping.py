"""A crawl's ``useragent``, ``headers`` and cookies applied to its requests:
:class:`RequestShapingMiddleware` (order 400, before Scrapy's ``UserAgentMiddleware``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from scrapy import Request
from scrapy.exceptions import IgnoreRequest

from crawlhive.crawler.links import allowed_domains, host_allowed
from crawlhive.crawler.requests import context_of, cookie_pairs
from crawlhive.utils.rules.domains import origin_of

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from crawlhive.utils.frontier import FrontierRequest


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
