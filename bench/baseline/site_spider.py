"""The plain-Scrapy workload of the crawl benchmark: a CrawlSpider that follows every link.

Every page gives one small item (its URL, title and size) and every link is followed; which
scheduler and dupefilter run is up to the settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class SiteSpider(CrawlSpider):
    name = "bench-site"
    rules = (Rule(LinkExtractor(), callback="parse_page", follow=True),)

    def __init__(self, seeds: str = "/tmp/perfsite/www/seeds.txt", *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        with open(seeds) as lines:
            self.start_urls = [line.strip() for line in lines if line.strip()]

    def parse_page(self, response: Any) -> Iterator[dict[str, Any]]:
        yield {"url": response.url, "title": response.xpath("//title/text()").get(), "size": len(response.body)}
