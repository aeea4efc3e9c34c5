"""``published`` (docs/contract.md §13): the page's own publication date as ``YYYY-MM-DD``, as
the extraction found it (:func:`crawlhive.cleaner.extractor.metadata`: htmldate over meta tags,
JSON-LD, time elements, visible dates and the URL, on the page's one parsed tree, as trafilatura's
metadata runs it; a second htmldate search here found nothing more on the test pages and cost a
fifth of the cleaning time); a date that does not parse is null."""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING

from crawlhive.cleaner.plugins import CleanerPlugin

if TYPE_CHECKING:
    from crawlhive.cleaner.page import Page


def iso_date(value: object) -> str | None:
    """``YYYY-MM-DD`` of *value* (a date string starting that way), or None."""
    try:
        return date.fromisoformat(str(value)[:10]).isoformat()
    except ValueError:
        return None


class DatePlugin(CleanerPlugin):
    name = "dates"

    def process(self, page: Page) -> None:
        page.record["published"] = iso_date((page.extra.get("document") or {}).get("date"))
