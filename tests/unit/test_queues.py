"""The frontier's priority queue, on a real Redis."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from crawlhive.utils.keys import Keys
from crawlhive.utils.queues import (
    PRIORITY_MAX,
    PRIORITY_MIN,
    PUSH_CHUNK,
    PriorityQueue,
    RequestQueue,
    clamp_priority,
    decode_priority,
    encode_score,
)


@pytest.fixture
def keys(names: Any) -> Keys:
    return Keys(names.key_prefix)


@pytest.fixture
def queue(redis_client: redis.Redis, keys: Keys) -> PriorityQueue:
    return PriorityQueue(redis_client, keys, keys.crawl_queue("link", "app", "c1", "example.com"))


def _calls(client: redis.Redis, command: str) -> int:
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_implements_the_protocol_and_uses_the_queue_key(queue: PriorityQueue, keys: Keys) -> None:
    assert isinstance(queue, RequestQueue)
    assert queue.key == keys.crawl_queue("link", "app", "c1", "example.com")


def test_higher_priority_first_and_fifo_among_equals(queue: PriorityQueue) -> None:
    queue.push(b"low-1", -9)
    queue.push(b"seed-1", 1)
    queue.push(b"deep", -1000)
    queue.push(b"low-2", -9)
    queue.push_many([(b"seed-2", 1), (b"top", 100), (b"low-3", -9), (b"deeper", -19)])
    popped = [queue.pop() for _ in range(8)]
    assert popped == [b"top", b"seed-1", b"seed-2", b"low-1", b"low-2", b"low-3", b"deeper", b"deep"]
    assert queue.pop() is None


def test_fifo_survives_many_pushes_across_batches(queue: PriorityQueue) -> None:
    items = [(f"r{i:05d}".encode(), i % 3) for i in range(3 * PUSH_CHUNK + 7)]  # several ZADD chunks
    half = len(items) // 2
    assert queue.push_many(items[:half]) == half
    assert queue.push_many(items[half:]) == len(items) - half
    expected = [item for prio in (2, 1, 0) for item, p in items if p == prio]
    assert [queue.pop() for _ in range(len(items))] == expected


def test_duplicate_member_is_neither_added_nor_moved(queue: PriorityQueue, redis_client: redis.Redis) -> None:
    assert queue.push(b"a", 1) is True
    assert queue.push(b"b", 1) is True
    score_before = redis_client.zscore(queue.key, b"a")
    assert queue.push(b"a", 50) is False  # higher priority does not move it either
    assert queue.push_many([(b"a", 1), (b"c", 1), (b"c", 7)]) == 1  # c listed twice counts once
    assert redis_client.zscore(queue.key, b"a") == score_before
    assert len(queue) == 3
    assert [queue.pop() for _ in range(3)] == [b"a", b"b", b"c"]
    assert queue.push_many([]) == 0


def test_push_many_is_one_script_call(queue: PriorityQueue, redis_client: redis.Redis) -> None:
    queue.push(b"warm-up", 0)  # loads the script
    before = _calls(redis_client, "evalsha")
    assert queue.push_many([(f"x{i}".encode(), i) for i in range(2500)]) == 2500
    assert _calls(redis_client, "evalsha") == before + 1


def test_peek_size_and_clear(queue: PriorityQueue) -> None:
    assert queue.peek() is None
    assert queue.size() == 0
    assert queue.clear() == 0
    queue.push_many([(b"a", 1), (b"b", 2)])
    assert queue.peek() == b"b"
    assert queue.size() == len(queue) == 2
    assert queue.clear() == 2
    assert len(queue) == 0
    assert queue.pop() is None


def test_priority_range_recovers_priorities(queue: PriorityQueue) -> None:
    assert queue.priority_range() is None
    queue.push(b"only", -19)
    assert queue.priority_range() == (-19, -19)
    queue.push_many([(b"a", 5), (b"b", -9), (b"c", -1000), (b"d", 0)])
    assert queue.priority_range() == (5, -1000)


def test_members_are_opaque_bytes(queue: PriorityQueue) -> None:
    raw = bytes(range(256))
    queue.push(raw, 3)
    assert queue.peek() == raw
    assert queue.pop() == raw


def test_score_encoding_is_exact_at_the_bounds(queue: PriorityQueue, redis_client: redis.Redis) -> None:
    for priority in (PRIORITY_MAX, 1, 0, -1, -9, -1000, PRIORITY_MIN):
        for seq in (0, 1, 2**32 - 1, 2**40 + 5):
            score = encode_score(priority, seq)
            assert abs(score) < 2**53 and float(score) == score
            assert decode_priority(float(score)) == priority
    assert clamp_priority(10**9) == PRIORITY_MAX
    assert clamp_priority(-(10**9)) == PRIORITY_MIN
    # the script computes the same scores as encode_score, and Redis stores them exactly
    queue.push_many([(b"hi", PRIORITY_MAX + 5), (b"lo", PRIORITY_MIN - 5), (b"mid", -9)])
    last = int(redis_client.get(queue.keys.queue_sequence()))
    assert redis_client.zscore(queue.key, b"hi") == encode_score(PRIORITY_MAX, last - 2)
    assert redis_client.zscore(queue.key, b"lo") == encode_score(PRIORITY_MIN, last - 1)
    assert redis_client.zscore(queue.key, b"mid") == encode_score(-9, last)
    assert queue.priority_range() == (PRIORITY_MAX, PRIORITY_MIN)


def test_queues_of_other_spiders_and_domains_are_separate(redis_client: redis.Redis, keys: Keys) -> None:
    a = PriorityQueue(redis_client, keys, keys.crawl_queue("link", "app", "c1", "example.com"))
    b = PriorityQueue(redis_client, keys, keys.crawl_queue("wandering", "app", "c1", "example.com"))
    c = PriorityQueue(redis_client, keys, keys.crawl_queue("link", "app", "c1", "::1"))
    a.push(b"a", 1)
    b.push(b"b", 1)
    c.push(b"c", 1)
    assert (a.pop(), b.pop(), c.pop()) == (b"a", b"b", b"c")
    assert keys.parse_crawl_queue(c.key) == ("link", "app", "c1", "::1")
