"""The rotation of a crawler's pops over frontier shards (crawler/shards.py), on given times: a
crawler with several shards must spread its pops over the shards that may have work, stop asking
empty ones until woken, and sleep exactly until the soonest throttled shard is ready."""

from __future__ import annotations

from crawlhive.crawler.shards import ShardCursor


def test_pops_go_round_the_ready_shards_from_where_the_last_ones_began() -> None:
    cursor = ShardCursor(4)
    assert cursor.plan(6, now=0.0) == [0, 1, 2, 3, 0, 1]
    assert cursor.plan(2, now=0.0) == [1, 2]  # the next round starts one shard further
    assert cursor.plan(1, now=0.0) == [2]


def test_an_empty_shard_rests_until_woken_or_the_recheck_passes() -> None:
    """A shard whose pops found nothing queued is not asked again for recheck_s, unless a wake-up
    names it; a shard that leased (or whose call failed) is asked again at once."""
    cursor = ShardCursor(3, recheck_s=2.0)
    cursor.plan(3, now=10.0)
    cursor.record({0}, {1: None, 2: None}, now=10.0)
    assert cursor.plan(4, now=11.0) == [0, 0, 0, 0]
    cursor.record({0}, {}, now=11.0)
    cursor.wake({2, 7})  # 7: no such shard, ignored
    assert cursor.plan(2, now=11.5) == [2, 0]  # shard 1 still rests
    assert cursor.plan(3, now=12.5) == [0, 1, 2]  # shard 1's recheck has passed; from the shard after 2


def test_when_no_shard_may_be_asked_the_wait_is_the_soonest_throttled_shard() -> None:
    cursor = ShardCursor(3, recheck_s=2.0)
    cursor.record([], {0: 5.0, 1: 1.5, 2: None}, now=100.0)
    assert cursor.plan(2, now=100.5) == []
    assert not cursor.any_ready(100.5)
    assert cursor.wait_s(100.5) == 1.0  # shard 1 is ready at 101.5; shard 2 is only empty
    cursor.record([], {0: None, 1: None}, now=100.5)
    assert cursor.wait_s(100.6) is None  # every shard had nothing queued: sleep until woken
    cursor.wake(None)
    assert cursor.any_ready(100.6) and cursor.plan(3, now=100.6) == [0, 1, 2]


def test_a_lease_beside_a_wait_in_one_round_keeps_the_shard_ready() -> None:
    """Several pops of one round may go to one shard: one leased, another found it throttled. The
    shard still has work, so it is asked again at once."""
    cursor = ShardCursor(2)
    cursor.record({1}, {1: 30.0, 0: 30.0}, now=0.0)
    assert cursor.plan(2, now=1.0) == [1, 1]
    assert cursor.any_ready(1.0)
