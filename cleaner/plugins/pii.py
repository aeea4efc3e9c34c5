"""PII masking (docs/contract.md §13): e-mail addresses become ``[email]`` and phone numbers
``[phone]`` in ``title``, ``description`` and ``text``; ``pii_masked`` counts the replacements.

Phone numbers are found by ``phonenumbers`` (Google's libphonenumber), numbers in international
form anywhere and national forms of the page's country (guessed from its language, United States
when unknown); past MAX_VERIFIED numbers in one text the rest is masked by a phone-shaped pattern
(see there). E-mail addresses are matched with a pattern over the *extracted text* (not HTML):
no maintained library finds addresses in free text. The pattern is RFC 5322's dot-atom form, run by
RE2 (``google-re2``), so a hostile page cannot make it slow (Python's ``re`` is quadratic on a long
dotted word without an ``@``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

import phonenumbers
import re2

from crawlhive.cleaner.plugins import CleanerPlugin
from crawlhive.utils.config.errors import NotConfigured

if TYPE_CHECKING:
    from crawlhive.cleaner.cleaner import Cleaner
    from crawlhive.cleaner.page import Page

EMAIL = re2.compile(
    r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+"
)
#: The country whose national phone formats a page of each language most likely uses.
REGIONS = {"en": "US", "fr": "FR", "de": "DE", "es": "ES", "it": "IT", "nl": "NL", "pt": "PT", "ja": "JP", "pl": "PL"}


#: Phone numbers one text has verified by phonenumbers (about 0.1 ms each); past them, the rest of
#: the text is masked by :data:`PHONE_LIKE` alone. Only a page that is a long list of numbers gets
#: there (an 800 KB directory page has 35,000), and over-masking is the safe side of PII masking:
#: it keeps the masking of any text linear and well under a second.
MAX_VERIFIED = 1000
#: A phone-shaped run: an optional ``+`` or ``(``, then at least 7 digits (the shortest national
#: number) with up to 3 of the separators phone numbers use between two digits; numbers separated by
#: spaces run together and are masked whole. Python's ``re`` is linear on it (digits and separators
#: are disjoint, so each character can match one way only) and three times faster than RE2 here.
PHONE_LIKE = re.compile(r"\+?\(?\d(?:[ \t().\-/]{0,3}\d){6,}")


#: Where a phone number can be: at least 4 digits (no region's numbers are shorter in
#: phonenumbers' metadata: Germany's and Austria's shortest national numbers have 4), each at most 4
#: other characters from the next (phonenumbers allows 4 punctuation characters between digit
#: blocks). Only the lines that have one are given to phonenumbers: its matcher costs about a
#: millisecond per 10 KB of text whether or not a number is in it, and most lines have none; the
#: spans found are the same (a number never spans lines: a line end is not a separator).
DIGITS = re.compile(r"\d(?:\D{0,4}\d){3}")


def _candidate_lines(text: str) -> Iterator[tuple[int, str]]:
    """The lines of *text* in which a phone number can be, with the offset of each, one by one."""
    at = 0
    while (found := DIGITS.search(text, at)) is not None:
        start = text.rfind("\n", 0, found.start()) + 1
        end = text.find("\n", found.end())
        end = len(text) if end < 0 else end
        yield start, text[start:end]
        at = end


def _phone_spans(text: str, region: str) -> list[tuple[int, int]]:
    """Where *text* has phone numbers: verified by phonenumbers (in the lines that have enough
    digits for one) up to MAX_VERIFIED of them, then any :data:`PHONE_LIKE` run."""
    spans: list[tuple[int, int]] = []
    for offset, line in _candidate_lines(text):
        for match in phonenumbers.PhoneNumberMatcher(line, region):
            spans.append((offset + match.start, offset + match.end))
            if len(spans) >= MAX_VERIFIED:
                spans += [run.span() for run in PHONE_LIKE.finditer(text, spans[-1][1])]
                return spans
    return spans


def mask(text: str, region: str) -> tuple[str, int]:
    """*text* with e-mail addresses and phone numbers masked, and how many were; linear in the
    text's length (the output is built once from the spans between matches)."""
    text, emails = EMAIL.subn("[email]", text)
    spans = _phone_spans(text, region)
    parts, at = [], 0
    for start, end in spans:
        parts += [text[at:start], "[phone]"]
        at = end
    parts.append(text[at:])
    return "".join(parts), emails + len(spans)


class PiiPlugin(CleanerPlugin):
    name = "pii"

    @classmethod
    def from_cleaner(cls, cleaner: Cleaner) -> PiiPlugin:
        if not cleaner.settings.CLEANER_MASK_PII:
            raise NotConfigured("CLEANER_MASK_PII is false")
        for region in {"US", *REGIONS.values()}:  # metadata loaded here, not in a page's CLEANER_MAX_SECONDS
            mask("+1 202-555-0143", region)
        return cls()

    def process(self, page: Page) -> None:
        region = REGIONS.get(str(page.record.get("language") or ""), "US")
        total = 0
        for name in ("title", "description", "text"):
            value = page.record.get(name)
            if value:
                page.record[name], count = mask(value, region)
                total += count
        if page.record.get("markdown"):  # the same content as text: masked, not counted again
            page.record["markdown"], _ = mask(page.record["markdown"], region)
        page.record["pii_masked"] = total
