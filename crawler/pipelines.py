"""Item processing: the user's item pipelines, then crawlhive's output (docs/contract.md §5, §11).

:class:`FrontierItemProcessor` is the crawler's ``ITEM_PROCESSOR`` (a setting no one may change):
Scrapy's own pipeline manager, so ``ITEM_PIPELINES`` (a user's pipelines, from SCRAPY_SETTINGS or
a spider's ``custom_settings``) run as in any Scrapy project, followed by the Kafka output, which
therefore always comes last, whatever orders the user's pipelines have. It is a processor rather
than one more pipeline because it must know the page an item came from (for the §11 envelope and
to end the page's lease only once every item is stored) and must see the item after the last of
the user's pipelines, which may return a different object.

Delivery is confirmed before a lease is acked: the emitter's Deferred fires on the broker's
acknowledgement (called in the producer's delivery thread and handed to the reactor with
``callFromThread``), so the reactor never blocks on Kafka. An item a pipeline drops (``DropItem``)
is done with; an exception in a pipeline ends the page as a crawl dead letter
(``item pipeline error: …``), as an exception in a callback does.
"""

from __future__ import annotations

from typing import Any

from scrapy.exceptions import DropItem
from scrapy.pipelines import ItemPipelineManager
from scrapy.utils.defer import maybe_deferred_to_future

from crawlhive.crawler.runtime import CrawlRuntime


class FrontierItemProcessor(ItemPipelineManager):
    """``ITEM_PIPELINES`` in Scrapy's order, then the item to its topic (see the module docstring)."""

    async def process_item_async(self, item: Any) -> Any:
        assert self.crawler is not None, "built with from_crawler"
        runtime = CrawlRuntime.of(self.crawler)
        context = runtime.leases.claim(item)
        try:
            if context is not None and context.done:
                raise DropItem(f"{context.request.url}: its page ended before the item was sent")
            try:
                output = await super().process_item_async(item)
            except DropItem:
                raise
            except Exception as exc:
                if context is not None:
                    runtime.emitter.fail(context, f"item pipeline error: {type(exc).__name__}: {exc}")
                raise  # Scrapy logs it with its traceback
            await maybe_deferred_to_future(runtime.emitter.emit(output, context))
            return output
        finally:
            if context is not None:
                runtime.leases.item_done(context)


__all__ = ["FrontierItemProcessor"]
