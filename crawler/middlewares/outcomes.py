"""How a download ended, for the lease and for the stats: :class:`LeaseOutcomeMiddleware` (order
50) ends the lease of a request whose download finally failed, :class:`ResponseStatsMiddleware`
(order 950) counts every response by status and every network failure as 504."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.exceptions import IgnoreRequest

from crawlhive.crawler.requests import FAILURE, context_of
from crawlhive.crawler.runtime import RuntimeComponent
from crawlhive.utils.state.stats import NETWORK_FAILURE_CODE

if TYPE_CHECKING:
    from scrapy.http import Response


def error_text(exception: BaseException) -> str:
    """``<ExceptionClass>: <message>``, the ``error`` of a crawl dead letter (docs/contract.md §6 b).

    Scrapy (>= 2.19) wraps Twisted's network errors in its own ``Download*Error``; the original
    (e.g. Twisted's ``ConnectionRefusedError``) is named, as in SC.
    """
    if type(exception).__module__ == "scrapy.exceptions" and exception.__cause__ is not None:
        exception = exception.__cause__
    return f"{type(exception).__name__}: {exception}"


class ResponseStatsMiddleware(RuntimeComponent):
    """Counts each response by status code and each network failure as 504 (SC's convention), per
    spider type and per machine, in the crawler's rolling-window stats (docs/contract.md §4.7)."""

    def process_response(self, request: Request, response: Response) -> Response:
        self.runtime.count_response(response.status)
        self.runtime.observe_response(request.url, request.meta.get("download_latency"), response.status)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        if not isinstance(exception, IgnoreRequest):
            self.runtime.count_response(NETWORK_FAILURE_CODE)
            self.runtime.observe_response(request.url, None, None)


class LeaseOutcomeMiddleware(RuntimeComponent):
    """Ends the lease of a request whose download finally failed (after Scrapy's retries): a crawl
    dead letter for a network error (docs/contract.md §3.10), a policy drop for ``IgnoreRequest``."""

    def process_exception(self, request: Request, exception: Exception) -> None:
        context = context_of(request)
        if context is None or context.done:
            return
        if isinstance(exception, IgnoreRequest):
            self.runtime.leases.drop(context)
        else:
            ended = request.meta.get(FAILURE)  # a reason given by the network guard or the size limit
            self.runtime.emitter.fail(context, ended if isinstance(ended, str) else error_text(exception))
