"""The ``wandering`` spider: a random walk, one link per page (docs/contract.md §3.3)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from scrapy import Request

from crawlhive.crawler.links import extract_links
from crawlhive.crawler.requests import FRONTIER
from crawlhive.crawler.spiders.base import FrontierSpider

if TYPE_CHECKING:
    from scrapy.http import Response


class WanderingSpider(FrontierSpider):
    """Ignores ``maxdepth``; follows one random link that passes the filters, until there is none.
    Items carry ``attrs.step``: 0 for the seed, then 1, 2, …"""

    name = "wandering"
    filters_own_links = True  # extract_links applies the crawl's filters; maxdepth does not apply

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        request = self.frontier_request(response)
        step = int((request.attrs or {}).get("step", 0))
        attrs = {**(request.attrs or {}), "step": step}
        links = extract_links(response, request, self.link_limits(), self.links_capped)
        if links:
            link = random.choice(links)
            yield Request(link["url"], meta={FRONTIER: {"attrs": {**attrs, "step": step + 1}}})
        yield self.item(response, links, attrs)
