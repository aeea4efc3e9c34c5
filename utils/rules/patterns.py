"""Regular expressions written by clients (a crawl's ``allow_regex`` / ``deny_regex``), run with RE2.

Python's ``re`` backtracks: a pattern such as ``(a+)+$`` takes exponential time on a long link, and
a crawl request is a stranger's input. RE2 (``google-re2``) matches in time linear in the text and
refuses the constructs that need backtracking (back-references, look-around), so no crawl request
can make link filtering slow (docs/contract.md §10.4).

Compiling is not free, though: RE2 expands a counted repetition into copies of its operand, so
``\\pL{1,446}a0`` (3.7 KB for 200 of them) compiled to 530,000 instructions each, took 67 s and
+722 MB in a kafka-monitor, and the same in every crawler. :class:`PatternLimits` bounds that cost:

* a counted repetition ``{n,m}`` above SCHEMA_REGEX_MAX_REPEAT is refused before RE2 sees it;
* RE2 is given a memory budget (``max_mem``) proportional to SCHEMA_REGEX_MAX_PROGRAM, so it gives
  up on a larger program after a few milliseconds instead of building it (a pattern that passed is
  compiled again with RE2's default budget to match with: :data:`MATCH_MAX_MEM`);
* a compiled program over SCHEMA_REGEX_MAX_PROGRAM instructions (``programsize``) is refused, and
  the intake also refuses a request whose patterns sum to more than SCHEMA_REGEX_MAX_TOTAL_PROGRAM.

The kafka-monitor, REST and ``crawlhive feed`` reject such patterns at intake with a reason naming
the field and the setting (:func:`check_patterns`). The crawler compiles on its reactor thread
(:func:`search_any`), which is safe **because** :func:`compile_pattern` enforces the same bounds
itself: whatever a queued request holds (even one queued before these limits existed), one compile
costs at most a few milliseconds, and each pattern is compiled once per process (failures too). The
compiled patterns are kept in a cache bounded by the sum of their program sizes
(PATTERN_CACHE_MAX_PROGRAM), not by their count: a program's instructions are what its memory is
made of (a compiled pattern keeps about 12 bytes per instruction; compiling it peaks near 100).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import re2

from crawlhive.utils.config.errors import CrawlhiveError
from crawlhive.utils.contract.text import EXCERPT_CHARS, excerpt, printable


class InvalidPattern(CrawlhiveError, ValueError):
    """RE2 cannot compile the pattern; the message is RE2's reason."""


class PatternTooComplex(InvalidPattern):
    """The pattern is over a :class:`PatternLimits` bound; the message names the setting."""


#: Bytes of RE2 ``max_mem`` per allowed program instruction: RE2 gives up compiling a program of
#: about twice SCHEMA_REGEX_MAX_PROGRAM instructions (measured: ~16 bytes per instruction of the
#: budget are used by the compiler), and the rest of the budget is the matching DFA's cache.
MAX_MEM_PER_INSTRUCTION = 32
#: Smallest ``max_mem`` given to RE2, so that a small SCHEMA_REGEX_MAX_PROGRAM still leaves the DFA room.
MIN_MAX_MEM = 256 << 10


#: The settings of :class:`PatternLimits` (a crawler copies them into its Scrapy settings).
PATTERN_SETTINGS = ("SCHEMA_REGEX_MAX_REPEAT", "SCHEMA_REGEX_MAX_PROGRAM", "SCHEMA_REGEX_MAX_TOTAL_PROGRAM")


@dataclass(frozen=True)
class PatternLimits:
    """Bounds on the cost of compiling client patterns (settings SCHEMA_REGEX_*)."""

    max_repeat: int = 100
    max_program: int = 20000
    max_total_program: int = 100000

    @classmethod
    def from_settings(cls, settings: Any) -> PatternLimits:
        """From crawlhive or Scrapy settings (both answer ``getint``). A value of 0 (or a Scrapy
        settings object without it, whose ``getint`` answers 0) is the default: no bound can be
        switched off."""
        defaults = (cls.max_repeat, cls.max_program, cls.max_total_program)
        return cls(
            *(settings.getint(name) or default for name, default in zip(PATTERN_SETTINGS, defaults, strict=True))
        )

    @property
    def max_mem(self) -> int:
        """RE2's ``max_mem`` for one pattern: compiling stops soon after SCHEMA_REGEX_MAX_PROGRAM."""
        return max(MIN_MAX_MEM, self.max_program * MAX_MEM_PER_INSTRUCTION)


