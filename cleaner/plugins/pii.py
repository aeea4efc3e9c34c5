"""PII masking (docs/contract.md §13): e-mail addresses become ``[email]`` and phone numbers
``[phone]`` in ``title``, ``description`` and ``text``; ``pii_masked`` counts the replacements.

Phone numbers are found by ``phonenumbers`` (Google's libphonenumber), numbers in international
form anywhere and national forms of the page's country (guessed from its language, United States
when unknown). E-mail addresses are matched with a pattern over the *extracted text* (not HTML):
no maintained library finds addresses in free text. The pattern is RFC 5322's dot-atom form, run by
RE2 (``google-re2``), so a hostile page cannot make it slow (Python's ``re`` is quadratic on a long
dotted word without an ``@``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import phonenumbers
import re2

from crawlhive.cleaner.plugins import CleanerPlugin
from crawlhive.utils.errors import NotConfigured

if TYPE_CHECKING:
    from crawlhive.cleaner.page import Page
    from crawlhive.cleaner.worker import Cleaner

EMAIL = re2.compile(
    r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+"
)
#: The country whose national phone formats a page of each language most likely uses.
REGIONS = {"en": "US", "fr": "FR", "de": "DE", "es": "ES", "it": "IT", "nl": "NL", "pt": "PT", "ja": "JP", "pl": "PL"}


def mask(text: str, region: str) -> tuple[str, int]:
    """*text* with e-mail addresses and phone numbers masked, and how many were."""
    text, emails = EMAIL.subn("[email]", text)
    spans = [(m.start, m.end) for m in phonenumbers.PhoneNumberMatcher(text, region)]
    for start, end in reversed(spans):
        text = text[:start] + "[phone]" + text[end:]
    return text, emails + len(spans)


class PiiPlugin(CleanerPlugin):
    name = "pii"

    @classmethod
    def from_cleaner(cls, cleaner: Cleaner) -> PiiPlugin:
        if not cleaner.settings.getbool("CLEANER_MASK_PII"):
            raise NotConfigured("CLEANER_MASK_PII is false")
        return cls()

    def process(self, page: Page) -> None:
        region = REGIONS.get(str(page.record.get("language") or ""), "US")
        total = 0
        for name in ("title", "description", "text"):
            value = page.record.get(name)
            if value:
                page.record[name], count = mask(value, region)
                total += count
        page.record["pii_masked"] = total
