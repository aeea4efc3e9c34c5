"""``published`` (docs/contract.md §13): the page's own publication date as ``YYYY-MM-DD``: what
trafilatura's metadata found (htmldate: meta tags, JSON-LD, time elements, visible dates, URL), or
else htmldate's search of the page; a date that does not parse is null."""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING

import htmldate

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
        found = iso_date((page.extra.get("document") or {}).get("date"))
        if found is None and page.html.strip():
            try:
                found = iso_date(htmldate.find_date(page.html, outputformat="%Y-%m-%d", original_date=True))
            except (ValueError, TypeError):
                found = None
        page.record["published"] = found
