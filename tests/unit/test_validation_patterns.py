"""The cost of a crawl's ``allow_regex`` / ``deny_regex`` is bounded (utils/rules/patterns.py): at intake,
through the real validator, and in the crawler's pattern cache.

``\\pL{1,446}a0`` compiled to 530,000 RE2 instructions: 200 of them (3.7 KB) took 67 s and +722 MB
to validate, evicted the kafka-monitor from its group and rewound its batch forever.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from crawlhive.crawler.links import LinkLimits, link_allowed
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.validation import Accepted, Rejected, RequestValidator
from crawlhive.utils.frontier import seed_from_request
from crawlhive.utils.process.intake import request_validator
from crawlhive.utils.rules.patterns import (
    DEFAULT_PATTERN_LIMITS,
    PatternCache,
    PatternLimits,
    PatternTooComplex,
    compile_pattern,
    largest_repeat,
    search_any,
)

BASE = {"url": "http://x.com/", "appid": "app", "crawlid": "c"}
#: "Well under a second" on a loaded CI machine (as in test_validation_limits.py); it takes milliseconds.
BUDGET_S = 1.0
#: The request of the report: 200 patterns of about 18 characters each.
HOSTILE = {
    **BASE,
    "allow_regex": [rf"\pL{{1,446}}a{i}" for i in range(100)],
    "deny_regex": [rf"\pL{{1,446}}d{i}" for i in range(100)],
}


def _timed_reason(validator: RequestValidator, message: dict[str, Any]) -> tuple[str, float]:
    raw = json.dumps(message).encode()
    started = time.perf_counter()
    outcome = validator.validate_raw(raw)
    elapsed = time.perf_counter() - started
    assert isinstance(outcome, Rejected), outcome
    return outcome.reason, elapsed


def test_the_200_pattern_request_is_rejected_at_once_with_its_reason(validator: RequestValidator) -> None:
    assert len(json.dumps(HOSTILE)) < 4500
    reason, elapsed = _timed_reason(validator, HOSTILE)
    assert elapsed < BUDGET_S, f"took {elapsed:.2f}s"
    assert reason == (
        "Invalid request: crawl: pattern too complex: repetition '{1,446}' over"
        " SCHEMA_REGEX_MAX_REPEAT (100) (at /allow_regex/0)"
    )


@pytest.mark.parametrize(
    ("patterns", "ending"),
    [
        # within the repetition cap, RE2 gives up at its memory budget after a few milliseconds
        ([rf"\pL{{1,100}}a{i}" for i in range(100)], "program size over SCHEMA_REGEX_MAX_PROGRAM (20000)"),
        ([r"(?:\pL|\pN){50}"], "program size over SCHEMA_REGEX_MAX_PROGRAM (20000)"),
        # nested repetitions multiply: RE2's 1000 cap holds, ours refuses the program
        ([r"((\pL{1,30}){1,30})"], "program size over SCHEMA_REGEX_MAX_PROGRAM (20000)"),
        # each one small, together too much
        ([rf"\pL{{1,10}}a{i}" for i in range(100)], "over SCHEMA_REGEX_MAX_TOTAL_PROGRAM (100000)"),
    ],
)
def test_expensive_patterns_are_rejected_well_under_a_second(
    validator: RequestValidator, patterns: list[str], ending: str
) -> None:
    reason, elapsed = _timed_reason(validator, {**BASE, "deny_regex": patterns})
    assert elapsed < BUDGET_S, f"took {elapsed:.2f}s"
    assert reason.startswith("Invalid request: crawl: pattern")
    assert reason.endswith(f"{ending} (at {reason.rsplit('(at ', 1)[1]}")
    assert "(at /deny_regex/" in reason


def test_the_exact_program_size_is_named_when_re2_built_it(validator: RequestValidator) -> None:
    strict = request_validator(Settings.from_overrides(SCHEMA_REGEX_MAX_PROGRAM=1000))
    reason, _ = _timed_reason(strict, {**BASE, "allow_regex": ["ok", r"\pL"]})
    assert reason == (
        "Invalid request: crawl: pattern too complex: program size 1200 over"
        " SCHEMA_REGEX_MAX_PROGRAM (1000) (at /allow_regex/1)"
    )


def test_ordinary_patterns_and_the_limits_at_their_maximum_are_accepted(validator: RequestValidator) -> None:
    ordinary = [r"^https?://(www\.)?example\.com/products/\d+", r"\p{Greek}+\.pdf$", r"[a-z]{2,100}", r"\pL+"]
    assert isinstance(validator.validate({**BASE, "allow_regex": ordinary, "deny_regex": [r"\.(jpg|png)$"]}), Accepted)
    assert isinstance(validator.validate({**BASE, "allow_regex": [r"x{100}", r"[{]", r"\p{L}", r"\x{41}"]}), Accepted)


def test_the_limits_are_settings() -> None:
    loose = request_validator(Settings.from_overrides(SCHEMA_REGEX_MAX_REPEAT=500, SCHEMA_REGEX_MAX_PROGRAM=600_000))
    assert isinstance(loose.validate({**BASE, "allow_regex": [r"[a-z]{1,446}"]}), Accepted)
    tight = request_validator(Settings.from_overrides(SCHEMA_REGEX_MAX_REPEAT=5))
    assert "SCHEMA_REGEX_MAX_REPEAT (5)" in _timed_reason(tight, {**BASE, "allow_regex": ["a{6}"]})[0]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("a{3}", 3),
        ("a{2,}", 2),
        ("a{1,446}b{7}", 446),
        (r"\{1000\}", 0),  # escaped braces
        (r"\p{Greek}\P{L}\x{263a}", 0),  # not repetitions
        (r"[{1000}]", 0),  # inside a class
        (r"[]{1000}]", 0),  # ] first in a class is a literal
        (r"[^]{1000}]x", 0),
        (r"[[:alpha:]{1000}]", 0),
        (r"[[:alpha:]]{1000}", 1000),
        (r"\Qa{1000}\E", 0),
        (r"\Qa{1000}\Eb{5}", 5),
        ("a{x}", 0),  # a literal brace for RE2
        ("(a{10}){20}", 20),
    ],
)
def test_counted_repetitions_are_found_as_re2_reads_them(pattern: str, expected: int) -> None:
    assert largest_repeat(pattern)[0] == expected


def test_the_cache_is_bounded_by_program_size_not_count() -> None:
    cache = PatternCache(max_program=5000)
    limits = DEFAULT_PATTERN_LIMITS
    for i in range(10):  # 1200 instructions each: at most four fit
        cache.get(rf"\pL{i}", limits)
    assert cache.size <= 5000
    assert len(cache._entries) == 4
    small = PatternCache(max_program=5000)
    for i in range(200):  # tiny ones: many fit
        small.get(f"a{i}", limits)
    assert len(small._entries) > 100 and small.size <= 5000


def test_the_crawler_never_builds_an_over_limit_program_and_finds_it_nowhere() -> None:
    """A request queued before the intake bound (or by a looser intake) still compiles cheaply in
    the crawler, on its reactor thread: refused once, remembered, never matched."""
    hostile = tuple(HOSTILE["allow_regex"][:50]) + (r"(?:\pL|\pN){100}",)
    started = time.perf_counter()
    for _ in range(100):  # 100 links
        assert not search_any(hostile, "http://x.com/abc")
    assert time.perf_counter() - started < 0.5
    with pytest.raises(PatternTooComplex):
        compile_pattern(r"(?:\pL|\pN){100}")
    accepted = request_validator(Settings.from_overrides()).validate(BASE)
    assert isinstance(accepted, Accepted)
    request = seed_from_request({**accepted.message, "allow_regex": list(hostile[:3])}, "incoming/0/1")
    assert not link_allowed("http://x.com/abc", request, LinkLimits())
    loose = PatternLimits(max_repeat=1000, max_program=10**6)
    assert search_any((r"\pL{1,446}a0",), "http://x.com/" + "é" * 10 + "a0", loose)
