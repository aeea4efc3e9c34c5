"""A quotes spider: listing pages with pagination, and an author page per quote author.

It is an ordinary ``scrapy.Spider``: crawlhive feeds it from the frontier (no ``start_urls``), and
every request it yields becomes a request of the same crawl, under that crawl's ``maxdepth``,
filters, throttle and dedupe. Run it with::

    PYTHONPATH=examples/quotes crawlhive crawler --spider quotes_spiders.spiders:QuotesSpider
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import scrapy
from scrapy.http import Response

from quotes_spiders.items import Author, Quote


class QuotesSpider(scrapy.Spider):
    """Serves crawl requests whose ``spiderid`` is ``quotes``."""

    name = "quotes"
    custom_settings = {
        # Added to crawlhive's own components, never in their place (docs/spiders.md).
        "ITEM_PIPELINES": {"quotes_spiders.pipelines.CleanQuotesPipeline": 300},
    }

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        page = int(response.css("body::attr(data-page)").get() or 1)
        authors: dict[str, str] = {}
        quotes = response.css("div.quote")
        for quote in quotes:
            author = quote.css("small.author::text").get()
            yield Quote(
                text=quote.css("span.text::text").get(default=""),
                author=author,
                tags=quote.css("a.tag::text").getall(),
                page=page,
            )
            href = quote.css("a.about::attr(href)").get()
            if author and href:
                authors[href] = author
        for href in authors:
            # A named callback with cb_kwargs: both travel with the request through Redis.
            yield response.follow(href, callback=self.parse_author, cb_kwargs={"seen": len(quotes)})
        next_page = response.css("li.next a::attr(href)").get()
        if next_page:
            yield response.follow(next_page)  # back to parse

    def parse_author(self, response: Response, seen: int) -> Iterator[Author]:
        yield Author(
            name=response.css("h3.author-title::text").get(default="").strip(),
            born=response.css("span.author-born-date::text").get(),
            quotes_seen_on_page=seen,
        )
