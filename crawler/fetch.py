"""Which way a page is fetched: plain or impersonated (docs/contract.md §25).

:class:`FetchChoiceMiddleware` (order 460: after the site gate, before proxies) writes the rung of
each request into its meta (:data:`~crawlhive.crawler.impersonate.FETCH_META`), which the crawler's
download handler (:class:`~crawlhive.crawler.impersonate.FetchDownloadHandler`) reads: a rung a
spider set itself is kept, else the cluster default FETCH. robots.txt and sitemaps go the same way
as the pages of their site. Each response counts ``fetch/<rung>`` in the crawler's Scrapy stats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from crawlhive.crawler.impersonate import FETCH_META, curl_target
from crawlhive.utils.config.errors import SettingsError

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.statscollectors import StatsCollector

    from crawlhive.utils.config.settings import Settings

#: The ways a crawl may ask its pages to be fetched.
FETCH_MODES = ("plain", "impersonate", "render", "auto")
#: The rungs a plain crawler fetches on itself (``render`` is the rendering crawlers').
CRAWLER_RUNGS = ("plain", "impersonate")


def check_fetch_settings(settings: Settings) -> None:
    """Raises SettingsError naming FETCH or FETCH_PROFILE when either is not a known value."""
    if settings.FETCH not in FETCH_MODES:
        raise SettingsError(f"FETCH: {settings.FETCH!r} is not one of {', '.join(FETCH_MODES)}")
    curl_target(settings.FETCH_PROFILE)


class FetchChoiceMiddleware:
    """Sets each request's rung (module docstring)."""

    def __init__(self, default: str, stats: StatsCollector) -> None:
        self.default = default if default in CRAWLER_RUNGS else "plain"
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings: Settings = crawler.settings["CRAWLHIVE_SETTINGS"]
        check_fetch_settings(settings)
        assert crawler.stats is not None
        return cls(settings.FETCH, crawler.stats)

    def process_request(self, request: Request) -> None:
        rung = request.meta.get(FETCH_META)
        if rung not in CRAWLER_RUNGS:
            request.meta[FETCH_META] = self.default

    def process_response(self, request: Request, response: Response) -> Response:
        self.stats.inc_value(f"fetch/{request.meta.get(FETCH_META, 'plain')}")
        return response
