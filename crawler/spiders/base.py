"""What the built-in spiders share: the item of a page, from its frontier request."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from scrapy import Spider

from crawlhive.crawler.items import CrawledItem, crawled_item
from crawlhive.crawler.links import LinkLimits
from crawlhive.crawler.requests import context_of

if TYPE_CHECKING:
    from scrapy.http import Response

    from crawlhive.crawler.links import FoundLink
    from crawlhive.utils.frontier import FrontierRequest


class FrontierSpider(Spider):
    """Base of spiders fed by the frontier: no start requests (work arrives through the scheduler)."""

    async def start(self) -> AsyncIterator[Any]:
        return
        yield  # an async generator that yields nothing

    def frontier_request(self, response: Response) -> FrontierRequest:
        """The frontier request *response* answers."""
        context = context_of(response.request)
        if context is None:
            raise ValueError(f"{response.url}: not a response to a frontier request")
        return context.request

    def item(self, response: Response, links: list[FoundLink], attrs: dict[str, Any] | None = None) -> CrawledItem:
        """The crawled item of *response* (docs/contract.md §5); *attrs* defaults to the request's."""
        request = self.frontier_request(response)
        return crawled_item(
            response,
            links,
            url=request.url,
            appid=request.appid,
            crawlid=request.crawlid,
            attrs=request.attrs if attrs is None else attrs,
            base64_encode=self.settings.getbool("KAFKA_BASE_64_ENCODE"),
            redact=self._redacted_headers(),
            redact_words=self._redacted_words(),
        )

    def link_limits(self) -> LinkLimits:
        """The crawl-trap rules of the link filters (LINK_MAX_*), read once per spider."""
        limits: LinkLimits | None = getattr(self, "_link_limits", None)
        if limits is None:
            limits = self._link_limits = LinkLimits.from_settings(self.settings)
        return limits

    def links_capped(self, count: int) -> None:
        """A page had *count* links beyond LINK_MAX_PER_PAGE: counted in the Scrapy stats."""
        stats = self.crawler.stats if getattr(self, "crawler", None) is not None else None
        if stats is not None:
            stats.inc_value("crawlhive/links_over_cap", count)
            stats.inc_value("crawlhive/pages_over_link_cap")

    def _redacted_headers(self) -> frozenset[str]:
        """ITEM_REDACT_HEADERS in lower case, computed once per spider."""
        redact: frozenset[str] | None = getattr(self, "_redact", None)
        if redact is None:
            redact = frozenset(str(name).lower() for name in self.settings.getlist("ITEM_REDACT_HEADERS"))
            self._redact = redact
        return redact

    def _redacted_words(self) -> tuple[str, ...]:
        """ITEM_REDACT_HEADER_WORDS in lower case, computed once per spider."""
        words: tuple[str, ...] | None = getattr(self, "_redact_words", None)
        if words is None:
            found = {str(word).lower() for word in self.settings.getlist("ITEM_REDACT_HEADER_WORDS")}
            words = self._redact_words = tuple(sorted(word for word in found if word))
        return words
