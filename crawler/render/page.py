"""How a rendering crawler loads a page: the request meta for scrapy-playwright
(:func:`render_meta`), what is watched before the load (:func:`watch_navigation`), and settling with
the DOM measured in the page (:func:`settle`, :func:`dom_size`)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from typing import TYPE_CHECKING, Any

from crawlhive.crawler.render.cookie_guard import CookieGuard
from crawlhive.crawler.requests import context_of, cookie_pairs

if TYPE_CHECKING:
    from scrapy import Request

_page_numbers = itertools.count(1)


class PageGone(ConnectionError):
    """The page closed or its renderer crashed before it could be measured: a failed load like a
    lost connection (an ``OSError``, which Scrapy's ``RETRY_EXCEPTIONS`` retries), not a dead letter."""


class PageTooLarge(Exception):
    """A rendered page's DOM is over DOWNLOAD_MAXSIZE (a ``response too large`` dead letter)."""


#: Measures the DOM in the page, without serialising it, and stops counting once past the limit
#: (so at most about DOWNLOAD_MAXSIZE characters of work): element tags and attributes, text,
#: comments. What ``page.content()`` would send (UTF-8) is at least this many bytes, give or take
#: the escapes; the body is measured again once taken (RenderMiddleware.process_response).
_DOM_SIZE_JS = """(limit) => {
  let size = 0;
  const walker = document.createTreeWalker(document, NodeFilter.SHOW_ALL);
  for (let node = walker.currentNode; node; node = walker.nextNode()) {
    if (node.nodeType === Node.ELEMENT_NODE) {
      size += 2 * node.nodeName.length + 5;
      for (const attr of node.attributes) size += attr.name.length + attr.value.length + 4;
    } else if (node.nodeValue) {
      size += node.nodeValue.length;
    }
    if (size > limit) return size;
  }
  return size;
}"""


#: Seconds between two measurements of a page's DOM while it settles.
DOM_CHECK_INTERVAL_S = 1.0


async def settle(page: Any, deadline: float, max_bytes: int = 0) -> None:
    """Wait until *page*'s network is idle, or until *deadline* (``time.monotonic()``) has passed:
    the DOM is taken either way (§15), unless it is over *max_bytes* (DOWNLOAD_MAXSIZE; 0 = no
    limit), measured in the page before anything of it leaves the browser, and every
    :data:`DOM_CHECK_INTERVAL_S` meanwhile (a page whose scripts keep growing it stops there, not at
    the deadline or the container's memory limit).

    Raises:
        PageTooLarge: the DOM is over *max_bytes*.
    """
    remaining_s = deadline - time.monotonic()
    if remaining_s > 0:
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        idle = asyncio.ensure_future(page.wait_for_load_state("networkidle", timeout=remaining_s * 1000))
        idle.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved, always
        try:
            while not idle.done():
                await asyncio.wait({idle}, timeout=DOM_CHECK_INTERVAL_S)
                if not idle.done() and max_bytes > 0 and await dom_size(page, max_bytes) > max_bytes:
                    raise PageTooLarge(f"the rendered page's DOM is over {max_bytes} bytes")
        finally:
            idle.cancel()
        with contextlib.suppress(PlaywrightTimeout, asyncio.CancelledError):
            idle.result()
    if max_bytes > 0 and await dom_size(page, max_bytes) > max_bytes:
        raise PageTooLarge(f"the rendered page's DOM is over {max_bytes} bytes")


async def dom_size(page: Any, limit: int) -> int:
    """The size of *page*'s DOM in characters (:data:`_DOM_SIZE_JS`, counting stops past *limit*),
    measured in an isolated world of its main frame: the page's scripts share its DOM but not its
    JavaScript objects, so no ``createTreeWalker`` or prototype they replace can fake the count
    (``page.evaluate`` runs in the page's own world).

    Raises:
        PageGone: the page could not be measured (it crashed or closed): a failed load, retried.
    """
    try:
        session = await page.context.new_cdp_session(page)
        try:
            tree = await session.send("Page.getFrameTree")
            world = await session.send(
                "Page.createIsolatedWorld", {"frameId": tree["frameTree"]["frame"]["id"], "worldName": "crawlhive"}
            )
            result = await session.send(
                "Runtime.evaluate",
                {
                    "expression": f"({_DOM_SIZE_JS})({int(limit)})",
                    "contextId": world["executionContextId"],
                    "returnByValue": True,
                },
            )
        finally:
            with contextlib.suppress(Exception):
                await session.detach()
        return int(result["result"]["value"])
    except Exception as exc:
        raise PageGone(f"the rendered page's DOM could not be measured ({type(exc).__name__})") from None


def render_meta(timeout_s: float, user_agent: str, max_bytes: int = 0) -> dict[str, Any]:
    """The request meta that makes scrapy-playwright load a request in the browser, in a context
    of its own, until DOMContentLoaded and then until settled (:func:`settle`)."""
    from scrapy_playwright.page import PageMethod

    deadline = time.monotonic() + timeout_s
    return {
        "playwright": True,
        "playwright_context": f"page-{next(_page_numbers)}",
        "playwright_context_kwargs": {"service_workers": "block", "accept_downloads": False, "user_agent": user_agent},
        "playwright_include_page": True,  # so that RenderMiddleware closes its context
        "playwright_page_goto_kwargs": {"wait_until": "domcontentloaded"},
        "playwright_page_methods": [PageMethod(settle, deadline, max_bytes)],
        "playwright_page_init_callback": watch_navigation,
    }


#: Request meta key: the URLs the page's main frame navigated to (the page's URL, then its redirects).
NAVIGATED = "crawlhive_navigated"


async def watch_navigation(page: Any, request: Request) -> None:
    """Before the page loads: put the crawl's cookies in the page's cookie jar for the seed's
    origin, watched by a :class:`CookieGuard`, and record in ``request.meta[NAVIGATED]`` every URL
    the main frame requests (its URL and each redirect), so that a load the guard cut short can be
    told apart from a network error."""
    context = context_of(request)
    if context is not None and context.request.seed_origin:
        pairs = cookie_pairs(context.request)
        if pairs:
            guard = CookieGuard(page, context.request.seed_origin)
            await guard.install(pairs)
    navigated: list[str] = request.meta.setdefault(NAVIGATED, [])

    def record(browser_request: Any) -> None:
        if browser_request.is_navigation_request() and browser_request.frame == page.main_frame:
            navigated.append(browser_request.url)

    page.on("request", record)
