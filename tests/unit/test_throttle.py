"""The cluster-wide throttle of the frontier pop, on a real Redis, including from several OS
processes at once; and the throttle key format."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

import pytest
import redis

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.config.errors import KeyFormatError
from crawlhive.utils.frontier import Frontier, FrontierLeaser, FrontierRequest, ThrottleConfig

US = 1_000_000
LEASE_S = 100


def _us(seconds: float) -> int:
    return round(seconds * US)


# --- the throttle key ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("domain", "spider", "egress", "expected"),
    [
        ("example.com", "link", None, "link::example.com"),
        ("example.com", None, None, "::example.com"),
        ("example.com", "link", "203.0.113.7", "link:203.0.113.7:example.com"),
        ("::1", "link", "2001:db8::1", "link:2001%3Adb8%3A%3A1:::1"),
        ("example.com", None, "odd%3Aid", ":odd%253Aid:example.com"),
    ],
)
def test_throttle_key_format_round_trips(domain: str, spider: str | None, egress: str | None, expected: str) -> None:
    assert Keys.throttle_key(domain, spider, egress) == expected
    assert Keys.parse_throttle_key(expected) == (domain, spider, egress)
    keys = Keys("ch")
    assert keys.parse_throttle(keys.throttle(expected)) == expected


def test_throttle_key_rejects_bad_parts() -> None:
    with pytest.raises(KeyFormatError):
        Keys.throttle_key("")
    with pytest.raises(KeyFormatError):
        Keys.throttle_key("example.com", "a:b")
    with pytest.raises(KeyFormatError):
        Keys.parse_throttle_key("example.com")


# --- four processes against one domain -------------------------------------------------------------


def _fill(client: redis.Redis, keys: Keys, items: int) -> None:
    frontier = Frontier(client, keys, record_ttl_s=3600)
    requests = [FrontierRequest(f"http://example.com/{i}", "app", "c1", request_id=str(i)) for i in range(items)]
    pipe = client.pipeline(transaction=True)
    frontier.push(requests, pipe)
    pipe.execute()


def _pop_worker(url: str, prefix: str, throttle: ThrottleConfig, duration_s: float, start: Any, out: Any) -> None:
    """One crawler-like process: pop until *duration_s* passed, sleeping exactly the wait hints; the
    start time of each lease is its deadline (Redis clock, microseconds) minus the lease time."""
    client = redis.Redis.from_url(url)
    worker = FrontierLeaser(client, Keys(prefix), lease_s=LEASE_S, record_ttl_s=3600, throttle=throttle)
    start.wait()
    deadline = time.monotonic() + duration_s
    starts: list[int] = []
    while (left := deadline - time.monotonic()) > 0:
        outcome = worker.pop("link")
        if outcome.lease is not None:
            starts.append(_us(outcome.lease.deadline) - LEASE_S * US)
        elif outcome.wait_s is not None:
            time.sleep(min(max(outcome.wait_s, 0.001), left))
        else:
            break  # nothing queued: the test fills enough
    out.put(starts)
    client.close()


def _run_workers(url: str, prefix: str, throttle: ThrottleConfig, duration_s: float) -> list[int]:
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_pop_worker, args=(url, prefix, throttle, duration_s, start, out)) for _ in range(4)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=duration_s + 30) for _ in procs]
    for proc in procs:
        proc.join(timeout=10)
        assert proc.exitcode == 0
    assert sum(1 for starts in results if starts) >= 2, "several processes took work"
    return sorted(t for starts in results for t in starts)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("moderated", [False, True])
def test_four_processes_never_exceed_hits_per_window(
    moderated: bool, redis_client: redis.Redis, redis_url: str, names: Any
) -> None:
    keys = Keys(names.key_prefix)
    throttle = ThrottleConfig(hits=10, window_s=2.0, moderated=moderated, type_enabled=True, egress_id=None)
    _fill(redis_client, keys, 1000)
    duration_s = 7.0
    starts = _run_workers(redis_url, names.key_prefix, throttle, duration_s)
    window_us = _us(throttle.window_s)
    # any 11 consecutive starts span at least one window: never more than 10 in any rolling window
    spans = [starts[i + 10] - starts[i] for i in range(len(starts) - 10)]
    assert spans and min(spans) >= window_us - 1  # 1 us: rounding of the reported deadline
    if moderated:  # and spaced at least window / hits apart
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        assert min(gaps) >= _us(throttle.window_s / throttle.hits) - 1
    # the budget is used: at least 90 % of hits per window over the run
    assert len(starts) >= 0.9 * throttle.hits * (duration_s // throttle.window_s), len(starts)


# --- robots.txt Crawl-delay ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "delay", "expected_wait"),
    [
        (None, 2.0, 2.0),  # the default throttle (2/s) is looser: the Crawl-delay applies
        ({"hits": 1, "window": 4, "scale": 1.0}, 2.0, 4.0),  # an operator's stricter limit wins
        ({"hits": 100, "window": 1, "scale": 1.0}, 2.0, 2.0),  # a looser domain-update never loosens it
        (None, None, 0.5),  # no Crawl-delay: the default throttle alone (a wait long enough to measure)
    ],
)
def test_a_crawl_delay_limits_its_domain_unless_a_stricter_limit_applies(
    redis_client: redis.Redis, names: Any, config: dict[str, Any] | None, delay: float | None, expected_wait: float
) -> None:
    """docs/contract.md §14: at most one fetch per Crawl-delay, cluster-wide."""
    import json

    keys = Keys(names.key_prefix)
    throttle = ThrottleConfig(hits=2, window_s=1.0, moderated=True, type_enabled=False, egress_id=None)
    worker = FrontierLeaser(redis_client, keys, lease_s=LEASE_S, record_ttl_s=3600, throttle=throttle)
    _fill(redis_client, keys, 3)
    if config is not None:
        redis_client.hset(keys.domain_config(), "example.com", json.dumps(config))
    if delay is not None:
        redis_client.set(keys.crawl_delay("example.com"), str(delay))
    assert worker.pop("link").lease is not None
    second = worker.pop("link")
    assert second.lease is None and second.wait_s is not None
    assert expected_wait * 0.9 <= second.wait_s <= expected_wait * 1.1 + 0.01, second.wait_s
