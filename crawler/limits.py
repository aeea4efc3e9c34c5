"""Bounded work per request: a response larger than DOWNLOAD_MAXSIZE (docs/contract.md §10.7).

Scrapy enforces ``DOWNLOAD_MAXSIZE`` itself, in two places, and this module turns both outcomes into
a crawl dead letter ``response too large: …`` that is never retried:

* the download handler cancels a body that announces or streams more bytes than the limit
  (``DownloadCancelledError`` with Scrapy's "larger than download max size" message): seen by
  :meth:`ResponseLimitMiddleware.process_exception`, nearest the downloader, before the retry;
* ``HttpCompressionMiddleware`` refuses a body that decompresses past the limit (a compression
  bomb) by raising ``IgnoreRequest`` from its ``process_response``, which no middleware's
  ``process_exception`` sees. :class:`ResponseLimitMiddleware` takes its place (order 590; Scrapy's
  own is disabled), decompresses through it, and ends the lease itself when it refuses.

A response of the impersonated fetch (``crawler/impersonate.py``) was decoded by curl as it arrived,
DOWNLOAD_MAXSIZE counted on the decoded bytes (the first case above); it is flagged ``decoded`` and
only loses its ``Content-Encoding`` header here.

Scrapy gives no exception type of its own for either case; the tests in
``tests/integration/test_crawler.py`` pin the behaviour so an upgrade that changes it fails there.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Self

from scrapy.downloadermiddlewares.httpcompression import HttpCompressionMiddleware
from scrapy.exceptions import DownloadCancelledError, IgnoreRequest
from twisted.internet.defer import CancelledError

from crawlhive.crawler.impersonate import DECODED, ONCE_DECODED
from crawlhive.crawler.items import ORIGINAL_HEADERS_META, original_headers
from crawlhive.crawler.requests import context_of, end_for_good
from crawlhive.crawler.runtime import CrawlRuntime

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

#: Part of the message of Scrapy's size cancellation (``scrapy.utils._download_handlers``).
_SCRAPY_MAXSIZE_TEXT = "larger than download max size"


def too_large(detail: str) -> str:
    """The dead-letter ``error`` of a response over DOWNLOAD_MAXSIZE."""
    return f"response too large: {detail} (DOWNLOAD_MAXSIZE)"


class ResponseLimitMiddleware:
    """Ends a frontier request whose response is over DOWNLOAD_MAXSIZE, raw or decoded (module
    docstring), as ``response too large: …`` without retries."""

    def __init__(self, crawler: Crawler, runtime: CrawlRuntime) -> None:
        self.limit = crawler.settings.getint("DOWNLOAD_MAXSIZE")
        self.runtime = runtime
        self.decompress = HttpCompressionMiddleware.from_crawler(crawler)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler, CrawlRuntime.of(crawler))

    def process_exception(self, request: Request, exception: Exception) -> None:
        if context_of(request) is None:
            return
        if isinstance(exception, DownloadCancelledError | CancelledError) and _SCRAPY_MAXSIZE_TEXT in str(exception):
            decoded = " once decoded" if ONCE_DECODED in str(exception) else ""
            end_for_good(request, too_large(f"more than {self.limit} bytes{decoded}"))

    def process_request(self, request: Request) -> None:
        self.decompress.process_request(request)  # Accept-Encoding, as Scrapy's own would

    def process_response(self, request: Request, response: Response) -> Request | Response:
        request.meta[ORIGINAL_HEADERS_META] = original_headers(response.headers)  # as received (§20.4)
        if DECODED in response.flags:  # the impersonated fetch's curl decoded it, within the limit
            response.headers.pop(b"Content-Encoding", None)
            return response
        try:
            return self.decompress.process_response(request, response)
        except IgnoreRequest:
            context = context_of(request)
            if context is not None and not context.done:
                self.runtime.emitter.fail(context, too_large(f"more than {self.limit} bytes once decoded"))
            raise
