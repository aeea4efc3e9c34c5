"""The one JSON encoding of everything crawlhive writes to Kafka (and to the Redis lists of
Redis-only mode): compact JSON in UTF-8, non-ASCII written as itself, ``/`` not escaped.

ujson, not the standard library: it encodes a crawled page (a body of megabytes) several times
faster, and every output is encoded at least once.
"""

from __future__ import annotations

import json
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