DEFAULT_PATTERN_LIMITS = PatternLimits()

_COUNTED = re.compile(r"\{([0-9]+)(?:,([0-9]*))?\}")


def largest_repeat(pattern: str) -> tuple[int, str]:
    """The largest bound of a counted repetition (``{n}``, ``{n,}``, ``{n,m}``) in *pattern*, and
    its text; ``(0, "")`` when it has none.

    A small scan of RE2's syntax, hand-written because no library exposes RE2's parse tree to
    Python: braces after ``\\p``/``\\P``/``\\x``, inside ``\\Q...\\E`` and inside a character class
    are not repetitions. A brace RE2 would read as a literal (``a{x}``) is not one either.
    """
    i, n = 0, len(pattern)
    largest, text = 0, ""
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            if nxt == "Q":
                end = pattern.find("\\E", i + 2)
                i = n if end < 0 else end + 2
            elif nxt in ("p", "P", "x") and pattern[i + 2 : i + 3] == "{":
                end = pattern.find("}", i + 3)
                i = n if end < 0 else end + 1
            else:
                i += 2
            continue
        if in_class:
            if c == "[" and pattern.startswith("[:", i):
                end = pattern.find(":]", i + 2)
                i = n if end < 0 else end + 2
                continue
            in_class = c != "]"
            i += 1
            continue
        if c == "[":
            in_class = True
            i += 1
            if pattern[i : i + 1] == "^":
                i += 1
            if pattern[i : i + 1] == "]":  # a literal ] first in a class
                i += 1
            continue
        if c == "{" and (m := _COUNTED.match(pattern, i)):
            bound = max(int(m[1]), int(m[2] or 0))
            if bound > largest:
                largest, text = bound, m[0]
            i = m.end()
            continue
        i += 1
    return largest, text


def _options(max_mem: int) -> Any:
    options = re2.Options()
    options.log_errors = False  # the reason goes into the exception, not to standard error
    options.max_mem = max_mem
    return options


#: RE2's ``max_mem`` for a pattern compiled to match with (RE2's own default), once it passed
#: :func:`compile_uncached` within its limits: what the program leaves of it is the matching
#: DFA's cache, which the tight compile budget starves (a 16,000-instruction pattern matched 4x
#: slower). Compiling again costs as much as the checked compile did, once per process.
MATCH_MAX_MEM = 8 << 20
#: Programs up to this size keep their first compile: the tight budget leaves their DFA enough.
RECOMPILE_ABOVE = 2000


def compile_uncached(pattern: str, limits: PatternLimits = DEFAULT_PATTERN_LIMITS) -> Any:
    """The RE2 form of *pattern* within *limits*, compiled now (intake: checked, then dropped).

    Raises:
        PatternTooComplex: a repetition over SCHEMA_REGEX_MAX_REPEAT, or a program over
            SCHEMA_REGEX_MAX_PROGRAM (the reason names the setting).
        InvalidPattern: RE2 cannot compile it (for example ``(a)\\1`` or ``(?<=a)b``).
    """
    if not isinstance(pattern, str):
        raise InvalidPattern("a pattern must be a string")
    bound, text = largest_repeat(pattern)
    if bound > limits.max_repeat:
        raise PatternTooComplex(
            f"pattern too complex: repetition {excerpt(text)} over SCHEMA_REGEX_MAX_REPEAT ({limits.max_repeat})"
        )
    try:
        compiled = re2.compile(pattern, _options(limits.max_mem))
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        if "pattern too large" in text:
            raise PatternTooComplex(
                f"pattern too complex: program size over SCHEMA_REGEX_MAX_PROGRAM ({limits.max_program})"
            ) from None
        raise InvalidPattern(_re2_reason(text)) from None
    except (TypeError, ValueError) as exc:
        raise InvalidPattern(_re2_reason(str(exc))) from None
    size = compiled.programsize
    if size > limits.max_program:
        raise PatternTooComplex(
            f"pattern too complex: program size {size} over SCHEMA_REGEX_MAX_PROGRAM ({limits.max_program})"
        )
    return compiled


