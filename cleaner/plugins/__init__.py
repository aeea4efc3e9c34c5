"""The cleaner's steps (docs/contract.md §13), built through the one plugin loader.

A step is a :class:`CleanerPlugin`: ``process(page)`` fills fields of ``page.record`` (or raises
:class:`~crawlhive.cleaner.page.Reject`, :class:`~crawlhive.cleaner.page.Skip` or
:class:`~crawlhive.cleaner.page.Duplicate`); ``process_batch(pages)`` lets a step that talks to
Redis do it once per batch (the dedupe). Steps run in the order of ``CLEANER_PLUGINS`` merged over
:data:`BUILTIN_PLUGINS`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, ClassVar, Self

if TYPE_CHECKING:
    from crawlhive.cleaner.cleaner import Cleaner
    from crawlhive.cleaner.page import Page

_PKG = "crawlhive.cleaner.plugins"

BUILTIN_PLUGINS: dict[str, int] = {
    f"{_PKG}.extract.ExtractPlugin": 100,
    f"{_PKG}.language.LanguagePlugin": 200,
    f"{_PKG}.dates.DatePlugin": 300,
    f"{_PKG}.pii.PiiPlugin": 400,
    f"{_PKG}.validate.ValidatePlugin": 500,
    f"{_PKG}.dedupe.DedupePlugin": 600,
    f"{_PKG}.neardup.NearDuplicatePlugin": 650,
}


class CleanerPlugin:
    """One step of the cleaner."""

    name: ClassVar[str] = "step"

    @classmethod
    def from_cleaner(cls, cleaner: Cleaner) -> Self:
        return cls()

    def wait_ready(self) -> None:
        """Wait until what the step started while it was built is ready (the cleaner calls it once
        every step is built, so that they start side by side, while the consumer joins its group).

        Raises:
            CrawlhiveError: the step cannot work (the cleaner's set-up then fails and is retried).
        """

    def process(self, page: Page) -> None:
        """Clean *page* one step further (may raise Reject, Skip or Duplicate)."""

    def process_batch(self, pages: list[Page]) -> list[Page]:
        """:meth:`process` each page (its time added to ``page.spent``); returns those that go on.
        A step may override it to work on a batch at once; it then marks the pages it stops in
        ``page.extra["outcome"]``."""
        kept = []
        for page in pages:
            started = time.monotonic()
            try:
                self.process(page)
            except Exception as outcome:  # noqa: BLE001 - the worker sorts outcomes from bugs
                page.extra["outcome"] = outcome
                continue
            finally:
                page.spent += time.monotonic() - started
            kept.append(page)
        return kept

    def close(self) -> None:
        """Release what the step holds (the cleaner is stopping). Never raises."""
