"""Main text, title and description (docs/contract.md §13), by trafilatura: boilerplate, navigation,
scripts, styles and ads removed; whitespace normalised (paragraphs one per line). A page without
main text (a short page of a heading and links) has its visible text as ``text``.

The extraction runs in a child process (:mod:`crawlhive.cleaner.extractor`) that is killed when the
page's CLEANER_MAX_SECONDS run out: the page is then a dead letter and the cleaner goes on. With
CLEANER_EXTRACT_PROCESSES above 1 a batch's pages are shared among that many children, each given
the next page as soon as it answers (the extraction is most of a page's cost, and one child leaves
the other cores idle while the cleaner waits for it).
``text`` keeps at most CLEANER_MAX_TEXT_BYTES, ``title`` and ``description`` MAX_META_BYTES.
"""

from __future__ import annotations

import re
import time
from collections import deque
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any, Self

from crawlhive.cleaner.extractor import ExtractionFailed, ExtractionTimeout, Extractor
from crawlhive.cleaner.markdown_links import MAX_URL_LENGTH
from crawlhive.cleaner.page import too_long
from crawlhive.cleaner.plugins import CleanerPlugin

if TYPE_CHECKING:
    from crawlhive.cleaner.cleaner import Cleaner
    from crawlhive.cleaner.page import Page

#: A run of spaces (and tabs, no-break and zero-width spaces) that is not a lone space: what
#: :func:`normalise` makes one space (matching the lone spaces between words too, and replacing
#: each by itself, took a third of its time).
_SPACES = re.compile(r"(?: |[\t\u00a0\u200b])[ \t\u00a0\u200b]+|[\t\u00a0\u200b]")
#: Bytes (UTF-8) a ``title`` or ``description`` keeps.
MAX_META_BYTES = 2048


def normalise(text: str | None) -> str | None:
    """*text* with runs of spaces collapsed, lines stripped, blank lines dropped; None if empty."""
    if not text:
        return None
    return "\n".join(filter(None, map(str.strip, _SPACES.sub(" ", text).splitlines()))) or None


def cut(text: str | None, limit: int) -> str | None:
    """*text* in at most *limit* bytes of UTF-8: whole lines when a line end falls in the second
    half of the limit, else whole characters."""
    if text is None or len(text) * 4 <= limit or len(encoded := text.encode("utf-8")) <= limit:
        return text
    head = encoded[:limit].decode("utf-8", "ignore")
    end = head.rfind("\n")
    return (head[:end] if end >= len(head) // 2 else head).rstrip() or None


#: A Markdown link whose URL a cut ended: ``[text](http://exa``.
_CUT_LINK = re.compile(r"\[((?:\\.|[^\]\\])*)\]\([^)\s]*\Z")


def cut_markdown(markdown: str | None, limit: int) -> str | None:
    """:func:`cut` of *markdown*, a link whose URL the cut ended made its text again."""
    head = cut(markdown, limit)
    if head is not None and head is not markdown and (link := _CUT_LINK.search(head)):
        head = head[: link.start()] + link.group(1)
    return head


class ExtractPlugin(CleanerPlugin):
    """``title``, ``description``, ``text``; leaves trafilatura's document (with its date and the
    page's declared language) in ``page.extra["document"]`` for the later steps."""

    name = "extract"

    def __init__(
        self,
        max_seconds: float,
        max_text_bytes: int,
        markdown: bool = True,
        max_url_length: int = MAX_URL_LENGTH,
        processes: int = 1,
    ) -> None:
        self.max_seconds = max_seconds
        self.max_text_bytes = max_text_bytes
        self.markdown = markdown
        self.max_url_length = max_url_length
        self.extractors = [Extractor() for _ in range(max(1, processes))]
        self.extractor = self.extractors[0]
        for extractor in self.extractors:  # they import trafilatura at the same time (wait_ready)
            extractor.launch()

    def wait_ready(self) -> None:
        """Raises ExtractionFailed: a child did not start within its time."""
        for extractor in self.extractors:
            extractor.wait_ready()

    @classmethod
    def from_cleaner(cls, cleaner: Cleaner) -> Self:
        settings = cleaner.settings
        return cls(
            settings.CLEANER_MAX_SECONDS,
            settings.CLEANER_MAX_TEXT_BYTES,
            settings.CLEANER_MARKDOWN,
            settings.LINK_MAX_URL_LENGTH or MAX_URL_LENGTH,
            settings.CLEANER_EXTRACT_PROCESSES,
        )

    @staticmethod
    def _url(page: Page) -> str:
        """The URL the page's links are resolved against: where the crawler got it."""
        return str(page.item.get("response_url") or page.item["url"])

    def process(self, page: Page) -> None:
        try:
            fields = self.extractor.extract(
                page.html, self._url(page), self.max_seconds - page.spent, self.markdown, self.max_url_length
            )
        except ExtractionTimeout:
            raise too_long(self.max_seconds) from None
        self._fill(page, fields)

    def _fill(self, page: Page, fields: dict[str, Any]) -> None:
        page.extra["document"] = fields
        page.record["title"] = cut(normalise(fields.get("title")), MAX_META_BYTES)
        page.record["description"] = cut(normalise(fields.get("description")), MAX_META_BYTES)
        page.record["text"] = cut(normalise(fields.get("text")), self.max_text_bytes)
        if self.markdown:  # §20.6: the main content as Markdown with its links, cut as text is
            page.record["markdown"] = cut_markdown(fields.get("markdown"), self.max_text_bytes)

    def process_batch(self, pages: list[Page]) -> list[Page]:
        """With one child, page after page (:meth:`process`). With several, each child is handed
        the next page as soon as it answers, and a page's deadline counts from its hand-over; the
        pages keep their order."""
        if len(self.extractors) == 1 or len(pages) < 2:
            return super().process_batch(pages)
        waiting = deque(pages)
        busy: dict[Extractor, Page] = {}
        while waiting or busy:
            for extractor in self.extractors:
                if extractor in busy or not waiting:
                    continue
                page = waiting.popleft()
                try:
                    extractor.submit(page.html, self._url(page), self.markdown, self.max_url_length)
                except ExtractionFailed as exc:
                    page.extra["outcome"] = exc
                    continue
                busy[extractor] = page
            if not busy:
                continue
            now = time.monotonic()
            due = min((e.submitted or now) + self.max_seconds - p.spent for e, p in busy.items())
            ready = set(wait([e.answers for e in busy], timeout=max(0.0, due - now)))
            now = time.monotonic()
            for extractor, page in list(busy.items()):
                started = extractor.submitted or now
                left = self.max_seconds - page.spent
                if extractor.answers not in ready and now - started < left:
                    continue  # still working, within its time
                del busy[extractor]
                try:
                    fields = extractor.collect(left)
                except ExtractionTimeout:
                    page.extra["outcome"] = too_long(self.max_seconds)
                except Exception as exc:  # noqa: BLE001 - the worker sorts outcomes from bugs
                    page.extra["outcome"] = exc
                else:
                    try:
                        self._fill(page, fields)
                    except Exception as exc:  # noqa: BLE001 - as above
                        page.extra["outcome"] = exc
                finally:
                    page.spent += time.monotonic() - started
        return [page for page in pages if "outcome" not in page.extra]

    def close(self) -> None:
        for extractor in self.extractors:
            extractor.close()
