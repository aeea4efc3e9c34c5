"""The Scrapy settings of a rendering crawler: :func:`render_settings`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawlhive.crawler.render.browser import BROWSER_FEATURES, check_render_installed, find_browser
from crawlhive.crawler.render.guard_proxy import bind_proxy_socket
from crawlhive.crawler.sandbox import browser_launch
from crawlhive.utils.config.errors import SettingsError

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

#: The import paths :func:`render_settings` names in Scrapy's settings.
HANDLER = "crawlhive.crawler.render.handler.RenderDownloadHandler"
ABORT_REQUEST_HOOK = "crawlhive.crawler.render.cookie_guard.before_browser_request"
MIDDLEWARE = "crawlhive.crawler.render.middleware.RenderMiddleware"


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
    port = bind_proxy_socket()
    values = dict(values)
    values.update(
        {
            "CRAWLHIVE_RENDER_PROXY_PORT": port,
            # Scrapy merges this into its base handlers: every other scheme is switched off, so a
            # file:, data:, ftp: or s3: request is never fetched, with or without the browser.
            "DOWNLOAD_HANDLERS": {
                "http": HANDLER,
                "https": HANDLER,
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
            "PLAYWRIGHT_ABORT_REQUEST": ABORT_REQUEST_HOOK,
        }
    )
    values["DOWNLOADER_MIDDLEWARES"] = {
        **values["DOWNLOADER_MIDDLEWARES"],
        MIDDLEWARE: 980,
    }
    return values
