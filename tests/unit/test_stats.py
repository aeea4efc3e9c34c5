"""Rolling-window, lifetime and distinct counters, on a real Redis."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.state.stats import BUCKETS_PER_WINDOW, Stats


@pytest.fixture
def keys(names: Any) -> Keys:
    return Keys(names.key_prefix)


def _stats(client: redis.Redis, keys: Keys, windows: list[int]) -> Stats:
    return Stats(client, keys, windows, clock=lambda: pytest.fail("tests pass now= explicitly"))


def test_counts_per_window_with_zero_windows_omitted(redis_client: redis.Redis, keys: Keys) -> None:
    stats = _stats(redis_client, keys, [60, 600])
    assert stats.read("kafka-monitor", "total", now=10_000.0) == {}  # never incremented
    stats.incr("kafka-monitor", "total", 2, now=10_000.0)
    stats.incr("kafka-monitor", "total", now=10_500.0)
    stats.incr("kafka-monitor", "total", 3, now=10_530.0)
    assert stats.read("kafka-monitor", "total", now=10_540.0) == {"60": 4, "600": 6, "lifetime": 6}
    assert stats.read("kafka-monitor", "total", now=10_585.5) == {"60": 3, "600": 6, "lifetime": 6}
    assert stats.read("kafka-monitor", "total", now=10_700.0) == {"600": 4, "lifetime": 6}  # "60" is zero
    assert stats.read("kafka-monitor", "total", now=20_000.0) == {"lifetime": 6}


def test_bucket_error_bound(redis_client: redis.Redis, keys: Keys) -> None:
    """An event younger than W - W/60 is always counted; one older than W never is."""
    stats = _stats(redis_client, keys, [60])  # buckets of 1 s
    width = 60 / BUCKETS_PER_WINDOW
    stats.incr("c", "n", now=1000.5)
    assert stats.read("c", "n", now=1000.5 + 60 - width - 0.01) == {"60": 1, "lifetime": 1}
    assert stats.read("c", "n", now=1000.5 + 60.01) == {"lifetime": 1}
    # in between, the event may already be dropped (an under-count of at most one bucket width)
    assert stats.read("c", "n", now=1000.5 + 60 - width / 2).get("60", 0) in (0, 1)


def test_ttl_on_every_key_but_lifetime_and_index(redis_client: redis.Redis, keys: Keys) -> None:
    stats = _stats(redis_client, keys, [900, 3600, 604800])
    stats.incr("redis-monitor", "total", now=time.time())
    stats.unique("redis-monitor", "crawlids", "c1")
    window_ttl = redis_client.pttl(keys.stats_window("redis-monitor", "total"))
    assert 604_800_000 < window_ttl <= stats.window_ttl_ms  # longest window plus one of its buckets
    assert 0 < redis_client.pttl(keys.stats_unique("redis-monitor", "crawlids")) <= 604_800_000
    assert redis_client.ttl(keys.stats_lifetime("redis-monitor", "total")) == -1  # lifetime: exempt
    assert redis_client.ttl(keys.stats_index()) == -1  # the registry of counters: exempt


def test_caller_pipeline_carries_the_writes(redis_client: redis.Redis, keys: Keys) -> None:
    stats = _stats(redis_client, keys, [60])
    pipe = redis_client.pipeline(transaction=True)
    pipe.set(keys.prefix + ":other", "x")
    stats.incr("kafka-monitor", "total", 5, pipe=pipe, now=500.0)
    stats.incr_many([("kafka-monitor", "fail", 1), ("kafka-monitor", "plugins:StatsHandler", 2)], pipe=pipe, now=500.0)
    stats.unique("kafka-monitor", "appids", b"testapp", pipe=pipe)
    assert stats.read("kafka-monitor", "total", now=500.0) == {}  # nothing sent yet
    pipe.execute()
    got = stats.read_many(
        [("kafka-monitor", "total"), ("kafka-monitor", "fail"), ("kafka-monitor", "plugins:StatsHandler")], now=501.0
    )
    assert got == {
        ("kafka-monitor", "total"): {"60": 5, "lifetime": 5},
        ("kafka-monitor", "fail"): {"60": 1, "lifetime": 1},
        ("kafka-monitor", "plugins:StatsHandler"): {"60": 2, "lifetime": 2},
    }
    assert stats.read_unique("kafka-monitor", "appids") == 1


def test_counters_are_enumerable_from_the_index(redis_client: redis.Redis, keys: Keys) -> None:
    stats = _stats(redis_client, keys, [60])
    stats.incr("crawler", "link:200", now=1.0)
    stats.incr("crawler", "link:504", now=1.0)
    stats.unique("rest", "appids", "a")
    assert stats.counters() == [("crawler", "link:200"), ("crawler", "link:504"), ("rest", "appids")]
    assert stats.counters("crawler") == [("crawler", "link:200"), ("crawler", "link:504")]
    assert stats.counters("nobody") == []


def test_unique_counts_distinct_values(redis_client: redis.Redis, keys: Keys) -> None:
    stats = _stats(redis_client, keys, [60])
    assert stats.read_unique("kafka-monitor", "crawlids") == 0
    stats.unique_many("kafka-monitor", "crawlids", [f"c{i}" for i in range(500)])
    stats.unique_many("kafka-monitor", "crawlids", [f"c{i}" for i in range(250)])  # repeats
    stats.unique("kafka-monitor", "crawlids", "c0")
    stats.unique_many("kafka-monitor", "crawlids", [])
    assert abs(stats.read_unique("kafka-monitor", "crawlids") - 500) <= 10  # HyperLogLog: ~0.81 % error


def test_stale_buckets_are_removed_so_storage_stays_bounded(redis_client: redis.Redis, keys: Keys) -> None:
    stats = _stats(redis_client, keys, [60, 600])
    key = keys.stats_window("crawler", "link:200")
    for second in range(3000):  # a steady event rate: one per second for 50 minutes
        stats.incr("crawler", "link:200", now=100_000.0 + second)
    assert redis_client.zcard(key) <= 2 * BUCKETS_PER_WINDOW  # the writer trimmed as it went
    assert stats.read("crawler", "link:200", now=100_000.0 + 2999.5) == {"60": 60, "600": 600, "lifetime": 3000}
    # a different process (no memory of earlier writes) leaves stale buckets; a read removes them
    Stats(redis_client, keys, [60, 600]).incr("crawler", "link:200", now=200_000.0)
    assert stats.read("crawler", "link:200", now=200_000.5) == {"60": 1, "600": 1, "lifetime": 3001}
    assert redis_client.zcard(key) == 2


def test_zero_and_negative_counts(redis_client: redis.Redis, keys: Keys) -> None:
    stats = _stats(redis_client, keys, [60])
    stats.incr("c", "n", 0, now=1.0)
    assert redis_client.exists(keys.stats_window("c", "n"), keys.stats_index()) == 0
    with pytest.raises(ValueError, match=">= 0"):
        stats.incr("c", "n", -1, now=1.0)


@pytest.mark.parametrize("windows", [[], [0], [-5], [1.5], [True]])
def test_windows_must_be_positive_integers(redis_client: redis.Redis, keys: Keys, windows: list[Any]) -> None:
    with pytest.raises(ValueError, match="STATS_TIMES"):
        Stats(redis_client, keys, windows)


def test_windows_expire_in_real_time(redis_client: redis.Redis, keys: Keys) -> None:
    stats = Stats(redis_client, keys, [1, 3])
    stats.incr("kafka-monitor", "total", 4)
    assert stats.read("kafka-monitor", "total") == {"1": 4, "3": 4, "lifetime": 4}
    time.sleep(1.2)
    stats.incr("kafka-monitor", "total")
    assert stats.read("kafka-monitor", "total") == {"1": 1, "3": 5, "lifetime": 5}
    time.sleep(1.2)
    assert stats.read("kafka-monitor", "total") == {"3": 5, "lifetime": 5}


def test_a_hosts_counters_expire_and_leave_the_index(redis_client: redis.Redis, keys: Keys) -> None:
    """Per-host (``machine:``) counters: every key expires, lifetime total included, so pods that
    come and go with an autoscaler leave nothing behind; the reader that finds one empty drops it
    from the index. A cluster-wide counter keeps its lifetime total and its index entry."""
    stats = Stats(redis_client, keys, [1])  # windows of 1 s: keys live 1 s + one bucket
    stats.incr("crawler", "machine:pod-a:200", 3)
    stats.incr("crawler", "spider:link:200", 3)
    assert 0 < redis_client.pttl(keys.stats_lifetime("crawler", "machine:pod-a:200")) <= stats.window_ttl_ms
    assert redis_client.ttl(keys.stats_lifetime("crawler", "spider:link:200")) == -1
    counters = stats.counters("crawler")
    assert ("crawler", "machine:pod-a:200") in counters
    assert stats.read_many(counters)[("crawler", "machine:pod-a:200")]["lifetime"] == 3  # live: kept
    assert ("crawler", "machine:pod-a:200") in stats.counters("crawler")
    deadline = time.monotonic() + 5
    while redis_client.exists(keys.stats_lifetime("crawler", "machine:pod-a:200")) and time.monotonic() < deadline:
        time.sleep(0.1)
    read = stats.read_many(stats.counters("crawler"))
    assert read[("crawler", "machine:pod-a:200")] == {}
    assert stats.counters("crawler") == [("crawler", "spider:link:200")]
    assert read[("crawler", "spider:link:200")] == {"lifetime": 3}


def test_fetch_counter_names_parse_back_and_are_no_status_counters() -> None:
    """The fetch ladder's counters (docs/contract.md §25.7) beside the status counters they share
    the crawler component with: each parser takes its own names only."""
    from crawlhive.utils.state.stats import (
        fetch_counter_name,
        machine_fetch_counter_name,
        parse_fetch_counter_name,
        parse_status_counter_name,
    )

    spider, machine = fetch_counter_name("link", "render"), machine_fetch_counter_name("pod-a", "climbs")
    assert (spider, machine) == ("fetch:link:render", "machine:pod-a:fetch:climbs")
    assert parse_fetch_counter_name(spider) == ("spider", "link", "render")
    assert parse_fetch_counter_name(machine) == ("machine", "pod-a", "climbs")
    assert parse_status_counter_name(spider) is None and parse_status_counter_name(machine) is None
    assert parse_fetch_counter_name("machine:pod-a:200") is None and parse_fetch_counter_name("spider:link:200") is None
    assert parse_fetch_counter_name("fetch:link:sideways") is None
