"""The ``link`` spider: follows links up to ``maxdepth`` (docs/contract.md §3.5)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from crawlhive.crawler.links import extract_links
from crawlhive.crawler.requests import FrontierLinks
from crawlhive.crawler.spiders.base import FrontierSpider

if TYPE_CHECKING:
    from scrapy.http import Response


class LinkSpider(FrontierSpider):
    """Each page yields its item; below ``maxdepth`` also every link that passes the crawl's filters."""

    name = "link"
    filters_own_links = True  # extract_links applies the crawl's filters; maxdepth is checked here

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        request = self.frontier_request(response)
        links = (
            extract_links(response, request, self.link_limits(), self.links_capped)
            if request.depth < request.maxdepth
            else []
        )
        if links:
            yield FrontierLinks([link["url"] for link in links])  # not a Request each: see FrontierLinks
        yield self.item(response, links)
