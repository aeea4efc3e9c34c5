"""The Kafka pipeline: every crawled item goes to ``<prefix>.crawled_firehose`` (docs/contract.md §5).

Delivery is confirmed by the broker before the item's lease is acked: ``process_item`` awaits the
producer future's callback (called in kafka-python's I/O thread and handed to the reactor with
``callFromThread``), so the reactor never blocks on Kafka. See :meth:`CrawlRuntime.emit` for too
large items and producer failures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from scrapy.utils.defer import maybe_deferred_to_future

from crawlhive.crawler.items import CrawledItem
from crawlhive.crawler.runtime import CrawlRuntime

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


class KafkaPipeline:
    """Produces each item as ujson to the firehose (and ``<prefix>.crawled_<appid>`` when
    KAFKA_APPID_TOPICS); raises ``DropItem`` when the item was not delivered."""

    def __init__(self, runtime: CrawlRuntime) -> None:
        self.runtime = runtime

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(CrawlRuntime.of(crawler))

    async def process_item(self, item: Any) -> Any:
        crawled = item if isinstance(item, CrawledItem) else CrawledItem(item)
        await maybe_deferred_to_future(self.runtime.emitter.emit(crawled))
        return item
