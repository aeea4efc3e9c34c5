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

Why a proxy of our own rather than Playwright's request interception: see
:mod:`~crawlhive.crawler.render.guard_proxy`.

Where each part lives (one module per role):

* :mod:`~crawlhive.crawler.render.browser`: finding Chromium, checking scrapy-playwright is installed;
* :mod:`~crawlhive.crawler.render.settings`: :func:`render_settings`, the Scrapy settings of a
  rendering crawler (the handlers, the browser's launch options, the middleware);
* :mod:`~crawlhive.crawler.render.page`: the request meta that loads a page, settling and DOM checks;
* :mod:`~crawlhive.crawler.render.cookie_guard`: :class:`CookieGuard`, the crawl's cookies kept to
  the seed's origin;
* :mod:`~crawlhive.crawler.render.handler`: :class:`RenderDownloadHandler`, a deadline on each load;
* :mod:`~crawlhive.crawler.render.middleware`: :class:`RenderMiddleware`, the downloader middleware;
* :mod:`~crawlhive.crawler.render.guard_proxy`: :class:`GuardProxy`, the TCP proxy every browser
  connection goes through.

Nothing here imports Playwright or the reactor at import time: ``crawlhive up`` imports
:mod:`~crawlhive.crawler.render.browser` to check an installation.
"""
