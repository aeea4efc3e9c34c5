"""Cluster-wide throttled pops, on a real Redis, including from several OS processes at once."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

import pytest
import redis

from crawlhive.utils.errors import KeyFormatError
from crawlhive.utils.keys import Keys
from crawlhive.utils.queues import PriorityQueue
from crawlhive.utils.settings import Settings
from crawlhive.utils.throttle import PopStatus, ThrottledQueue, ThrottleLimit, throttle_key_for

US = 1_000_000


@pytest.fixture
def keys(names: Any) -> Keys:
    return Keys(names.key_prefix)


def _throttled(client: redis.Redis, keys: Keys, limit: ThrottleLimit, items: int = 100) -> ThrottledQueue:
    queue = PriorityQueue(client, keys, keys.crawl_queue("link", "app", "c1", "example.com"))
    queue.push_many([(f"r{i:06d}".encode(), 0) for i in range(items)])
    return ThrottledQueue(queue, keys.throttle_key("example.com", "link"), limit)


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


def test_throttle_key_for_follows_the_scheduler_settings() -> None:
    default = Settings.from_overrides()
    assert throttle_key_for(default, "example.com", "link") == "link::example.com"
    per_domain = Settings.from_overrides(SCHEDULER_TYPE_ENABLED=False)
    assert throttle_key_for(per_domain, "example.com", "link") == "::example.com"
    egress = Settings.from_overrides(SCHEDULER_IP_ENABLED=True, CRAWLER_EGRESS_ID="203.0.113.7")
    assert throttle_key_for(egress, "example.com", "link") == "link:203.0.113.7:example.com"


def test_limit_validation_and_settings() -> None:
    with pytest.raises(ValueError, match="hits"):
        ThrottleLimit(-1, 1.0)
    with pytest.raises(ValueError, match="window"):
        ThrottleLimit(1, 0)
    limit = ThrottleLimit.from_settings(Settings.from_overrides(QUEUE_HITS=5, QUEUE_WINDOW=30, QUEUE_MODERATED=False))
    assert limit == ThrottleLimit(5, 30.0, False)
    assert limit.interval_s == 6.0
    assert ThrottleLimit(0, 1.0).interval_s == float("inf")


# --- single-process behaviour ---------------------------------------------------------------------


def test_empty_queue_pops_nothing_and_leaves_the_throttle_alone(redis_client: redis.Redis, keys: Keys) -> None:
    tq = _throttled(redis_client, keys, ThrottleLimit(1, 10.0), items=0)
    result = tq.pop()
    assert result.status is PopStatus.EMPTY and result.item is None and not result
    assert result.wait_s == 0
    assert redis_client.exists(tq.key) == 0


def test_zero_hits_pauses(redis_client: redis.Redis, keys: Keys) -> None:
    tq = _throttled(redis_client, keys, ThrottleLimit(0, 7.0), items=3)
    result = tq.pop()
    assert result.status is PopStatus.PAUSED and result.item is None
    assert result.wait_s == 7.0
    assert len(tq.queue) == 3


def test_hits_per_window_then_exact_wait(redis_client: redis.Redis, keys: Keys) -> None:
    tq = _throttled(redis_client, keys, ThrottleLimit(3, 0.5, moderated=False))
    popped = [tq.pop() for _ in range(3)]
    assert [r.item for r in popped] == [b"r000000", b"r000001", b"r000002"]
    refused = tq.pop()
    assert refused.status is PopStatus.THROTTLED and refused.item is None
    # the wait is exactly until the oldest start leaves the window, on the Redis clock
    assert _us(refused.wait_s) == _us(popped[0].server_time) + _us(0.5) - _us(refused.server_time)
    assert 0 < refused.wait_s <= 0.5
    time.sleep(refused.wait_s)
    again = tq.pop()
    assert again.status is PopStatus.POPPED and again.item == b"r000003"
    assert _us(again.server_time) - _us(popped[0].server_time) >= _us(0.5)
    assert 0 < redis_client.pttl(tq.key) <= 1500  # one window plus a second


def test_moderated_spaces_pops(redis_client: redis.Redis, keys: Keys) -> None:
    tq = _throttled(redis_client, keys, ThrottleLimit(4, 1.0, moderated=True))
    first = tq.pop()
    refused = tq.pop()
    assert first.status is PopStatus.POPPED and refused.status is PopStatus.THROTTLED
    assert _us(refused.wait_s) == _us(first.server_time) + _us(0.25) - _us(refused.server_time)
    time.sleep(refused.wait_s)
    second = tq.pop()
    assert second.status is PopStatus.POPPED
    assert _us(second.server_time) - _us(first.server_time) >= _us(0.25)


def test_limit_override_per_call(redis_client: redis.Redis, keys: Keys) -> None:
    tq = _throttled(redis_client, keys, ThrottleLimit(0, 1.0))
    assert tq.pop().status is PopStatus.PAUSED
    assert tq.pop(limit=ThrottleLimit(1, 1.0)).status is PopStatus.POPPED


def test_queues_sharing_a_throttle_key_share_the_budget(redis_client: redis.Redis, keys: Keys) -> None:
    shared = keys.throttle_key("example.com")  # type-disabled: one budget for every spider
    limit = ThrottleLimit(2, 5.0, moderated=False)
    a = ThrottledQueue(
        PriorityQueue(redis_client, keys, keys.crawl_queue("link", "app", "c1", "example.com")), shared, limit
    )
    b = ThrottledQueue(
        PriorityQueue(redis_client, keys, keys.crawl_queue("wandering", "app", "c1", "example.com")), shared, limit
    )
    a.queue.push_many([(b"a1", 0), (b"a2", 0)])
    b.queue.push_many([(b"b1", 0), (b"b2", 0)])
    assert [a.pop().item, b.pop().item] == [b"a1", b"b1"]
    assert a.pop().status is PopStatus.THROTTLED
    assert b.pop().status is PopStatus.THROTTLED


def test_pop_and_lease_is_one_atomic_step(redis_client: redis.Redis, keys: Keys) -> None:
    tq = _throttled(redis_client, keys, ThrottleLimit(1, 10.0))
    lease_key = keys.leases("link")
    result = tq.pop_and_lease(lease_key, 120.0)
    assert result.status is PopStatus.POPPED and result.item == b"r000000"
    leased = redis_client.zrange(lease_key, 0, -1, withscores=True)
    assert [m for m, _ in leased] == [b"r000000"]
    assert _us(leased[0][1]) == _us(result.server_time) + _us(120.0)  # deadline on the Redis clock
    refused = tq.pop_and_lease(lease_key, 120.0)
    assert refused.status is PopStatus.THROTTLED
    assert redis_client.zcard(lease_key) == 1
    assert keys.parse_leases(lease_key) == "link"
    with pytest.raises(ValueError, match="lease"):
        tq.pop_and_lease(lease_key, 0)


# --- four processes against one queue -------------------------------------------------------------


def _pop_worker(url: str, prefix: str, limit: ThrottleLimit, duration_s: float, start: Any, out: Any) -> None:
    """One crawler-like process: pop until *duration_s* passed, sleeping exactly the wait hints."""
    client = redis.Redis.from_url(url)
    keys = Keys(prefix)
    tq = ThrottledQueue(
        PriorityQueue(client, keys, keys.crawl_queue("link", "app", "c1", "example.com")),
        keys.throttle_key("example.com", "link"),
        limit,
    )
    start.wait()
    deadline = time.monotonic() + duration_s
    pops: list[int] = []
    last_attempt = 0
    while (left := deadline - time.monotonic()) > 0:
        result = tq.pop()
        last_attempt = _us(result.server_time)
        if result.status is PopStatus.POPPED:
            pops.append(last_attempt)
        elif result.status is PopStatus.THROTTLED:
            time.sleep(min(result.wait_s, left))
        else:
            break  # EMPTY: the test pre-fills enough
    out.put((pops, last_attempt))
    client.close()


def _run_workers(url: str, prefix: str, limit: ThrottleLimit, duration_s: float) -> tuple[list[int], int]:
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_pop_worker, args=(url, prefix, limit, duration_s, start, out)) for _ in range(4)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=duration_s + 30) for _ in procs]
    for proc in procs:
        proc.join(timeout=10)
        assert proc.exitcode == 0
    assert all(pops for pops, _ in results), "every process popped something"
    pops = sorted(t for worker_pops, _ in results for t in worker_pops)
    saturated_until = min(last for _, last in results)  # every process was still trying until then
    return pops, saturated_until


def _per_aligned_window(pops: list[int], window_us: int, until: int) -> list[int]:
    counts = []
    begin = pops[0]
    while begin + window_us <= until:
        counts.append(sum(begin <= t < begin + window_us for t in pops))
        begin += window_us
    return counts


@pytest.mark.timeout(30)
def test_four_processes_never_exceed_hits_per_window(redis_client: redis.Redis, redis_url: str, names: Any) -> None:
    keys = Keys(names.key_prefix)
    limit = ThrottleLimit(10, 2.0, moderated=False)
    _throttled(redis_client, keys, limit, items=1000)
    pops, until = _run_workers(redis_url, names.key_prefix, limit, duration_s=7.0)
    window_us = _us(limit.window_s)
    # any 11 consecutive starts span at least one window: never more than 10 in any rolling window
    spans = [pops[i + 10] - pops[i] for i in range(len(pops) - 10)]
    assert spans and min(spans) >= window_us - 1  # 1 us: float rounding of the reported time
    counts = _per_aligned_window(pops, window_us, until)
    assert len(counts) >= 3
    assert all(9 <= c <= 10 for c in counts), counts


@pytest.mark.timeout(30)
def test_four_processes_moderated_are_spaced(redis_client: redis.Redis, redis_url: str, names: Any) -> None:
    keys = Keys(names.key_prefix)
    limit = ThrottleLimit(10, 2.0, moderated=True)
    _throttled(redis_client, keys, limit, items=1000)
    pops, until = _run_workers(redis_url, names.key_prefix, limit, duration_s=7.0)
    gaps = [b - a for a, b in zip(pops, pops[1:], strict=False)]
    assert gaps and min(gaps) >= _us(limit.interval_s) - 1000  # brief's 1 ms tolerance; exact in practice
    spans = [pops[i + 10] - pops[i] for i in range(len(pops) - 10)]
    assert min(spans) >= _us(limit.window_s) - 1
    counts = _per_aligned_window(pops, _us(limit.window_s), until)
    assert len(counts) >= 3
    assert all(9 <= c <= 10 for c in counts), counts
