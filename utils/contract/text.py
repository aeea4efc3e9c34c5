"""Client text in reasons and log lines (docs/contract.md §6): a short excerpt, control characters
escaped. Every rejection reason quotes a client's value through :func:`excerpt`, so its wording is
part of the wire format; the log formatter (:mod:`crawlhive.utils.config.log`) escapes with the same
:func:`printable`.
"""

from __future__ import annotations

import reprlib


def printable(text: str) -> str:
    """*text* with every control or other non-printable character escaped (``\\n``, ``\\x1b``,
    ``\\u2028``): a client-provided value logged through it cannot start a forged log line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


#: Characters of a client-provided value quoted in a rejection reason or a log line at most.
EXCERPT_CHARS = 40
#: Bounded repr of a non-string value: a few items of a container, never the whole of a huge one.
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict = 2, 4, 4
_REPR.maxstring = _REPR.maxother = EXCERPT_CHARS


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """A short, control-character-free excerpt of a client-provided *value*, for rejection reasons
    and log lines: a string's first *limit* characters in quotes (``…`` when cut), any other value's
    bounded ``repr``, escaped by :func:`printable`.
    Never use it on a secret (a header's or cookie's value)."""
    if not isinstance(value, str):  # a number, null or container: a bounded repr, unquoted
        text = _REPR.repr(value)
        return printable(text[:limit] + "…" if len(text) > limit else text)
    return "'" + printable(value[:limit] + "…" if len(value) > limit else value) + "'"
