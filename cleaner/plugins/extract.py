"""Main text, title and description (docs/contract.md §13), by trafilatura: boilerplate, navigation,
scripts, styles and ads removed; whitespace normalised (paragraphs one per line)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import trafilatura

from crawlhive.cleaner.plugins import CleanerPlugin

if TYPE_CHECKING:
    from crawlhive.cleaner.page import Page

_SPACES = re.compile(r"[ \t\u00a0\u200b]+")


def normalise(text: str | None) -> str | None:
    """*text* with runs of spaces collapsed, lines stripped, blank lines dropped; None if empty."""
    if not text:
        return None
    lines = (_SPACES.sub(" ", line).strip() for line in text.splitlines())
    joined = "\n".join(line for line in lines if line)
    return joined or None


class ExtractPlugin(CleanerPlugin):
    """``title``, ``description``, ``text``; leaves trafilatura's document (with its date and the
    page's declared language) in ``page.extra["document"]`` for the later steps."""

    name = "extract"

    def process(self, page: Page) -> None:
        document = None
        if page.html.strip():
            try:
                document = trafilatura.bare_extraction(
                    page.html,
                    url=str(page.item.get("response_url") or page.item["url"]),
                    with_metadata=True,
                    include_comments=False,
                    include_tables=True,
                    include_images=False,
                )
            except (ValueError, TypeError, AttributeError):  # broken markup trafilatura gives up on
                document = None
        fields = document.as_dict() if document is not None and hasattr(document, "as_dict") else (document or {})
        page.extra["document"] = fields
        page.record["title"] = normalise(fields.get("title"))
        page.record["description"] = normalise(fields.get("description"))
        page.record["text"] = normalise(fields.get("text"))
