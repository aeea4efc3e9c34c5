"""Scrapy's item log lines without the item (docs/contract.md §17.3).

Scrapy's :class:`~scrapy.logformatter.LogFormatter` writes the whole item after ``Dropped: …``,
``Scraped from …`` and ``Error processing …``: for a page item that is its body, headers and cookies,
a line of a megabyte or more when an item is dropped for being too large. These lines name the
item instead (its type and URL), and cut a long drop reason; the item itself is in the dead letter
or the output topic.
"""

from __future__ import annotations

from typing import Any

from itemadapter import ItemAdapter
from scrapy import Spider
from scrapy.http import Response
from scrapy.logformatter import LogFormatter, LogFormatterResult
from twisted.python.failure import Failure

#: The most characters of a URL or a drop reason a log line shows.
MAX_SHOWN = 300


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SHOWN else f"{text[:MAX_SHOWN]}… ({len(text):,} characters)"


def describe_item(item: Any) -> str:
    """``<type> of <url>`` (or the type alone): what the log says instead of the item."""
    kind = type(item).__name__
    try:
        url = ItemAdapter(item).get("url") if ItemAdapter.is_item(item) else None
    except Exception:  # noqa: BLE001 - a user's item class may fail here; the type is enough
        url = None
    return f"{kind} of {_cut(url)}" if isinstance(url, str) and url else kind


class ItemLogFormatter(LogFormatter):
    """Scrapy's log lines, with the item named rather than printed (see the module docstring)."""

    def scraped(self, item: Any, response: Response | Failure | None, spider: Spider) -> LogFormatterResult:
        result = super().scraped(item, response, spider)
        base = result["args"]
        args = {**(base if isinstance(base, dict) else {}), "item": describe_item(item)}
        return {**result, "msg": "Scraped from %(src)s: %(item)s", "args": args}

    def dropped(
        self, item: Any, exception: BaseException, response: Response | Failure | None, spider: Spider
    ) -> LogFormatterResult:
        result = super().dropped(item, exception, response, spider)
        args = {"exception": _cut(str(exception)), "item": describe_item(item)}
        return {**result, "msg": "Dropped: %(exception)s (%(item)s)", "args": args}

    def item_error(
        self, item: Any, exception: BaseException, response: Response | Failure | None, spider: Spider
    ) -> LogFormatterResult:
        result = super().item_error(item, exception, response, spider)
        return {**result, "msg": "Error processing %(item)s", "args": {"item": describe_item(item)}}


__all__ = ["ItemLogFormatter", "describe_item"]
