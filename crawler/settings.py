"""crawlhive settings -> Scrapy settings, in this one place.

The crawlhive :class:`~crawlhive.utils.config.settings.Settings` object itself travels in the Scrapy setting
``CRAWLHIVE_SETTINGS`` (components read typed values from it through :class:`CrawlRuntime`), the
spider type in ``CRAWLHIVE_SPIDER``. ``SCRAPY_SETTINGS`` is applied last, and can only add to
crawlhive's own components (:func:`merge_user_settings`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawlhive.crawler.extensions import EXTENSIONS as MAINTENANCE_EXTENSIONS
from crawlhive.utils.backends import tracing
from crawlhive.utils.backends.keys import SpiderLists
from crawlhive.utils.config.errors import SettingsError
from crawlhive.utils.rules.patterns import PATTERN_SETTINGS

if TYPE_CHECKING:
    from scrapy import Spider

    from crawlhive.utils.config.settings import Settings

_PKG = "crawlhive.crawler"

#: Component dicts a user's settings are merged into, never replace: Scrapy keeps its own
#: components in ``*_BASE`` for the same reason, and ours (lease outcomes, the frontier spider
#: middleware, the Kafka pipeline) are what makes a crawler lose no work.
COMPONENT_DICTS = ("DOWNLOADER_MIDDLEWARES", "SPIDER_MIDDLEWARES", "ITEM_PIPELINES", "EXTENSIONS")
#: Settings a user may not change: the frontier scheduler, the item processor that ends with
#: crawlhive's output, the reactor the scheduler awaits Redis on, and the resolver that is the
#: network guard.
FIXED = (
    "SCHEDULER",
    "ITEM_PROCESSOR",
    "TWISTED_REACTOR",
    "TWISTED_DNS_RESOLVER",
    "DNS_RESOLVER",
    "CRAWLHIVE_SETTINGS",
    "CRAWLHIVE_SPIDER",
    "DOWNLOAD_HANDLERS_BASE",
)
#: The only URL schemes a crawler ever fetches (docs/contract.md §10.2). Scrapy's handlers for the
#: others (``ftp``, ``file``, ``s3``, ``data``) are disabled: a robots.txt ``Sitemap:`` line or a
#: spider's request naming ``ftp://10.0.0.1/`` or ``file:///etc/passwd`` would otherwise connect
#: past the network guard (which sees only HTTP connections) or read the crawler's own files.
FETCHED_SCHEMES = ("http", "https")
#: Plain requests through Scrapy's HTTP/1.1 handler, impersonated ones through curl_cffi (§25).
_HTTP_HANDLER = f"{_PKG}.impersonate.FetchDownloadHandler"
#: Scrapy's base handlers for schemes other than http(s), each disabled in DOWNLOAD_HANDLERS.
_OTHER_HANDLERS = ("data", "file", "ftp", "s3")


#: The built-in spider types (crawler/spiders/), whose callbacks yield one item a page.
ONE_ITEM_SPIDERS = frozenset({"link", "wandering"})


def scrapy_settings(settings: Settings, spider: str) -> dict[str, Any]:
    """The Scrapy settings of a crawler process for spider type *spider*."""
    concurrency = settings.CONCURRENT_REQUESTS
    values: dict[str, Any] = {
        "BOT_NAME": "crawlhive",
        "CRAWLHIVE_SETTINGS": settings,
        "CRAWLHIVE_SPIDER": spider,
        "SCHEDULER": f"{_PKG}.scheduler.FrontierScheduler",
        # Scrapy's default since 2.13, pinned: the scheduler and the spider middleware await Redis
        # on asyncio (crawler/batching.py), which no other reactor runs.
        "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
        # Every connection's address passes the network guard (docs/contract.md §10.2).
        "TWISTED_DNS_RESOLVER": f"{_PKG}.netguard.GuardedResolver",
        "CONCURRENT_REQUESTS": concurrency,
        # The cluster-wide throttle (Redis) paces domains; no per-process per-domain limit or delay.
        "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency,
        # Items of one response processed in parallel. On the asyncio reactor Scrapy starts this
        # many worker tasks for *every* response (scrapy.utils.asyncio._parallel_asyncio), whatever
        # the number of items: at Scrapy's default of 100 that was ~10 % of a crawler's CPU for our
        # one item per page. 16 still sends a many-item page's items to Kafka concurrently; the
        # built-in spiders yield one item a page, so one worker does (pages still overlap).
        "CONCURRENT_ITEMS": 1 if spider in ONE_ITEM_SPIDERS else 16,
        "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": False,
        "DOWNLOAD_TIMEOUT": settings.DOWNLOAD_TIMEOUT,
        "DOWNLOAD_MAXSIZE": settings.DOWNLOAD_MAXSIZE,
        "DOWNLOAD_WARNSIZE": 0,  # a response is either fine or a dead letter (limits.py)
        # the browser profile of impersonated fetches (crawler/impersonate.py, §25)
        "FETCH_PROFILE": settings.FETCH_PROFILE,
        # http(s) only, twice over: the base holds no other scheme, and the others are disabled.
        "DOWNLOAD_HANDLERS_BASE": {scheme: _HTTP_HANDLER for scheme in FETCHED_SCHEMES},
        "DOWNLOAD_HANDLERS": dict.fromkeys(_OTHER_HANDLERS),
        "RETRY_ENABLED": True,
        "RETRY_TIMES": settings.RETRY_TIMES,
        "RETRY_HTTP_CODES": settings.RETRY_HTTP_CODES,
        "RETRY_PRIORITY_ADJUST": -10,
        "REDIRECT_MAX_TIMES": 20,
        "USER_AGENT": settings.user_agent,
        "ROBOTSTXT_OBEY": settings.ROBOTSTXT_OBEY,
        # Set-Cookie is not carried to later requests (docs/contract.md §3.7); crawl cookies are a header.
        "COOKIES_ENABLED": False,
        # Every final response becomes an item, 4xx and 5xx included (docs/contract.md §3.10).
        "HTTPERROR_ALLOW_ALL": True,
        "KAFKA_BASE_64_ENCODE": settings.KAFKA_BASE_64_ENCODE,
        "ITEM_REDACT_HEADERS": settings.ITEM_REDACT_HEADERS,
        "ITEM_REDACT_HEADER_WORDS": settings.ITEM_REDACT_HEADER_WORDS,
        "LINK_MAX_URL_LENGTH": settings.LINK_MAX_URL_LENGTH,
        "LINK_MAX_SEGMENT_REPEATS": settings.LINK_MAX_SEGMENT_REPEATS,
        "LINK_MAX_PER_PAGE": settings.LINK_MAX_PER_PAGE,
        # the bounds allow_regex / deny_regex are compiled within (utils/rules/patterns.py)
        **{name: settings.getint(name) for name in PATTERN_SETTINGS},
        # A pipeline's DropItem is a decision, not a problem: INFO, not Scrapy's WARNING (§17.3).
        "DEFAULT_DROPITEM_LOG_LEVEL": "INFO",
        # Item log lines name the item instead of printing it (a dropped page item is megabytes).
        "LOG_FORMATTER": f"{_PKG}.logformatter.ItemLogFormatter",
        "TELNETCONSOLE_ENABLED": False,
        "REMOTE_CONTROL_ENABLED": False,
        "LOG_LEVEL": settings.LOG_LEVEL,
        "LOG_INSTALL_ROOT_HANDLER": False,  # main() configured logging once
        "DOWNLOADER_MIDDLEWARES": {
            f"{_PKG}.middlewares.outcomes.LeaseOutcomeMiddleware": 50,
            f"{_PKG}.middlewares.shaping.RequestShapingMiddleware": 400,
            f"{_PKG}.recrawl.RecrawlMiddleware": 420,  # validators and the changed decision (§19)
            f"{_PKG}.middlewares.pacing.SiteGateMiddleware": 450,
            f"{_PKG}.fetch.FetchChoiceMiddleware": 460,  # plain or impersonated (§25)
            # proxies, bans and the adaptive throttle (§21): the choice before Scrapy's
            # HttpProxyMiddleware (750), the response before the retry (550) and the meta refresh
            f"{_PKG}.proxy.ProxyRouteNoteMiddleware": 90,
            f"{_PKG}.proxy.ProxyMiddleware": 700,
            f"{_PKG}.proxy.ProxyResponseMiddleware": 589,
            # Scrapy's decompression, done by ours so that a compression bomb is a dead letter.
            "scrapy.downloadermiddlewares.httpcompression.HttpCompressionMiddleware": None,
            f"{_PKG}.limits.ResponseLimitMiddleware": 590,
            f"{_PKG}.middlewares.pacing.RetryAfterMiddleware": 600,
            # a wall: the next rung, no retry spent, before a proxy ban is counted for it (§25)
            f"{_PKG}.fetch.FetchLadderMiddleware": 589.5,
            # a site that remembers render: to the rendering lane once the proxy is known (§25)
            f"{_PKG}.fetch.FetchRenderMiddleware": 720,
            # Scrapy's redirect middlewares, subclassed so that giving up on a page ends its lease
            "scrapy.downloadermiddlewares.redirect.RedirectMiddleware": None,
            "scrapy.downloadermiddlewares.redirect.MetaRefreshMiddleware": None,
            f"{_PKG}.middlewares.redirects.FrontierRedirectMiddleware": 600,
            f"{_PKG}.middlewares.redirects.FrontierMetaRefreshMiddleware": 580,
            f"{_PKG}.middlewares.redirects.LocationHostGuardMiddleware": 610,
            f"{_PKG}.middlewares.redirects.PageHostGuardMiddleware": 585,
            f"{_PKG}.middlewares.outcomes.ResponseStatsMiddleware": 950,
            f"{_PKG}.middlewares.pacing.CrawlDelayMiddleware": 960,
            f"{_PKG}.netguard.NetworkGuardMiddleware": 990,
            # the fetch spans (§26.3), only while tracing is on: nothing per page while off
            **({f"{_PKG}.trace.TraceMiddleware": 995} if tracing.ON else {}),
        },
        "SPIDER_MIDDLEWARES": {
            # Scrapy's depth, URL-length and referer middlewares (900, 800, 700) act only on the
            # requests a callback yields, and FrontierSpiderMiddleware (950, before them in the
            # output's path) turns every one into a frontier child first, where maxdepth and
            # LINK_MAX_URL_LENGTH apply; the redirect middlewares keep a referer middleware of
            # their own for a hop's Referer (middlewares/redirects.py). Enabled, they only wrapped
            # each page's item in three more asynchronous generators (issue 50: bench/README.md,
            # "Speed that holds").
            "scrapy.spidermiddlewares.depth.DepthMiddleware": None,
            "scrapy.spidermiddlewares.urllength.UrlLengthMiddleware": None,
            "scrapy.spidermiddlewares.referer.RefererMiddleware": None,
            f"{_PKG}.middlewares.spider.FrontierSpiderMiddleware": 950,
            f"{_PKG}.recrawl.RecrawlItemMiddleware": 940,  # visit, changed, previous_fetch (§19.4)
            f"{_PKG}.recrawl.RecrawlSitemapMiddleware": 960,  # sitemap <lastmod> (§19.7)
        },
        # The user's ITEM_PIPELINES, then crawlhive's output, whatever their orders (pipelines.py).
        "ITEM_PROCESSOR": f"{_PKG}.pipelines.FrontierItemProcessor",
        "ITEM_PIPELINES": {},
        # The maintenance loops (heartbeat, stats flush, progress, Redis-only seeds): switchable.
        "EXTENSIONS": dict(MAINTENANCE_EXTENSIONS),
    }
    return merge_user_settings(values, settings.SCRAPY_SETTINGS, "SCRAPY_SETTINGS")


def _path(component: Any) -> str:
    """A component's import path, whether given as a path or as the class itself."""
    if isinstance(component, str):
        return component
    return f"{getattr(component, '__module__', '')}.{getattr(component, '__qualname__', repr(component))}"


