"""Input limits (docs/contract.md §10.3): each limit is a setting written into the schemas, and no
record of at most 1 MiB can make validation slow.

The fuzz test builds hostile records the way an attacker would: one field filled to about 1 MiB
with many copies of a hypothesis-drawn JSON value (mixed types, nesting, unhashable items), which is
what made jsonschema's pairwise ``uniqueItems`` take minutes on 40 KB.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.validation import Accepted, Rejected, RequestValidator
from crawlhive.utils.process.intake import request_validator

MIB = 1 << 20
#: "Well under a second" of CPU on the slowest CI machine, where it takes about 0.15 s. CPU time of
#: this process, not wall time: a quadratic validator costs seconds of CPU, a busy machine does not.
BUDGET_S = 1.0
BASE = {"url": "http://x.com/", "appid": "app", "crawlid": "c"}


@pytest.fixture(scope="module")
def validator() -> RequestValidator:
    return request_validator(Settings.from_overrides())


def _reason(validator: RequestValidator, message: Any) -> str:
    outcome = validator.validate(message)
    assert isinstance(outcome, Rejected), outcome
    return outcome.reason


def _timed(validator: RequestValidator, raw: bytes) -> float:
    started = time.process_time()
    validator.validate_raw(raw)
    return time.process_time() - started


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=15,
)
CONTAINER_FIELDS = [
    "allowed_domains",
    "allow_regex",
    "deny_regex",
    "deny_extensions",
    "ban_regex",
    "headers",
    "cookies",
    "attrs",
]


def _fill(field: str, element: Any, kind: str) -> dict[str, Any]:
    """A request whose *field* holds about 1 MiB of distinct copies of *element*."""
    size = len(json.dumps(element)) + 12
    count = max(1, (MIB - 400) // size)
    if kind == "list":
        value: Any = [[i, element] if i % 2 else element if i == 0 else {"i": i, "v": element} for i in range(count)]
    else:
        value = {f"k{i}": element for i in range(count)}
    message = {**BASE, field: value}
    raw = json.dumps(message).encode()
    while len(raw) > MIB:  # trim to at most 1 MiB
        count = count * 9 // 10
        value = value[:count] if isinstance(value, list) else dict(list(value.items())[:count])
        message[field] = value
        raw = json.dumps(message).encode()
    return message


@hypothesis_settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    field=st.sampled_from([*CONTAINER_FIELDS, "spiderid", "url", "body", "nonsense"]),
    element=json_values,
    kind=st.sampled_from(["list", "object"]),
)
def test_any_record_up_to_1_mib_validates_well_under_a_second(
    validator: RequestValidator, field: str, element: Any, kind: str
) -> None:
    raw = json.dumps(_fill(field, element, kind)).encode()
    assert len(raw) <= MIB
    elapsed = _timed(validator, raw)
    assert elapsed < BUDGET_S, f"{field} ({kind}, {len(raw)} bytes) took {elapsed:.2f}s"


def test_the_mixed_type_array_that_livelocked_a_partition(validator: RequestValidator) -> None:
    for n in (4_000, 100_000):  # 31 KB took 27 s with jsonschema's own uniqueItems
        raw = json.dumps({**BASE, "allowed_domains": ["x"] + [[i] for i in range(n)]}).encode()
        assert _timed(validator, raw) < BUDGET_S


def test_duplicates_are_still_found(validator: RequestValidator) -> None:
    assert _reason(validator, {**BASE, "allowed_domains": ["a.com", "b.com", "a.com"]}).endswith(
        "has non-unique elements (at /allowed_domains)"
    )
    assert _reason(validator, {**BASE, "deny_regex": ["a", "b", "b"]}).endswith("(at /deny_regex)")
    assert isinstance(validator.validate({**BASE, "allowed_domains": ["a.com", "A.com"]}), Accepted)


@pytest.mark.parametrize(
    ("message", "ending"),
    [
        ({**BASE, "url": "http://x.com/" + "a" * 8180}, "is too long (at /url)"),
        ({**BASE, "spiderid": "a" * 41}, "does not match '^[A-Za-z0-9_.-]{1,40}$' (at /spiderid)"),
        ({**BASE, "spiderid": "../../etc"}, "(at /spiderid)"),
        ({**BASE, "allowed_domains": [f"d{i}.com" for i in range(101)]}, "is too long (at /allowed_domains)"),
        ({**BASE, "deny_extensions": ["x" * 1001]}, "is too long (at /deny_extensions/0)"),
        ({**BASE, "attrs": {"a": "x" * 65536}}, "more than the maximum of 65536 (at /attrs)"),
        (
            {"action": "info", "appid": "app", "uuid": "u", "spiderid": "bad spider", "crawlid": "c"},
            "(at /spiderid)",
        ),
        (
            {
                "action": "domain-update",
                "appid": "app",
                "uuid": "u",
                "domain": "x.com",
                "hits": 1_000_001,
                "window": 60,
            },
            "1000001 is greater than the maximum of 1000000 (at /hits)",
        ),
        (
            {"action": "domain-update", "appid": "app", "uuid": "u", "domain": "x.com", "hits": 1, "window": 604801},
            "604801 is greater than the maximum of 604800 (at /window)",
        ),
    ],
)
def test_default_limits(validator: RequestValidator, message: dict[str, Any], ending: str) -> None:
    assert _reason(validator, message).endswith(ending)


def test_limits_at_their_maximum_are_accepted(validator: RequestValidator) -> None:
    at_max = {
        **BASE,
        "url": "http://x.com/" + "a" * (8192 - 13),
        "spiderid": "a" * 40,
        "allowed_domains": [f"d{i}.com" for i in range(100)],
        "deny_extensions": ["x" * 1000],
        "attrs": {"a": "x" * (65536 - 8)},
    }
    assert isinstance(validator.validate(at_max), Accepted)


def test_limits_are_settings() -> None:
    loose = request_validator(
        Settings.from_overrides(
            SCHEMA_URL_MAX_LENGTH=20, SCHEMA_ARRAY_MAX_ITEMS=2, SCHEMA_ATTRS_MAX_BYTES=10, SCHEMA_HITS_MAX=5
        )
    )
    assert _reason(loose, {**BASE, "url": "http://x.com/" + "a" * 8}).endswith("is too long (at /url)")
    assert _reason(loose, {**BASE, "allow_regex": ["a", "b", "c"]}).endswith("(at /allow_regex)")
    assert _reason(loose, {**BASE, "attrs": {"a": "bcdefgh"}}).endswith("maximum of 10 (at /attrs)")
    update = {"action": "domain-update", "appid": "app", "uuid": "u", "domain": "x.com", "hits": 6, "window": 60}
    assert _reason(loose, update).endswith("(at /hits)")
