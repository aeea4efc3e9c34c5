"""Hostile values through the real validator (the kafka-monitor's, REST's and ``crawlhive feed``'s):
huge host names refused before any IDNA step, control characters refused in identifiers and header
values (a trailing newline included), and rejection reasons that never quote a huge or secret value.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from crawlhive.utils.config.log import configure_logging
from crawlhive.utils.contract.validation import Accepted, Rejected, RequestValidator

BASE = {"url": "http://x.com/", "appid": "app", "crawlid": "c"}
#: "Well under a second" on a loaded CI machine (as in test_validation_limits.py); it takes milliseconds.
BUDGET_S = 1.0
INFO = {"action": "info", "appid": "app", "uuid": "u", "spiderid": "link"}
STATS = {"appid": "app", "uuid": "u"}
BLACKLIST = {"action": "blacklist-update", "appid": "app", "uuid": "u", "domain": "x.com"}


def _timed_reason(validator: RequestValidator, message: Any) -> tuple[str, float]:
    raw = json.dumps(message).encode()
    started = time.perf_counter()
    outcome = validator.validate_raw(raw)
    elapsed = time.perf_counter() - started
    assert isinstance(outcome, Rejected), outcome
    return outcome.reason, elapsed


def _reason(validator: RequestValidator, message: Any) -> str:
    return _timed_reason(validator, message)[0]


# --- 2. host names: refused by length before any IDNA step -------------------------------------------


@pytest.mark.parametrize(
    ("message", "ending"),
    [
        ({**BLACKLIST, "domain": "é" * 1_000_000}, "is too long (at /domain)"),  # 4 s of IDNA before
        ({**BLACKLIST, "domain": "a" * 64 + ".com"}, "host name label longer than 63 characters (at /domain)"),
        ({**BASE, "url": "http://" + "é" * 8000 + ".com/"}, "host name longer than 253 characters (8004) (at /url)"),
        ({**BASE, "url": "http://" + "é" * 300 + ".com/"}, "host name longer than 253 characters (304) (at /url)"),
        ({**BASE, "url": "http://a." + "é" * 64 + ".com/"}, "host name label longer than 63 characters (at /url)"),
        (
            {**BASE, "allowed_domains": ["ok.com", "é" * 254]},
            "host name longer than 253 characters (254) (at /allowed_domains/1)",
        ),
    ],
)
def test_huge_hosts_are_refused_by_length_at_once(validator: RequestValidator, message: Any, ending: str) -> None:
    reason, elapsed = _timed_reason(validator, message)
    assert elapsed < BUDGET_S, f"took {elapsed:.2f}s"
    assert reason.endswith(ending), reason
    assert len(reason) < 200 and "é" * 41 not in reason


def test_hosts_at_the_limits_are_accepted(validator: RequestValidator) -> None:
    host = ".".join(["a" * 63] * 3) + "." + "b" * 61  # 253 characters
    assert isinstance(validator.validate({**BASE, "url": f"http://{host}/"}), Accepted)
    assert isinstance(validator.validate({**BLACKLIST, "domain": host}), Accepted)
    assert isinstance(validator.validate({**BASE, "allowed_domains": [host, "bücher.de"]}), Accepted)


# --- 4. control characters in identifiers and header values ------------------------------------------


@pytest.mark.parametrize(
    ("message", "pointer"),
    [
        ({**BASE, "appid": "app\n2026-11-26 INFO forged"}, "/appid"),
        ({**BASE, "crawlid": "c\r\n"}, "/crawlid"),
        ({**BASE, "crawlid": "c\x1b[31m"}, "/crawlid"),
        ({**BASE, "crawlid": "c\u2028"}, "/crawlid"),
        ({**BASE, "spiderid": "link\n"}, "/spiderid"),  # Python's $ matched before the newline
        ({**INFO, "uuid": "u\n"}, "/uuid"),
        ({**INFO, "appid": "app\x00"}, "/appid"),
        ({**STATS, "uuid": "s\n"}, "/uuid"),
        ({**BLACKLIST, "uuid": "u\x85"}, "/uuid"),
        ({**BLACKLIST, "domain": "x.com\x1b"}, "/domain"),
        ({**BASE, "useragent": "bot/1\r\nX-Evil: 1"}, "/useragent"),
        ({**BASE, "headers": {"X-A": "value\n"}}, "/headers/X-A"),  # a trailing newline only
        ({**BASE, "cookies": {"session": "v\n"}}, "/cookies/session"),
        ({**BASE, "cookie": "a=1\n"}, "/cookie"),
        ({**BASE, "headers": {"X-A\n": "v"}}, "/headers"),
    ],
)
def test_control_characters_are_refused(validator: RequestValidator, message: Any, pointer: str) -> None:
    reason = _reason(validator, message)
    assert reason.endswith(f"(at {pointer})"), reason
    assert reason.isprintable(), reason


# --- 5. reasons name the field and the rule, quote a short escaped excerpt, never a secret -----------


@pytest.mark.parametrize(
    ("message", "secret"),
    [
        ({**BASE, "headers": {"Authorization": "Bearer s3cr3t-token\r\nX: 1"}}, "s3cr3t"),
        ({**BASE, "headers": {"Authorization": "Bearer s3cr3t-token" + "x" * 9000}}, "s3cr3t"),
        ({**BASE, "headers": {"Authorization": 12345678}}, "12345678"),
        ({**BASE, "headers": "Authorization: Bearer s3cr3t"}, "s3cr3t"),
        ({**BASE, "cookies": {"session": "s3cr3t;x"}}, "s3cr3t"),
        ({**BASE, "cookie": "sid=s3cr3t\n"}, "s3cr3t"),
        ({**BASE, "body": "password=s3cr3t" + "x" * 1_048_576}, "s3cr3t"),
    ],
)
def test_secret_values_are_never_quoted(validator: RequestValidator, message: Any, secret: str) -> None:
    reason = _reason(validator, message)
    assert secret not in reason and "value" in reason, reason


@pytest.mark.parametrize(
    "message",
    [
        {**BASE, "url": "ftp://" + "\n" * 100 + "x" * 8000},
        {**BASE, "url": "http://x.com/" + "a" * 9000},
        {**BASE, "appid": "a\n" * 5000},
        {**BASE, "x" * 100_000: 1, "y\n" * 10: 2},
        {**BASE, "allowed_domains": [["x" * 1000, i] for i in range(50)] + [["x" * 1000, 0]]},
        {**BASE, "attrs": "x\n" * 100_000},
        {**BLACKLIST, "domain": "/" + "é" * 200},
        {**BASE, "deny_regex": ["(" + "\n" * 900]},
        {"action": "info\n" * 1000, "appid": "app", "uuid": "u", "spiderid": "link"},
    ],
)
def test_reasons_quote_a_short_escaped_excerpt(validator: RequestValidator, message: Any) -> None:
    reason = _reason(validator, message)
    assert len(reason) < 400 and reason.isprintable(), reason
    assert "x" * 41 not in reason and "é" * 41 not in reason and reason.count("info") <= 10


def test_a_reason_still_names_the_rule_and_a_short_value(validator: RequestValidator) -> None:
    assert _reason(validator, {**BASE, "appid": "ab"}) == "Invalid request: crawl: 'ab' is too short (at /appid)"
    long_url = "http://x.com/" + "a" * 9000
    assert _reason(validator, {**BASE, "url": long_url}) == (
        "Invalid request: crawl: 'http://x.com/aaaaaaaaaaaaaaaaaaaaaaaaaaa…' is too long (at /url)"
    )
    assert _reason(validator, {**BASE, "headers": {"X-A": "v\n"}}) == (
        "Invalid request: crawl: value does not match '^[^\\\\r\\\\n]*$' (at /headers/X-A)"
    )
    # a header's name is not secret: it is quoted (escaped), its value never is
    assert _reason(validator, {**BASE, "headers": {"X-A\n": "s3cr3t"}}).startswith(
        "Invalid request: crawl: 'X-A\\n' does not match"
    )


def test_client_values_in_log_lines_cannot_forge_a_line(tmp_path: Path) -> None:
    log_file = tmp_path / "log.txt"
    configure_logging("INFO", file=str(log_file))
    try:
        logging.getLogger("crawlhive.kafka_monitor.monitor").info(
            "rejected %s: %s", "app\n2026-11-26 00:00:00 ERROR crawlhive: forged", "c\r\x1b[2J"
        )
    finally:
        configure_logging("WARNING")
    lines = log_file.read_text().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].endswith("rejected app\\n2026-11-26 00:00:00 ERROR crawlhive: forged: c\\r\\x1b[2J")


def test_a_pointer_to_a_client_key_is_short_and_escaped() -> None:
    from crawlhive.utils.contract.validation import json_pointer

    assert json_pointer(["headers", "X\n" + "y" * 100_000, 0]) == "/headers/X\\n" + "y" * 38 + "…/0"
    assert json_pointer(["a/b", "c~d"]) == "/a~1b/c~0d"
