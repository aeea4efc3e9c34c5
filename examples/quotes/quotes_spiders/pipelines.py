"""An item pipeline, as in any Scrapy project: crawlhive runs it before sending the item to Kafka."""

from __future__ import annotations

from typing import Any

from scrapy.exceptions import DropItem

from quotes_spiders.items import Quote


class CleanQuotesPipeline:
    """Strips the curly quotation marks around a quote's text; drops a quote with no author."""

    def process_item(self, item: Any) -> Any:
        if isinstance(item, Quote):
            if not item.author:
                raise DropItem(f"quote without an author: {item.text[:40]!r}")
            item.text = item.text.strip().strip("\u201c\u201d").strip()
        return item