def merge_user_settings(ours: dict[str, Any], user: dict[str, Any], source: str) -> dict[str, Any]:
    """*ours* with *user*'s Scrapy settings applied over them, adding to component dicts.

    A user's ``DOWNLOADER_MIDDLEWARES`` (and the other COMPONENT_DICTS) adds entries to crawlhive's,
    or disables Scrapy's own; it cannot remove or reorder crawlhive's components (but for the
    maintenance extensions, :mod:`crawlhive.crawler.extensions`, which it may switch off), and FIXED
    settings cannot change. ``DOWNLOAD_HANDLERS`` may name handlers for ``http`` and ``https``
    only. Every other setting is replaced.

    Raises:
        SettingsError: *user* removes (``None``) or reorders one of crawlhive's components, changes
            a FIXED setting, or enables a download handler for another scheme; the message names
            *source*, the setting and the component.
    """
    merged = dict(ours)
    for name, value in user.items():
        if name in FIXED and value != ours.get(name):
            raise SettingsError(f"{source}: {name} cannot be changed (crawlhive needs {ours.get(name)!r})")
        if name == "DOWNLOAD_HANDLERS":
            merged[name] = _download_handlers(ours.get(name) or {}, value, source)
            continue
        if name not in COMPONENT_DICTS:
            merged[name] = value
            continue
        if not isinstance(value, dict):
            raise SettingsError(f"{source}: {name} must be a mapping of component paths to orders, got {value!r}")
        components = dict(ours.get(name) or {})
        for component, order in value.items():
            path = _path(component)
            if path in components and order != components[path] and path not in MAINTENANCE_EXTENSIONS:
                raise SettingsError(
                    f"{source}: {name} sets crawlhive's own component {path} to {order!r}; it cannot be "
                    f"removed or reordered (it is what keeps leases and results from being lost); leave it out"
                )
            components[path] = order
        merged[name] = components
    return merged


