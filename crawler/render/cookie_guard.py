"""A crawl's cookies in a rendering crawler's page, kept to the seed's origin (docs/contract.md
§10.6, §15): :class:`CookieGuard`, run by scrapy-playwright's PLAYWRIGHT_ABORT_REQUEST hook
(:func:`before_browser_request`)."""

from __future__ import annotations

import contextlib
import weakref
from typing import Any
from urllib.parse import urlsplit

from crawlhive.utils.rules.domains import origin_of

#: The :class:`CookieGuard` of each page whose crawl has cookies.
_GUARDS: weakref.WeakKeyDictionary[Any, CookieGuard] = weakref.WeakKeyDictionary()
#: Frame URLs of documents that take the origin of the document that made them.
_INHERITED = ("", "about:blank", "about:srcdoc")


class CookieGuard:
    """Keeps a crawl's cookies to the seed's origin (scheme, host and port) and to requests made by
    documents of that origin (§10.6).

    A browser's cookie jar cannot do that alone: bound to the seed's port and scheme
    (:meth:`install`) a cookie goes to no other origin, but ``SameSite=Strict`` (set too) holds back
    only requests started by *another site*, while a page on another port of the seed's host is the
    same site (a form it submits to the seed would carry the cookie). So the cookies are
    *withdrawn* (the page's jar emptied) as soon as the page holds, or is about to load, a
    document of another origin: a frame, a navigation (a redirect too) or a popup. Every request of
    the page passes :meth:`before_request` (scrapy-playwright's PLAYWRIGHT_ABORT_REQUEST hook,
    awaited before the request leaves the browser) and the jar is emptied there before anything a
    document of another origin asks for is sent; the popups' own requests are refused. The seed's
    page and its subresources keep the cookies until then.
    Cookies are also ``HttpOnly`` (no script of the page reads them) and ``Secure`` on https.
    """

    def __init__(self, page: Any, seed_origin: str) -> None:
        self.page = page
        self.seed_origin = seed_origin
        self.seed_host = urlsplit(seed_origin).hostname or ""
        self.withdrawn = False
        self.emptied = False

    async def install(self, pairs: dict[str, str]) -> None:
        """Put *pairs* in the page's jar, bound to the seed's origin, and watch the page.

        Set through the DevTools protocol, which (unlike Playwright's ``add_cookies``) takes the
        cookie's source port and scheme: with Chromium's port- and scheme-bound cookies
        (:data:`~crawlhive.crawler.render.browser.BROWSER_FEATURES`) the browser then sends them to
        that origin only, a redirect to another port of the seed's host included (no route is asked
        about redirects). Host-only, ``HttpOnly``, ``SameSite=Strict``, ``Secure`` on https.
        """
        parts = urlsplit(self.seed_origin)
        secure = parts.scheme == "https"
        jar = [
            {
                "name": name,
                "value": value,
                "url": self.seed_origin + "/",
                "secure": secure,
                "httpOnly": True,
                "sameSite": "Strict",
                "sourceScheme": "Secure" if secure else "NonSecure",
                "sourcePort": parts.port,
            }
            for name, value in pairs.items()
        ]
        _GUARDS[self.page] = self
        self.page.on("framenavigated", self._frame_navigated)
        self.page.on("request", self._request_seen)
        await self.page.context.route("**/*", self._other_page_request)  # popups: no route of their own
        session = await self.page.context.new_cdp_session(self.page)
        try:
            await session.send("Network.setCookies", {"cookies": jar})
        finally:
            await session.detach()

    def foreign(self, url: str) -> bool:
        """Whether *url* is of a document of another origin than the seed's."""
        return url not in _INHERITED and origin_of(url) != self.seed_origin

    def _frame_navigated(self, frame: Any) -> None:
        if self.foreign(frame.url):
            self.withdrawn = True

    def _request_seen(self, browser_request: Any) -> None:
        # Redirects show here only (no route is asked about them).
        if browser_request.is_navigation_request() and self.foreign(browser_request.url):
            self.withdrawn = True

    async def before_request(self, browser_request: Any) -> None:
        """Withdraw the cookies before *browser_request* is sent if it loads or comes from a
        document of another origin, or goes to another origin of the seed's host; once withdrawn,
        empty the jar again before every request to the seed's host (the site may have set cookies
        since)."""
        if not self.withdrawn:
            try:
                frame_url = browser_request.frame.url
            except Exception:  # a worker's request: no frame to tell its origin by
                frame_url = "worker:"
            url = browser_request.url
            if (
                self.foreign(frame_url)
                or (browser_request.is_navigation_request() and self.foreign(url))
                # the seed's host on another port or scheme: the jar would send the cookies there
                or (urlsplit(url).hostname == self.seed_host and origin_of(url) != self.seed_origin)
            ):
                self.withdrawn = True
        if self.withdrawn and (not self.emptied or urlsplit(browser_request.url).hostname == self.seed_host):
            self.emptied = True
            with contextlib.suppress(Exception):  # the page is closing
                await self.page.context.clear_cookies()

    async def _other_page_request(self, route: Any, browser_request: Any) -> None:
        """A request of a popup the page opened: refused, the cookies withdrawn first."""
        self.withdrawn = True
        await self.before_request(browser_request)
        with contextlib.suppress(Exception):
            await route.abort()


async def before_browser_request(browser_request: Any) -> bool:
    """scrapy-playwright's PLAYWRIGHT_ABORT_REQUEST hook, awaited before each request of a page
    leaves the browser: runs the page's :class:`CookieGuard`; never aborts (the network guard is
    the proxy's)."""
    try:
        page = browser_request.frame.page
    except Exception:  # a worker's request
        page = None
    guard = _GUARDS.get(page) if page is not None else None
    if guard is None:
        return False
    await guard.before_request(browser_request)
    return False