def _re2_reason(text: str) -> str:
    """RE2's ``<reason>: <part of the pattern>``, the part cut to a short escaped excerpt."""
    reason, sep, part = text.partition(": ")
    return printable(reason[:EXCERPT_CHARS]) + (sep + excerpt(part)[1:-1] if sep else "")


def check_patterns(fields: dict[str, Any], limits: PatternLimits) -> tuple[str, str] | None:
    """Why the patterns of a crawl request (*fields*: ``allow_regex`` and ``deny_regex``, lists or
    None) cannot be accepted, as ``(message, JSON pointer of the pattern)``, or None.

    Each is compiled within *limits*, in order, stopping at the first refused one, so a request
    costs at most SCHEMA_REGEX_MAX_TOTAL_PROGRAM instructions of compiling plus one refused compile.
    """
    total = 0
    for field, patterns in fields.items():
        for i, pattern in enumerate(patterns or ()):
            where = f"/{field}/{i}"
            try:
                total += compile_uncached(pattern, limits).programsize
            except PatternTooComplex as exc:
                return str(exc), where
            except InvalidPattern as exc:
                return f"invalid regular expression: {exc}", where
            if total > limits.max_total_program:
                return (
                    f"patterns too complex: total program size {total}"
                    f" over SCHEMA_REGEX_MAX_TOTAL_PROGRAM ({limits.max_total_program})",
                    where,
                )
    return None


#: Sum of the program sizes (instructions) of the compiled patterns one process keeps; a
#: refused pattern counts as MIN_ENTRY_COST. About 12 bytes each once compiled (measured with
#: ``\pL{10}`` patterns): some 25 MB at most; the DFA each pattern builds while matching is bounded
#: by the rest of its max_mem.
PATTERN_CACHE_MAX_PROGRAM = 2_000_000
#: What a cache entry costs at least (a tiny or refused pattern still has its key and object).
MIN_ENTRY_COST = 16


class PatternCache:
    """Compiled patterns, least recently used first out, bounded by the sum of their program sizes
    (:data:`PATTERN_CACHE_MAX_PROGRAM`) rather than by count. A refused pattern is remembered too,
    so the crawler never compiles it again for each link. Thread-safe."""

    def __init__(self, max_program: int = PATTERN_CACHE_MAX_PROGRAM) -> None:
        self.max_program = max_program
        self.size = 0
        self._entries: OrderedDict[tuple[str, PatternLimits], tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, pattern: str, limits: PatternLimits) -> Any:
        """The compiled *pattern*, or the :class:`InvalidPattern` that refused it (returned, not raised)."""
        key = (pattern, limits)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                return entry[0]
        try:
            value: Any = compile_uncached(pattern, limits)
            cost = max(MIN_ENTRY_COST, value.programsize)
            if value.programsize > RECOMPILE_ABOVE:
                value = re2.compile(pattern, _options(MATCH_MAX_MEM))
        except InvalidPattern as exc:
            value, cost = exc, MIN_ENTRY_COST
        with self._lock:
            if key not in self._entries:
                self._entries[key] = (value, cost)
                self.size += cost
            while self.size > self.max_program and len(self._entries) > 1:
                _, (_, old_cost) = self._entries.popitem(last=False)
                self.size -= old_cost
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.size = 0


_CACHE = PatternCache()


def compile_pattern(pattern: str, limits: PatternLimits = DEFAULT_PATTERN_LIMITS) -> Any:
    """The RE2 form of *pattern* (Python-like syntax; ``search`` finds it anywhere in the text),
    compiled within *limits* once per process (:class:`PatternCache`).

    Raises:
        InvalidPattern: RE2 cannot compile it, or it is over *limits* (:class:`PatternTooComplex`).
    """
    value = _CACHE.get(pattern, limits)
    if isinstance(value, InvalidPattern):
        raise type(value)(str(value))  # a fresh one: raising the cached one would grow its traceback
    return value


def search_any(patterns: tuple[str, ...], text: str, limits: PatternLimits = DEFAULT_PATTERN_LIMITS) -> bool:
    """Whether any of *patterns* (compiled once, cached) is found in *text*.

    A pattern RE2 cannot compile, or over *limits*, is found nowhere: intake rejects such patterns,
    so only a request queued by an older version can hold one.
    """
    for pattern in patterns:
        compiled = _CACHE.get(pattern, limits)
        if not isinstance(compiled, InvalidPattern) and compiled.search(text) is not None:
            return True
    return False