def _download_handlers(ours: dict[str, Any], user: Any, source: str) -> dict[str, Any]:
    """*ours* with a user's ``DOWNLOAD_HANDLERS`` added: another handler for http(s) (an
    impersonating client, say) is fine; one for any other scheme is refused (see FETCHED_SCHEMES).

    Raises:
        SettingsError: *user* is not a mapping, or enables a handler for another scheme.
    """
    if not isinstance(user, dict):
        raise SettingsError(f"{source}: DOWNLOAD_HANDLERS must be a mapping of URL schemes to handler paths")
    merged = dict(ours)
    for scheme, handler in user.items():
        if handler is not None and str(scheme).lower() not in FETCHED_SCHEMES:
            raise SettingsError(
                f"{source}: DOWNLOAD_HANDLERS enables a handler for {str(scheme)[:20]!r}: crawlers fetch http and "
                "https only (docs/contract.md §10.2); leave it out"
            )
        merged[str(scheme)] = handler
    return merged


def apply_custom_settings(values: dict[str, Any], spider_cls: type[Spider]) -> dict[str, Any]:
    """*values* with the ``custom_settings`` of *spider_cls* merged in as :func:`merge_user_settings`
    merges SCRAPY_SETTINGS (docs/contract.md §11).

    Scrapy would apply them itself, at a higher priority, *replacing* component dicts such as
    ``DOWNLOADER_MIDDLEWARES`` (and with them crawlhive's components); so they are merged here and
    the class's ``custom_settings`` is set to the merged values of the names it sets.

    Raises:
        SettingsError: as :func:`merge_user_settings`, naming ``<Class>.custom_settings``.
    """
    custom = dict(getattr(spider_cls, "custom_settings", None) or {})
    if not custom:
        return values
    merged = merge_user_settings(values, custom, f"{spider_cls.__name__}.custom_settings")
    spider_cls.custom_settings = {name: merged[name] for name in custom}
    return merged


def spider_modules(settings: Settings) -> list[str]:
    """Where ``--spider NAME`` looks for user spiders: SPIDER_MODULES, plus the ``SPIDER_MODULES``
    of SCRAPY_SETTINGS (Scrapy's own setting, for users who keep it there)."""
    modules = [str(m) for m in settings.SPIDER_MODULES]
    extra = settings.SCRAPY_SETTINGS.get("SPIDER_MODULES") or []
    for module in [extra] if isinstance(extra, str) else list(extra):
        if str(module) not in modules:
            modules.append(str(module))
    return modules


def spider_lists(settings: Settings) -> SpiderLists:
    """Redis-only mode's lists, from REDIS_START_URLS_KEY and REDIS_ITEMS_KEY (docs/contract.md §12).

    Raises:
        KeyFormatError: a format with a wrong placeholder (names the setting).
    """
    return SpiderLists(settings.REDIS_START_URLS_KEY, settings.REDIS_ITEMS_KEY)
