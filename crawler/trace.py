"""A crawler's spans of one page (docs/contract.md §26.3), built only while tracing is on.

A leased request whose frontier ``trace`` parses (:func:`~crawlhive.utils.backends.tracing.parse_frontier_trace`)
gets a :class:`PageTrace` in its lease context; every place of the page's way calls it through
that context, so the spans hang on the page they belong to, never on Twisted's idea of a current
context (many pages run interleaved in the reactor thread). The spans:

``crawlhive.crawler.page`` (from the request's enqueue time to the end of its lease here: acked,
retried, handed back), the parent of
``crawlhive.crawler.frontier_wait`` (enqueue → lease: time queued, including the wait the
cluster-wide throttle imposed on the pop), ``crawlhive.crawler.throttle_wait`` (lease → the first
fetch starts: the engine's and downloader slot's queue), ``crawlhive.crawler.fetch`` (one per
download of the page: redirect hops and Scrapy's own retries each have one), ``crawlhive.crawler.parse``
(the response's way from the downloader through the spider and its middlewares) and
``crawlhive.crawler.emit`` (one per record sent: until the broker acknowledged it; its context
goes out in the record's headers, the cleaner's parent).

A page's links start traces of their own (``l`` relation), linked to the page's span: the
standard's answer to a fan-out (a crawl of 100,000 pages as one trace would be unreadable, and
most backends cap a trace's spans), so each page has its own trace, and its parent page is one
click away.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawlhive.crawler.requests import context_of
from crawlhive.utils.backends import tracing
from crawlhive.utils.backends.tracing import Context, Link, SpanKind, set_span_in_context

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.http import Response

    from crawlhive.utils.frontier import FrontierRequest


class PageTrace:
    """The spans of one leased page (see the module docstring)."""

    __slots__ = ("page", "throttle", "fetch", "response_ns", "fetches", "ended")

    def __init__(self, page: Any, throttle: Any) -> None:
        self.page = page
        self.throttle: Any = throttle
        self.fetch: Any = None
        self.response_ns = 0
        self.fetches = 0
        self.ended = False

    @classmethod
    def start(cls, request: FrontierRequest, lease_ns: int) -> PageTrace | None:
        """The page spans of *request*, leased at *lease_ns*; None when its ``trace`` does not parse."""
        parsed = tracing.parse_frontier_trace(request.trace)
        if parsed is None:
            return None
        relation, enqueued_ns, remote = parsed
        enqueued_ns = min(enqueued_ns, lease_ns)  # another machine's clock may run ahead
        tracer = tracing.tracer()
        attributes: dict[str, Any] = {
            "url.full": request.url,
            "crawlhive.appid": request.appid,
            "crawlhive.crawlid": request.crawlid,
            "crawlhive.spiderid": request.spiderid,
            "crawlhive.domain": request.domain,
            "crawlhive.depth": request.depth,
            "crawlhive.retry_times": request.retry_times,
        }
        if relation == tracing.LINK:  # a link: a trace of its own, linked to the page that found it
            page = tracer.start_span(
                "crawlhive.crawler.page",
                context=Context(),
                kind=SpanKind.CONSUMER,
                attributes=attributes,
                links=[Link(tracing.span_context_of(remote))],
                start_time=enqueued_ns,
            )
        else:
            page = tracer.start_span(
                "crawlhive.crawler.page",
                context=remote,
                kind=SpanKind.CONSUMER,
                attributes=attributes,
                start_time=enqueued_ns,
            )
        within = set_span_in_context(page)
        tracer.start_span("crawlhive.crawler.frontier_wait", context=within, start_time=enqueued_ns).end(lease_ns)
        throttle = tracer.start_span("crawlhive.crawler.throttle_wait", context=within, start_time=lease_ns)
        return cls(page, throttle)

    def child(self, name: str, **attributes: Any) -> Any:
        """A new span *name* under the page span, started now."""
        return tracing.tracer().start_span(name, context=set_span_in_context(self.page), attributes=attributes)

    def fetch_started(self, url: str) -> None:
        """A download of the page starts (the first one ends the throttle wait)."""
        if self.throttle is not None:
            self.throttle.end()
            self.throttle = None
        if self.fetch is not None:
            self.fetch.end()
        self.fetches += 1
        self.fetch = self.child("crawlhive.crawler.fetch", **{"url.full": url, "crawlhive.fetch.attempt": self.fetches})

    def fetch_ended(self, status: int | None = None, error: str | None = None) -> None:
        """The download ended with HTTP *status*, or failed with *error*; the parse starts after a response."""
        fetch, self.fetch = self.fetch, None
        if fetch is None:
            return
        if status is not None:
            fetch.set_attribute("http.response.status_code", status)
        if error is not None:
            tracing.fail(fetch, error)
        self.response_ns = tracing.now_ns()
        fetch.end(self.response_ns)

    def parsed(self, items: int) -> None:
        """The spider's output for the page is handled (*items* records to send): the parse span,
        from the last response's arrival (made now: a redirect's response is not parsed)."""
        if self.response_ns and not self.ended:
            span = tracing.tracer().start_span(
                "crawlhive.crawler.parse",
                context=set_span_in_context(self.page),
                attributes={"crawlhive.items": items},
                start_time=self.response_ns,
            )
            span.end()
            self.response_ns = 0

    def emit(self, topic: str) -> tuple[Any, list[tuple[str, bytes]]]:
        """The span of a record sent to *topic*, and the headers that carry it."""
        span = tracing.tracer().start_span(
            "crawlhive.crawler.emit",
            context=set_span_in_context(self.page),
            kind=SpanKind.PRODUCER,
            attributes={"messaging.system": "kafka", "messaging.destination.name": topic},
        )
        return span, tracing.headers_of(span)

    def link_trace(self) -> str:
        """The frontier ``trace`` of the page's links: traces of their own, linked to this page."""
        return tracing.frontier_trace(self.page, tracing.LINK)

    def end(self, outcome: str, error: str | None = None) -> None:
        """End the page's spans here: its lease ended with *outcome* (``crawled``, ``failed``,
        ``dropped``, ``retry``, ``postponed``, ``given back``, ``abandoned``)."""
        for name in ("throttle", "fetch"):
            span = getattr(self, name)
            if span is not None:
                span.end()
                setattr(self, name, None)
        if self.ended:
            return
        self.ended = True
        self.page.set_attribute("crawlhive.outcome", outcome)
        if error is not None:
            tracing.fail(self.page, error)
        self.page.end()


class TraceMiddleware:
    """Downloader middleware (order 995, inside every other one, next to the download handler; in
    the crawler's settings only while tracing is on): a page's fetch span from the request leaving
    the other middlewares (a site gate's wait is throttle wait) to its response or failure reaching
    them, one per download: each redirect hop and each retry of Scrapy's own has its own."""

    @classmethod
    def from_crawler(cls, crawler: Any) -> TraceMiddleware:
        return cls()

    def process_request(self, request: Request) -> None:
        context = context_of(request)
        if context is not None and context.trace is not None:
            context.trace.fetch_started(request.url)

    def process_response(self, request: Request, response: Response) -> Response:
        context = context_of(request)
        if context is not None and context.trace is not None:
            context.trace.fetch_ended(status=response.status)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        context = context_of(request)
        if context is not None and context.trace is not None:
            context.trace.fetch_ended(error=f"{type(exception).__name__}: {exception}"[:500])
