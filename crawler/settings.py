"""crawlhive settings -> Scrapy settings, in this one place.

The crawlhive :class:`~crawlhive.utils.settings.Settings` object itself travels in the Scrapy setting
``CRAWLHIVE_SETTINGS`` (components read typed values from it through :class:`CrawlRuntime`), the
spider type in ``CRAWLHIVE_SPIDER``. ``SCRAPY_SETTINGS`` is applied last.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crawlhive.utils.settings import Settings

_PKG = "crawlhive.crawler"


def scrapy_settings(settings: Settings, spider: str) -> dict[str, Any]:
    """The Scrapy settings of a crawler process for spider type *spider*."""
    concurrency = settings.getint("CONCURRENT_REQUESTS")
    values: dict[str, Any] = {
        "BOT_NAME": "crawlhive",
        "CRAWLHIVE_SETTINGS": settings,
        "CRAWLHIVE_SPIDER": spider,
        "SCHEDULER": f"{_PKG}.scheduler.FrontierScheduler",
        # Scrapy's default since 2.13, pinned: the scheduler and the spider middleware await Redis
        # on asyncio (crawler/batching.py), which no other reactor runs.
        "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
        "CONCURRENT_REQUESTS": concurrency,
        # The cluster-wide throttle (Redis) paces domains; no per-process per-domain limit or delay.
        "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency,
        # Items of one response processed in parallel. On the asyncio reactor Scrapy starts this
        # many worker tasks for *every* response (scrapy.utils.asyncio._parallel_asyncio), whatever
        # the number of items: at Scrapy's default of 100 that was ~10 % of a crawler's CPU for our
        # one item per page. 16 still sends a many-item page's items to Kafka concurrently.
        "CONCURRENT_ITEMS": 16,
        "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": False,
        "DOWNLOAD_TIMEOUT": settings.getfloat("DOWNLOAD_TIMEOUT"),
        "RETRY_ENABLED": True,
        "RETRY_TIMES": settings.getint("RETRY_TIMES"),
        "RETRY_HTTP_CODES": settings.getlist("RETRY_HTTP_CODES"),
        "RETRY_PRIORITY_ADJUST": -10,
        "REDIRECT_MAX_TIMES": 20,
        "USER_AGENT": settings.user_agent,
        "ROBOTSTXT_OBEY": settings.getbool("ROBOTSTXT_OBEY"),
        # Set-Cookie is not carried to later requests (API.md §3.7); crawl cookies are a header.
        "COOKIES_ENABLED": False,
        # Every final response becomes an item, 4xx and 5xx included (API.md §3.10).
        "HTTPERROR_ALLOW_ALL": True,
        "KAFKA_BASE_64_ENCODE": settings.getbool("KAFKA_BASE_64_ENCODE"),
        "TELNETCONSOLE_ENABLED": False,
        "REMOTE_CONTROL_ENABLED": False,
        "LOG_LEVEL": settings["LOG_LEVEL"],
        "LOG_INSTALL_ROOT_HANDLER": False,  # main() configured logging once
        "DOWNLOADER_MIDDLEWARES": {
            f"{_PKG}.middlewares.LeaseOutcomeMiddleware": 50,
            f"{_PKG}.middlewares.RequestShapingMiddleware": 400,
            f"{_PKG}.middlewares.RetryAfterMiddleware": 600,
            f"{_PKG}.middlewares.ResponseStatsMiddleware": 950,
        },
        "SPIDER_MIDDLEWARES": {f"{_PKG}.middlewares.FrontierSpiderMiddleware": 950},
        "ITEM_PIPELINES": {f"{_PKG}.pipelines.KafkaPipeline": 100},
    }
    values.update(settings.getdict("SCRAPY_SETTINGS"))
    return values
