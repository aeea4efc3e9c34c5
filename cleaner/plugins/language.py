"""``language`` (docs/contract.md §13): ISO 639-1 code of the main text, by py3langid (a maintained
langid.py with its bundled model; nothing is downloaded), or the page's declared language (``<html
lang>``, else a ``Content-Language`` meta tag) when the text is too short to tell; null when
neither says."""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING

import py3langid

from crawlhive.cleaner.plugins import CleanerPlugin

if TYPE_CHECKING:
    from crawlhive.cleaner.page import Page

#: Characters of text below which the identifier is not trusted.
MIN_CHARS = 40
#: Characters of text the identifier reads (the start of a page tells its language as well as the
#: whole; the cost grows with the length: 1000 characters, a few sentences, take a third of the time
#: of 3000 and gave the same language on every page of the extraction corpus).
MAX_CHARS = 1000
_LANG = re.compile(r"^[a-z]{2}$")


class LanguagePlugin(CleanerPlugin):
    name = "language"

    def __init__(self) -> None:
        # The identifier loads its model on first use (half a second: an LZMA file decompressed,
        # which frees the GIL): on a thread of its own from here, while the other steps start and
        # the consumer joins its group, not in the CLEANER_MAX_SECONDS of the first page.
        self._warm: threading.Thread | None = threading.Thread(
            target=py3langid.classify, args=("warming up the language identifier",), name="langid-model", daemon=True
        )
        self._warm.start()

    def wait_ready(self) -> None:
        if self._warm is not None:
            self._warm.join()
            self._warm = None

    def process(self, page: Page) -> None:
        self.wait_ready()
        text = page.record.get("text") or ""
        language = None
        if len(text) >= MIN_CHARS:
            language = str(py3langid.classify(text[:MAX_CHARS])[0])
        else:
            declared = str((page.extra.get("document") or {}).get("language") or "").split("-")[0].lower()
            language = declared or None
        page.record["language"] = language if language and _LANG.match(language) else None
