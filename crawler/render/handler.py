"""The download handler of rendering crawlers: scrapy-playwright's, with a deadline on each load."""

from __future__ import annotations

import asyncio
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

    from crawlhive.utils.config.settings import Settings

#: The download handler of each crawler (one for http and https).
_HANDLERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _playwright_handler() -> type:
    from scrapy_playwright.handler import ScrapyPlaywrightDownloadHandler

    handler: type = ScrapyPlaywrightDownloadHandler
    return handler


class RenderDownloadHandler:
    """scrapy-playwright's download handler with a deadline on every browser load.

    Scrapy's DOWNLOAD_TIMEOUT is enforced by its own HTTP handler, not by scrapy-playwright, and a
    load whose browser was killed can wait forever on the dead page; here each load fails after
    RENDER_TIMEOUT + DOWNLOAD_TIMEOUT, and is retried like any failed download. Built by
    :meth:`from_crawler` as a subclass, so that importing this module needs no Playwright.
    """

    lazy = False  # started with the engine, as scrapy-playwright's own handler is

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Any:
        # One handler for both schemes: Scrapy builds one per scheme, and each would start a
        # Playwright driver (a Node.js process of about 100 MB) and a browser of its own.
        shared = _HANDLERS.get(crawler)
        if shared is not None:
            return shared
        base = _playwright_handler()
        settings: Settings = crawler.settings["CRAWLHIVE_SETTINGS"]
        limit = settings.RENDER_TIMEOUT + settings.DOWNLOAD_TIMEOUT

        class Handler(base):  # type: ignore[misc,valid-type]
            _closed = False

            async def _download_request(self, request: Request, spider: Any = None) -> Any:
                try:
                    return await asyncio.wait_for(super()._download_request(request, spider), limit)
                except TimeoutError:
                    raise TimeoutError(f"the browser did not load the page within {limit:g} s") from None

            async def close(self) -> None:
                if not self._closed:  # once, though registered for two schemes
                    self._closed = True
                    await super().close()

        handler = _HANDLERS[crawler] = Handler(crawler)
        return handler
