"""Rendering crawlers: pages loaded in headless Chromium (docs/contract.md §15).

``crawlhive crawler --spider NAME --render`` (``RENDER=true``) pops only the rendering lane of the
frontier (crawls sent with ``render: true``; ``utils/backends/keys.py`` names the lane's keys) and loads each
page in the system's Chromium through scrapy-playwright. Everything else is the plain crawler's:
leases, throttle, robots.txt (fetched without the browser), admits, items, retries.

How a page is loaded:

* :func:`render_settings` points Scrapy's ``http``/``https`` download handlers at scrapy-playwright,
  with Chromium found on ``PATH`` (or RENDER_BROWSER) and nothing downloaded; ``RENDER_CONCURRENCY``
  pages at once.
* Every page gets a **browser context of its own** (cookies, storage, cache), closed with the page
  by :class:`RenderMiddleware`, so a site's ``Set-Cookie`` never reaches another crawl's pages, as
  with plain pages (§3.7). Service workers and downloads are off.
* The crawl's cookies are in the page's jar for the seed's origin (host-only, bound to its port and
  scheme, ``SameSite=Strict``, ``HttpOnly``) and are withdrawn before the page sends anything for
  a document of another origin, or to another port or scheme of the seed's host
  (:class:`CookieGuard`); popups load nothing. The crawl's ``headers`` are never sent by the
  browser (refused with ``render: true``: Playwright would carry them across redirects).
* The page is loaded until ``DOMContentLoaded``, then until the network is idle or RENDER_TIMEOUT
  (counted from the start) has passed (:func:`settle`); the item's ``body`` is the DOM then, its
  status and headers those of the main document. A DOM over DOWNLOAD_MAXSIZE, measured in the
  page before it is taken (:func:`dom_size`), is a ``response too large`` dead letter, and each
  page's JavaScript heap is bounded (RENDER_JS_HEAP_MB).
* **The network guard** (§10.2): Chromium makes every connection through :class:`GuardProxy`, a
  proxy on loopback inside this process, which resolves the host with the crawler's own guarded
  resolver and connects to the address it checked: the page, its redirects, and every subresource,
  fetch, XHR and WebSocket of its scripts. A blocked connection is refused before it is made. The
  page's own URL is checked again before the browser starts (:class:`RenderMiddleware`), so a
  blocked page is a ``blocked network`` dead letter, as for plain crawlers. WebRTC is limited to
  proxied connections (no UDP around the proxy).
* **The browser is sandboxed** and gets none of the crawler's credentials: see
  ``crawler/sandbox.py`` (RENDER_BROWSER_USER, RENDER_ALLOW_NO_SANDBOX).
* A browser that crashes or is killed is started again by scrapy-playwright at the next page; the
  pages it was loading fail, are retried through the frontier like any failed download, and so are
  never lost.

Why a proxy written here rather than Playwright's request interception: Playwright's ``route``
handler is not called for redirects, and it would check a name that Chromium then resolves again
itself; a proxy that connects to the address it checked closes both gaps. The proxy libraries on
PyPI (proxy.py, mitmproxy) are whole servers with their own processes and TLS interception, which
this needs none of: it only checks an address and copies bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import logging
import shutil
import socket
import time
import weakref
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

from scrapy.exceptions import IgnoreRequest
from twisted.internet.error import DNSLookupError

from crawlhive.crawler.links import allowed_domains, host_allowed
from crawlhive.crawler.netguard import BlockedNetwork, installed_resolver
from crawlhive.crawler.requests import context_of, cookie_pairs, end_for_good
from crawlhive.crawler.sandbox import browser_launch
from crawlhive.crawler.sitemaps import SITEMAP
from crawlhive.utils.config.errors import SettingsError
from crawlhive.utils.rules.domains import origin_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

#: Browsers looked for on PATH when RENDER_BROWSER is empty, best first: Debian's
#: ``chromium-headless-shell`` (Chromium's headless-only build, what Playwright itself runs headless:
#: 4x less CPU per page than the full browser in its headless mode, measured by bench/render.py),
#: then Debian's ``chromium`` and other names of the full browser.
BROWSER_NAMES = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: Chromium features rendering crawlers turn on: Playwright's own (``chromiumSwitches`` of
#: Playwright 1.65) and origin-bound cookies.
BROWSER_FEATURES = (
    "CDPScreenshotNewSurface",
    "SkipListAccountsWithoutGaiaCookies",
    "EnablePortBoundCookies",
    "EnableSchemeBoundCookies",
)
#: Largest request head the proxy reads from the browser.
MAX_HEAD = 65536
#: Seconds the proxy waits for the browser's request head, and for a connection to a site.
PROXY_TIMEOUT_S = 30.0

_page_numbers = itertools.count(1)
#: Proxy sockets bound before Scrapy starts, by port (Scrapy deep-copies its settings, which a
#: socket cannot be, so the settings carry the port: ``CRAWLHIVE_RENDER_PROXY_PORT``).
_PROXY_SOCKETS: dict[int, socket.socket] = {}
#: The download handler of each crawler (one for http and https).
_HANDLERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def find_browser(settings: Settings) -> str:
    """The Chromium executable rendering crawlers start.

    Raises:
        SettingsError: RENDER_BROWSER does not exist, or no Chromium is on PATH (the message says
            how to install one; nothing is downloaded at run time).
    """
    configured = settings.RENDER_BROWSER.strip()
    if configured:
        found = shutil.which(configured)
        if found is None:
            raise SettingsError(f"RENDER_BROWSER: {configured!r} is not an executable browser")
        return found
    for name in BROWSER_NAMES:
        found = shutil.which(name)
        if found is not None:
            return found
    raise SettingsError(
        "rendering needs Chromium and none was found on PATH (looked for "
        f"{', '.join(BROWSER_NAMES)}): install Debian's `chromium-headless-shell` package "
        "(apt-get install chromium-headless-shell) or set RENDER_BROWSER to the browser's path"
    )


def check_render_installed() -> None:
    """Raises SettingsError when scrapy-playwright (the ``render`` extra) is not installed."""
    if importlib.util.find_spec("scrapy_playwright") is None or importlib.util.find_spec("playwright") is None:
        raise SettingsError(
            "--render needs scrapy-playwright and Playwright, which this installation lacks: run "
            "`make render` in crawlhive's folder (it adds them to .venv from requirements-render.lock, "
            "and Debian's chromium-headless-shell); another installation: pip install 'crawlhive[render]'"
        )


def listening_socket() -> socket.socket:
    """A TCP socket listening on a free loopback port (the proxy serves it once the loop runs;
    the browser's connections wait in its backlog until then)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock


def render_settings(values: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """*values* (Scrapy settings of a crawler) changed for a rendering crawler.

    Raises:
        SettingsError: scrapy-playwright or the browser is missing, or a RENDER_* value is wrong.
    """
    check_render_installed()
    browser = find_browser(settings)
    concurrency = settings.RENDER_CONCURRENCY
    if concurrency < 1:
        raise SettingsError(f"RENDER_CONCURRENCY: must be at least 1, got {concurrency}")
    timeout_s = settings.RENDER_TIMEOUT
    if timeout_s <= 0:
        raise SettingsError(f"RENDER_TIMEOUT: must be positive seconds, got {timeout_s}")
    heap_mb = settings.RENDER_JS_HEAP_MB
    if heap_mb < 16:
        raise SettingsError(f"RENDER_JS_HEAP_MB: must be at least 16 (MiB), got {heap_mb}")
    if settings.RENDER_PROXY_IDLE_TIMEOUT <= 0:
        raise SettingsError(
            f"RENDER_PROXY_IDLE_TIMEOUT: must be positive seconds, got {settings.RENDER_PROXY_IDLE_TIMEOUT}"
        )
    if settings.RENDER_PROXY_MAX_CONNECTIONS < 1:
        raise SettingsError(
            f"RENDER_PROXY_MAX_CONNECTIONS: must be at least 1, got {settings.RENDER_PROXY_MAX_CONNECTIONS}"
        )
    launch = browser_launch(browser, settings)  # SettingsError: no sandbox and no opt-out
    proxy = listening_socket()
    port = int(proxy.getsockname()[1])
    _PROXY_SOCKETS[port] = proxy
    handler = "crawlhive.crawler.render.RenderDownloadHandler"
    values = dict(values)
    values.update(
        {
            "CRAWLHIVE_RENDER_PROXY_PORT": port,
            # Scrapy merges this into its base handlers: every other scheme is switched off, so a
            # file:, data:, ftp: or s3: request is never fetched, with or without the browser.
            "DOWNLOAD_HANDLERS": {
                "http": handler,
                "https": handler,
                **dict.fromkeys(("data", "file", "ftp", "s3"), None),
            },
            "CONCURRENT_REQUESTS": concurrency,
            "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency,
            # A download is the page load plus settling; Scrapy's own timeout must not cut it short.
            "DOWNLOAD_TIMEOUT": timeout_s + settings.DOWNLOAD_TIMEOUT,
            "PLAYWRIGHT_BROWSER_TYPE": "chromium",
            "PLAYWRIGHT_LAUNCH_OPTIONS": {
                "executable_path": launch.executable,
                "chromium_sandbox": launch.sandbox,
                "env": launch.env,  # none of the crawler's credentials (crawler/sandbox.py)
                "headless": True,
                "proxy": {"server": f"http://127.0.0.1:{port}"},
                "args": [
                    # loopback too goes through the proxy (Chromium bypasses proxies for it by default)
                    "--proxy-bypass-list=<-loopback>",
                    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
                    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
                    "--disable-dev-shm-usage",
                    "--disable-background-networking",
                    "--disable-crash-reporter",  # no crashpad handler left behind by a killed browser
                    "--disable-breakpad",
                    f"--js-flags=--max-old-space-size={heap_mb}",  # each page's JavaScript heap
                    # Cookies bound to their origin's port and scheme (CookieGuard.install); the
                    # last --enable-features counts, so Playwright's own are repeated here.
                    "--enable-features=" + ",".join(BROWSER_FEATURES),
                ],
            },
            "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT": 1,
            "PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT": timeout_s * 1000,
            "PLAYWRIGHT_RESTART_DISCONNECTED_BROWSER": True,
            # The browser's own headers on every request: headers given to Playwright for the
            # page's request would be carried to every redirect, to any site. The user agent is
            # the context's (render_meta), the crawl's cookies are in the page's cookie jar.
            "PLAYWRIGHT_PROCESS_REQUEST_HEADERS": None,
            # Awaited before every request of a page: the crawl's cookies stay with the seed's
            # origin (CookieGuard).
            "PLAYWRIGHT_ABORT_REQUEST": "crawlhive.crawler.render.before_browser_request",
        }
    )
    values["DOWNLOADER_MIDDLEWARES"] = {
        **values["DOWNLOADER_MIDDLEWARES"],
        "crawlhive.crawler.render.RenderMiddleware": 980,
    }
    return values


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
        (:data:`BROWSER_FEATURES`) the browser then sends them to that origin only, a redirect to
        another port of the seed's host included (no route is asked about redirects). Host-only,
        ``HttpOnly``, ``SameSite=Strict``, ``Secure`` on https.
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
        sock = _PROXY_SOCKETS.pop(crawler.settings.getint("CRAWLHIVE_RENDER_PROXY_PORT"))
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


class GuardProxy:
    """A forward HTTP proxy on loopback that connects only to addresses the network guard allows.

    Handles ``CONNECT host:port`` (HTTPS, WebSockets: the bytes are copied, TLS stays end to end)
    and absolute-form plain HTTP requests. *lookup* resolves a host and raises
    :class:`BlockedNetwork` for a refused one; the connection is made to the address it returned,
    never to a second resolution.

    A plain request is parsed whole (head, then exactly the ``Content-Length`` bytes of its body) and
    is the only one its connection carries: it is sent on with ``Connection: close``, the site's
    answer goes back with ``Connection: close``, and the connection is closed, so nothing the
    browser sends after it on a kept-alive connection is ever sent on unparsed. A connection with
    nothing to read or copy for *idle_timeout_s* is closed, and one past *max_connections* open at
    once is closed as soon as it is accepted (any local user can connect to the port).
    """

    def __init__(
        self,
        sock: socket.socket,
        lookup: Callable[[str], Awaitable[str]],
        idle_timeout_s: float = PROXY_TIMEOUT_S,
        max_connections: int = 256,
    ) -> None:
        self.sock = sock
        self.lookup = lookup
        self.idle_timeout_s = idle_timeout_s
        self.max_connections = max_connections
        self.server: asyncio.Server | None = None
        self.refused = 0
        """Connections refused by the guard so far (tests and logs)."""
        self.connections = 0
        """Connections made to sites so far."""
        self.over_cap = 0
        """Browser connections closed unanswered because max_connections were open."""
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    async def start(self) -> None:
        if self.server is None:
            self.server = await asyncio.start_server(self._serve, sock=self.sock, limit=MAX_HEAD)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            for task in list(self._tasks):
                task.cancel()
            self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._tasks) >= self.max_connections:
            self.over_cap += 1
            if self.over_cap == 1 or self.over_cap % 1000 == 0:
                logger.warning(
                    "render proxy: %d connections open, closing new ones (RENDER_PROXY_MAX_CONNECTIONS; "
                    "%d closed so far)",
                    self.max_connections,
                    self.over_cap,
                )
            writer.close()
            return
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._proxy(reader, writer)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # a browser connection gone, idle or malformed: nothing to answer
        except asyncio.CancelledError:
            pass  # the proxy is closing
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), min(self.idle_timeout_s, PROXY_TIMEOUT_S))
        line, _, header_block = head.partition(b"\r\n")
        method, target, version = line.split(b" ", 2)
        tunnel = method.upper() == b"CONNECT"
        length = 0
        if tunnel:
            parts = urlsplit("//" + target.decode("latin-1"))
            host, port = parts.hostname or "", parts.port or 443
            path = b""
        else:
            parts = urlsplit(target.decode("latin-1"))
            framing = _body_length(header_block)
            if parts.scheme != "http" or not parts.hostname or framing is None:
                writer.write(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
                return
            length = framing
            host, port = parts.hostname, parts.port or 80
            path = (parts.path or "/").encode("latin-1") + (
                b"?" + parts.query.encode("latin-1") if parts.query else b""
            )
        try:
            address = await self.lookup(host)
        except BlockedNetwork as exc:
            self.refused += 1
            logger.debug("render proxy refused %s:%s: %s", host, port, exc)
            if tunnel:  # the browser fails the tunnel (ERR_TUNNEL_CONNECTION_FAILED)
                writer.write(b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
            # A plain request gets no answer at all: an answer would be taken as the site's, and a
            # page redirected here would become an item of the proxy's 403.
            return
        except DNSLookupError:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
            return
        up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(address, port), PROXY_TIMEOUT_S)
        self.connections += 1
        idle = _Idle(self.idle_timeout_s)
        try:
            if tunnel:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await asyncio.gather(_copy(reader, up_writer, idle), _copy(up_reader, writer, idle))
                return
            up_writer.write(method + b" " + path + b" " + version + b"\r\n" + _forwarded_headers(header_block))
            while length > 0:  # the body, and not a byte more
                chunk = await asyncio.wait_for(reader.read(min(length, 65536)), idle.timeout_s)
                if not chunk:
                    return
                up_writer.write(chunk)
                await up_writer.drain()
                length -= len(chunk)
            answer = await asyncio.wait_for(up_reader.readuntil(b"\r\n\r\n"), idle.timeout_s)
            status, _, answer_headers = answer.partition(b"\r\n")
            writer.write(status + b"\r\n" + _forwarded_headers(answer_headers))
            await _copy(up_reader, writer, idle)
        finally:
            up_writer.close()


def _body_length(block: bytes) -> int | None:
    """The length of a plain request's body by its header *block*: its one ``Content-Length``, 0
    without one; None for a ``Transfer-Encoding`` (Chromium sends none on HTTP/1.1) or a malformed
    or repeated length."""
    lengths = []
    for header in block.split(b"\r\n"):
        name, _, value = header.partition(b":")
        name = name.strip().lower()
        if name == b"transfer-encoding":
            return None
        if name == b"content-length":
            lengths.append(value.strip())
    if not lengths:
        return 0
    if len(set(lengths)) != 1 or not lengths[0].isdigit() or len(lengths[0]) > 15:
        return None
    return int(lengths[0])


def _forwarded_headers(block: bytes) -> bytes:
    """A request's or an answer's header block as sent on: hop-by-hop headers dropped, ``Connection:
    close`` added (one request per proxied connection)."""
    hop = {b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization"}
    lines = [h for h in block.split(b"\r\n") if h and h.split(b":", 1)[0].strip().lower() not in hop]
    return b"\r\n".join([*lines, b"Connection: close", b"", b""])


class _Idle:
    """When a proxied connection last moved a byte, either way: it is idle only when neither
    direction has (a download does not time out the quiet upload side of its tunnel)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.last = time.monotonic()

    async def read(self, source: asyncio.StreamReader) -> bytes:
        """The next bytes of *source*; TimeoutError once nothing has moved either way for the timeout."""
        while True:
            wait = self.last + self.timeout_s - time.monotonic()
            if wait <= 0:
                raise TimeoutError("idle")
            try:
                chunk = await asyncio.wait_for(source.read(65536), wait)
            except TimeoutError:
                continue  # the other direction may have moved meanwhile
            self.last = time.monotonic()
            return chunk


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter, idle: _Idle) -> None:
    """Copy *source* to *sink* until end of stream, then half-close *sink*.

    Raises:
        TimeoutError: nothing moved on the connection for the idle timeout.
    """
    try:
        while chunk := await idle.read(source):
            sink.write(chunk)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (OSError, RuntimeError):
        sink.close()
