"""The one JSON encoding of everything crawlhive writes to Kafka (and to the Redis lists of
Redis-only mode): compact JSON in UTF-8, non-ASCII written as itself, ``/`` not escaped; and the
one decoding of what it reads from users (:func:`parse_json`: strict, a reason for what it refuses).

ujson, not the standard library: it encodes a crawled page (a body of megabytes) several times
faster, and every output is encoded at least once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import ujson


def encode(value: Any, *, default: Callable[[Any], Any] | None = None) -> bytes:
    """*value* as a record value: compact JSON, UTF-8.

    A string holding a lone surrogate (from a ``\\ud800`` escape), which UTF-8 cannot hold, is
    written as its JSON escape (``\\ud800``), the rest as it is (rare: the standard library's
    encoder then, whose ``backslashreplace`` error handler writes exactly that escape). *default* converts what JSON has
    no type for (a spider item's dates); without it such a value raises TypeError.

    Raises:
        TypeError: a value JSON cannot hold.
        OverflowError: nesting too deep, or an integer out of range.
    """
    try:
        text: str = ujson.dumps(value, ensure_ascii=False, escape_forward_slashes=False, default=default)
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=default).encode(
            "utf-8", "backslashreplace"
        )


def encode_text(value: Any) -> str:
    """:func:`encode` as text (for a Redis stream field or a Lua argument)."""
    return encode(value).decode("utf-8")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


#: A ``\uD800``-``\uDFFF`` escape: the only way parsed JSON can hold a string that is not valid
#: Unicode (an unpaired surrogate), which no UTF-8 encoder downstream could write.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def parse_json(raw: bytes | str | None) -> tuple[Any, str | None]:
    """``(value, None)`` or ``(None, "Unparseable JSON: <parser message>")``.

    Invalid UTF-8, ``NaN``/``Infinity``, nesting too deep for the parser and strings with an unpaired
    surrogate escape (``"\ud800"``) are unparseable too. None (a Kafka record without a value) is
    parsed as the empty text.
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw or ""
    except UnicodeDecodeError as exc:
        return None, f"Unparseable JSON: invalid UTF-8: {exc.reason} at byte {exc.start}"
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        return None, "Unparseable JSON: nesting too deep"
    except ValueError as exc:
        return None, f"Unparseable JSON: {exc}"
    if _SURROGATE_ESCAPE.search(text):  # rare: only then pay for a full check
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return None, "Unparseable JSON: a string holds an unpaired surrogate escape (\\ud800-\\udfff)"
        except RecursionError:
            return None, "Unparseable JSON: nesting too deep"
    return value, None
