"""The user spider of ``bench/crawl.py`` (docs/contract.md §11): an ordinary Scrapy spider, as a
user would write one, that follows every link of a page (as the built-in ``link`` spider does) and
yields one small structured item per page to ``<prefix>.items``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import scrapy
from scrapy.http import Response, TextResponse
from scrapy.linkextractors import LinkExtractor


class ItemSpider(scrapy.Spider):
    name = "benchitems"
    links = LinkExtractor()

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        if not isinstance(response, TextResponse):  # links and fields are in HTML (the bench site's pages) only
            return
        found = self.links.extract_links(response)
        for link in found:
            yield scrapy.Request(link.url)
        yield {
            "url": response.url,
            "title": response.css("title::text").get(),
            "heading": response.css("h1::text").get(),
            "links": len(found),
        }
