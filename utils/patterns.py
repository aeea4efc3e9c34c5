"""Regular expressions written by clients (a crawl's ``allow_regex`` / ``deny_regex``), run with RE2.

Python's ``re`` backtracks: a pattern such as ``(a+)+$`` takes exponential time on a long link, and
a crawl request is a stranger's input. RE2 (``google-re2``) matches in time linear in the text and
refuses the constructs that need backtracking (back-references, look-around), so no crawl request
can make link filtering slow (docs/contract.md §10.4). The kafka-monitor rejects, at intake, any
pattern RE2 cannot compile; the crawler compiles the same way.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2

from crawlhive.utils.errors import CrawlhiveError

#: Memory RE2 may use for one compiled pattern (RE2's own default is 8 MiB).
MAX_PATTERN_MEMORY = 8 << 20


class InvalidPattern(CrawlhiveError, ValueError):
    """RE2 cannot compile the pattern; the message is RE2's reason."""


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # the reason goes into the exception, not to standard error
    options.max_mem = MAX_PATTERN_MEMORY
    return options


@lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> Any:
    """The RE2 form of *pattern* (Python-like syntax; ``search`` finds it anywhere in the text).

    Raises:
        InvalidPattern: RE2 cannot compile it (for example ``(a)\\1`` or ``(?<=a)b``).
    """
    try:
        return re2.compile(pattern, _options())
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        raise InvalidPattern(text) from None
    except (TypeError, ValueError) as exc:
        raise InvalidPattern(str(exc)) from None


def search_any(patterns: tuple[str, ...], text: str) -> bool:
    """Whether any of *patterns* (compiled once, cached) is found in *text*.

    A pattern RE2 cannot compile is found nowhere: intake rejects such patterns, so only a request
    queued by an older version can hold one.
    """
    for pattern in patterns:
        try:
            if compile_pattern(pattern).search(text) is not None:
                return True
        except InvalidPattern:
            continue
    return False
