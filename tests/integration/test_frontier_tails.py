"""Two-tier crawl queues (docs/contract.md §23): heads in Redis, tails in segments of FRONTIER_TAIL_URL.

On a real Redis (and in ``make test``'s other passes with 4 shards and on a Redis Cluster), with a
real folder as the store: the order requests are served in, what ``info``, the backlogs and
``stop`` see with tails, cold domains that keep no head, every step of a spill and a refill
interrupted where a kill could interrupt it (nothing lost, nothing served twice), and the store
refusing writes (heads still served, one WARNING, the bound on what waits, spilling again after).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest
import redis

from crawlhive.rest.cluster import ClusterView
from crawlhive.rest.metrics import RestMetrics
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings, write_pipeline
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import (
    Frontier,
    FrontierLeaser,
    FrontierReader,
    FrontierRequest,
    ThrottleConfig,
    tail_mover,
)
from crawlhive.utils.frontier.tail_mover import COLD_SPILL_MIN, COLD_WAIT_S, TailMover
from crawlhive.utils.frontier.tails import TailStore, decode_segment, encode_segment, parse_tail_member

pytestmark = pytest.mark.timeout(300)

FAST = ThrottleConfig(hits=100000, window_s=1.0, moderated=False, type_enabled=True, egress_id=None)


@pytest.fixture
def tail_settings(redis_settings: Settings, tmp_path: Path) -> Settings:
    return redis_settings.copy_with(
        FRONTIER_TAIL_URL=str(tmp_path / "tails"),
        FRONTIER_HEAD_SIZE=20,
        FRONTIER_SEGMENT_SIZE=50,
        FRONTIER_HOT_DOMAINS=1000,
        CRAWL_MAX_PAGES_DEFAULT=0,
    )


def _push(client: redis.Redis, settings: Settings, urls: list[str], crawlid: str = "t1", priority: int = 0) -> None:
    requests = [
        FrontierRequest(url=url, spiderid="link", appid="app", crawlid=crawlid, priority=priority) for url in urls
    ]
    pipe = write_pipeline(client)
    Frontier.from_settings(client, settings).push(requests, pipe)
    pipe.execute()


def _leaser(client: redis.Redis, settings: Settings) -> FrontierLeaser:
    leaser = FrontierLeaser.from_settings(client, settings)
    leaser.throttle = FAST
    return leaser


def _mover(client: redis.Redis, settings: Settings) -> TailMover:
    mover = TailMover.from_settings(client, settings)
    assert mover is not None
    return mover


def _settle(mover: TailMover) -> None:
    """Run the mover until no shard has a due flag left."""
    for _ in range(1000):
        if not sum(mover.run_once(shard) for shard in range(mover.keys.shards)):
            return
    raise AssertionError("the tail mover never settled")


def _drain(client: redis.Redis, settings: Settings, mover: TailMover, limit: int = 100000) -> list[str]:
    """Pop every request (running the mover whenever a pop finds nothing ready), in pop order."""
    leaser = _leaser(client, settings)
    urls: list[str] = []
    idle = 0
    while len(urls) < limit:
        outcome = leaser.pop("link")
        if outcome.lease is not None:
            urls.append(outcome.lease.request.url)
            leaser.ack(outcome.lease)
            idle = 0
            continue
        if outcome.wait_s is None:
            break  # nothing queued at all
        _settle(mover)
        for shard in range(mover.keys.shards):  # a domain waiting for its refill is due again now
            domains = mover.keys.domains("link", False, shard)
            waiting = client.zrange(domains, 0, -1)
            if waiting:
                client.zadd(domains, dict.fromkeys(waiting, 0))
        idle += 1
        assert idle < 50, "pops found nothing ready while requests were queued"
    return urls


def _metrics(client: redis.Redis, settings: Settings) -> dict[str, float]:
    """The unlabelled crawlhive_frontier_tail_* samples of GET /metrics' exposition."""
    text = RestMetrics(ClusterView(client, settings, {}), waiting=lambda: 0, stored=lambda: 0).render().decode()
    return {
        name: float(value)
        for name, value in (line.split(" ", 1) for line in text.splitlines())
        if name.startswith("crawlhive_frontier_tail_")
    }


def _segments(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.seg"))


def _tail_members(client: redis.Redis, settings: Settings, domain: str, crawlid: str = "t1") -> list[bytes]:
    keys = keys_from_settings(settings)
    return list(client.zrange(keys.tail_queue("link", "app", crawlid, domain), 0, -1))


def test_a_segment_round_trips_and_refuses_corruption() -> None:
    rows = [(f"http://a.example/{i} 0 x".encode(), -(2**32) * 5 + i) for i in range(300)]
    data = encode_segment(rows)
    assert decode_segment(data) == rows
    assert len(data) < sum(len(m) for m, _ in rows) / 2  # compressed
    broken = bytearray(data)
    broken[-3] ^= 0xFF
    with pytest.raises(Exception, match="corrupt|truncated"):
        decode_segment(bytes(broken))
    with pytest.raises(Exception, match="not a crawlhive tail segment"):
        decode_segment(b"nonsense")


def test_a_long_queue_keeps_its_head_in_redis_and_is_served_in_order(
    redis_client: redis.Redis, tail_settings: Settings, tmp_path: Path
) -> None:
    urls = [f"http://order.example/p{i}" for i in range(500)]
    _push(redis_client, tail_settings, urls)
    mover = _mover(redis_client, tail_settings)
    _settle(mover)
    keys = keys_from_settings(tail_settings)
    queue = keys.crawl_queue("link", "app", "t1", "order.example")
    # the head keeps FRONTIER_HEAD_SIZE, the rest is in segments of FRONTIER_SEGMENT_SIZE
    assert redis_client.zcard(queue) == 20
    members = _tail_members(redis_client, tail_settings, "order.example")
    assert sum(parse_tail_member(m)[1] for m in members) == 480
    assert len(_segments(tmp_path / "tails")) == len(members) == 10
    stats = redis_client.hgetall(keys.tail_stats(keys.shard_of("order.example")))
    assert int(stats[b"requests"]) == 480 and int(stats[b"segments"]) == 10
    metrics = _metrics(redis_client, tail_settings)
    assert metrics["crawlhive_frontier_tail_requests"] == 480
    assert metrics["crawlhive_frontier_tail_segments"] == 10
    assert metrics["crawlhive_frontier_tail_bytes"] == sum(p.stat().st_size for p in _segments(tmp_path / "tails"))
    assert metrics["crawlhive_frontier_tail_spilled_total"] == 480
    # popped in push order (FIFO among equal priorities), each once, refilled as the head runs short
    served = _drain(redis_client, tail_settings, mover)
    assert served == urls
    assert mover.counts.refilled == 480
    assert _segments(tmp_path / "tails") == []
    stats = redis_client.hgetall(keys.tail_stats(keys.shard_of("order.example")))
    assert int(stats[b"requests"]) == 0 and int(stats[b"segments"]) == 0 and int(stats[b"bytes"]) == 0
    metrics = _metrics(redis_client, tail_settings)
    assert metrics["crawlhive_frontier_tail_requests"] == 0
    assert metrics["crawlhive_frontier_tail_refilled_total"] == 480


def test_a_high_priority_request_behind_a_long_tail_is_served_next(
    redis_client: redis.Redis, tail_settings: Settings
) -> None:
    _push(redis_client, tail_settings, [f"http://prio.example/low{i}" for i in range(300)])
    mover = _mover(redis_client, tail_settings)
    _settle(mover)
    leaser = _leaser(redis_client, tail_settings)
    first = leaser.pop("link").lease
    assert first is not None and first.request.url.endswith("/low0")
    _push(redis_client, tail_settings, ["http://prio.example/urgent"], priority=50)
    _settle(mover)
    nxt = leaser.pop("link").lease
    assert nxt is not None and nxt.request.url == "http://prio.example/urgent"
    # and a request of lower priority than the whole tail waits for all of it
    _push(redis_client, tail_settings, ["http://prio.example/last"], priority=-50)
    _settle(mover)
    rest = _drain(redis_client, tail_settings, mover)
    assert rest[-1] == "http://prio.example/last"
    assert rest[:-1] == [f"http://prio.example/low{i}" for i in range(1, 300)]


def test_info_backlogs_and_stop_count_the_tails(
    redis_client: redis.Redis, tail_settings: Settings, tmp_path: Path
) -> None:
    _push(redis_client, tail_settings, [f"http://stop.example/p{i}" for i in range(400)], crawlid="s1")
    _push(redis_client, tail_settings, [f"http://keep.example/p{i}" for i in range(120)], crawlid="s2")
    mover = _mover(redis_client, tail_settings)
    _settle(mover)
    reader = FrontierReader.from_settings(redis_client, tail_settings)
    state = reader.crawl_state("link", "app", "s1")
    assert state.pending == 400
    domain = state.domains["stop.example"]
    assert domain.total == 400 and domain.high_priority == 0 and domain.low_priority == 0
    assert reader.spider_backlog("link") == {"stop.example": 400, "keep.example": 120}
    before = len(_segments(tmp_path / "tails"))
    assert before > 0
    assert reader.purge("link", "app", "s1") == 400
    assert reader.crawl_state("link", "app", "s1").pending == 0
    assert _tail_members(redis_client, tail_settings, "stop.example", "s1") == []
    # the stopped crawl's segments are gone from the store, the other crawl's are not
    left = _segments(tmp_path / "tails")
    assert 0 < len(left) < before
    assert reader.crawl_state("link", "app", "s2").pending == 120
    served = _drain(redis_client, tail_settings, mover)
    assert sorted(served) == sorted(f"http://keep.example/p{i}" for i in range(120))
    assert _segments(tmp_path / "tails") == []


def test_a_domain_not_due_soon_keeps_no_head(redis_client: redis.Redis, tail_settings: Settings) -> None:
    settings = tail_settings.copy_with(FRONTIER_HOT_DOMAINS=2)
    domains = [f"d{i:02d}.example" for i in range(12)]
    urls = [f"http://{d}/p{i}" for d in domains for i in range(10)]
    _push(redis_client, settings, urls)
    mover = _mover(redis_client, settings)
    _settle(mover)
    keys = keys_from_settings(settings)
    in_redis = {d: redis_client.zcard(keys.crawl_queue("link", "app", "t1", d)) for d in domains}
    # with one shard, the two domains served first (d00, d01: equal due times, then by name) keep
    # their ten requests; every other queue is all tail
    if keys.shards == 1:
        assert in_redis["d00.example"] == 10 and in_redis["d01.example"] == 10
        assert all(in_redis[d] == 0 for d in domains[2:])
    assert sum(1 for d in domains if in_redis[d] == 0) >= len(domains) - 2 * keys.shards
    served = _drain(redis_client, settings, mover)
    assert sorted(served) == sorted(urls)


def test_a_spill_interrupted_anywhere_loses_nothing_and_serves_nothing_twice(
    redis_client: redis.Redis, tail_settings: Settings, tmp_path: Path
) -> None:
    urls = [f"http://crash.example/p{i}" for i in range(200)]
    _push(redis_client, tail_settings, urls)
    keys = keys_from_settings(tail_settings)
    queue = keys.crawl_queue("link", "app", "t1", "crash.example")
    store = TailStore.from_settings(tail_settings)
    assert store is not None

    # killed after its segment is written, before the script: an orphan object, all still in Redis
    class KilledAfterWrite(TailStore):
        def write_many(self, objects: list[tuple[str, bytes]]) -> None:
            super().write_many(objects)
            raise SystemExit("killed")

    mover = _mover(redis_client, tail_settings)
    mover.store = KilledAfterWrite(str(tmp_path / "tails"), tail_settings.REDIS_KEY_PREFIX)
    with pytest.raises(SystemExit):
        mover.spill(queue)
    assert redis_client.zcard(queue) == 200
    assert len(_segments(tmp_path / "tails")) == 1  # the orphan: no pointer names it
    assert _tail_members(redis_client, tail_settings, "crash.example") == []

    # a pop between the spill's read and its script: the segment is dropped, nothing moved
    class PopDuringWrite(TailStore):
        def write_many(self, objects: list[tuple[str, bytes]]) -> None:
            super().write_many(objects)
            redis_client.zrem(queue, redis_client.zrange(queue, 20, 20)[0])  # one of the rows read

    mover = _mover(redis_client, tail_settings)
    mover.store = PopDuringWrite(str(tmp_path / "tails"), tail_settings.REDIS_KEY_PREFIX)
    assert mover.spill(queue) == 0
    assert mover.counts.aborted == 1
    assert redis_client.zcard(queue) == 199
    assert _tail_members(redis_client, tail_settings, "crash.example") == []
    urls.remove(urls[20])

    # a clean spill, then the rest served: every request once
    mover = _mover(redis_client, tail_settings)
    assert mover.spill(queue) == 179
    live = {parse_tail_member(m)[0] for m in _tail_members(redis_client, tail_settings, "crash.example")}
    shard = keys.shard_of("crash.example")
    # the sweep deletes the orphan (and the aborted spill's object, already gone), never a live segment
    assert mover.sweep(shard, older_than_s=0) == 1
    assert {p.name.removesuffix(".seg") for p in _segments(tmp_path / "tails")} == live
    served = _drain(redis_client, tail_settings, mover)
    assert served == urls


def test_a_refill_interrupted_anywhere_loses_nothing_and_serves_nothing_twice(
    redis_client: redis.Redis, tail_settings: Settings, tmp_path: Path
) -> None:
    urls = [f"http://refill.example/p{i}" for i in range(200)]
    _push(redis_client, tail_settings, urls)
    keys = keys_from_settings(tail_settings)
    queue = keys.crawl_queue("link", "app", "t1", "refill.example")
    mover = _mover(redis_client, tail_settings)
    _settle(mover)
    leaser = _leaser(redis_client, tail_settings)
    served = []
    for _ in range(15):  # the head runs short: the pop asks for a refill
        lease = leaser.pop("link").lease
        assert lease is not None
        served.append(lease.request.url)
        leaser.ack(lease)
    assert redis_client.zcard(keys.tail_refill_wanted(keys.shard_of("refill.example"))) == 1

    # killed after reading the segment, before the script: the pointer stays, the next refill does it
    class KilledAfterRead(TailStore):
        def read_many(self, paths: list[str]) -> list[bytes | None]:
            super().read_many(paths)
            raise SystemExit("killed")

    crashing = _mover(redis_client, tail_settings)
    crashing.store = KilledAfterRead(str(tmp_path / "tails"), tail_settings.REDIS_KEY_PREFIX)
    with pytest.raises(SystemExit):
        crashing.refill(queue)
    assert redis_client.zcard(queue) == 5

    # killed after the script, before deleting the object: an orphan, never read again
    class KilledOnDelete(TailStore):
        def delete(self, paths: object) -> None:
            raise SystemExit("killed")

    crashing = _mover(redis_client, tail_settings)
    crashing.store = KilledOnDelete(str(tmp_path / "tails"), tail_settings.REDIS_KEY_PREFIX)
    with pytest.raises(SystemExit):
        crashing.refill(queue)
    assert redis_client.zcard(queue) == 55

    # a second refiller of the same segment (a retry, another monitor) changes nothing
    member = _tail_members(redis_client, tail_settings, "refill.example")[0]
    segment = parse_tail_member(member)[0]
    shard = keys.shard_of("refill.example")
    rows = decode_segment(Path(mover.store.path(shard, segment)).read_bytes())
    refill_args = [member, keys.crawl_member("app", "t1"), "refill.example", *[x for row in rows for x in row]]
    refill_keys = [
        queue,
        keys.tail_queue("link", "app", "t1", "refill.example"),
        keys.domain_crawls("link", "refill.example"),
        keys.domains("link", False, shard),
        keys.crawl_domains("link", "app", "t1", False, shard),
        keys.tail_stats(shard),
        keys.tail_segments_base(shard),
    ]
    assert int(mover.scripts["tail_refill"](keys=refill_keys, args=refill_args)) == 50
    assert int(mover.scripts["tail_refill"](keys=refill_keys, args=refill_args)) == -1
    served += _drain(redis_client, tail_settings, mover)
    assert served == urls
    # left in the store: the segment the killed refill put back (no pointer names it) and the one the
    # script call above refilled without deleting; every other segment was deleted once refilled
    assert len(_segments(tmp_path / "tails")) == 2
    # the sweep leaves young objects (a spill may be between its write and its script), then
    # deletes those no pointer names
    assert mover.sweep(shard) == 0
    assert mover.sweep(shard, older_than_s=0) == 2
    assert _segments(tmp_path / "tails") == []


def test_the_store_down_keeps_heads_served_and_bounds_what_waits(
    redis_client: redis.Redis, tail_settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the store's folder should be")
    settings = tail_settings.copy_with(FRONTIER_TAIL_URL=str(blocked / "tails"), FRONTIER_TAIL_BACKLOG_MAX=100)
    keys = keys_from_settings(settings)
    urls = [f"http://down.example/p{i}" for i in range(300)]
    _push(redis_client, settings, urls)
    mover = _mover(redis_client, settings)
    caplog.set_level(logging.WARNING)
    for _ in range(3):
        _settle(mover)
        for shard in range(keys.shards):  # the retry is due again
            wanted = keys.tail_spill_wanted(shard)
            flags = redis_client.zrange(wanted, 0, -1)
            if flags:
                redis_client.zadd(wanted, dict.fromkeys(flags, 0))
    _settle(mover)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "FRONTIER_TAIL_URL" in warnings[0].getMessage()
    queue = keys.crawl_queue("link", "app", "t1", "down.example")
    assert redis_client.zcard(queue) == 300  # nothing left Redis
    assert int(redis_client.hget(keys.tail_stats(keys.shard_of("down.example")), "waiting")) == 280
    assert b"FRONTIER_TAIL_URL" in (redis_client.get(keys.tail_full()) or b"")
    # heads are still served
    leaser = _leaser(redis_client, settings)
    lease = leaser.pop("link").lease
    assert lease is not None and lease.request.url == urls[0]
    leaser.ack(lease)
    # the store answers again: the next spill goes through and the bound is lifted
    blocked.unlink()
    redis_client.zadd(keys.tail_spill_wanted(keys.shard_of("down.example")), {queue: 0})
    _settle(mover)
    assert redis_client.zcard(queue) == 20
    assert redis_client.get(keys.tail_full()) is None
    assert int(redis_client.hget(keys.tail_stats(keys.shard_of("down.example")), "waiting")) == 0
    assert _drain(redis_client, settings, mover) == urls[1:]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert os.listdir(blocked / "tails") is not None


def _small_cold_queue(
    client: redis.Redis, tail_settings: Settings
) -> tuple[Settings, Keys, list[str], list[str], TailMover, str, str]:
    """Three requests of a hot domain and three of a cold one pushed: the settings, keys, both URL
    lists, a mover, the cold queue's key and its shard's spill flags. One hot domain with one shard
    (a-hot, due first); with shards each keeps a share of at least one, which would make z-cold hot
    in its shard: none hot then."""
    shards = keys_from_settings(tail_settings).shards
    settings = tail_settings.copy_with(FRONTIER_HOT_DOMAINS=1 if shards == 1 else 0)
    keys = keys_from_settings(settings)
    hot = [f"http://a-hot.example/p{i}" for i in range(3)]
    cold = [f"http://z-cold.example/p{i}" for i in range(3)]
    _push(client, settings, hot + cold)
    queue = keys.crawl_queue("link", "app", "t1", "z-cold.example")
    wanted = keys.tail_spill_wanted(keys.shard_of("z-cold.example"))
    return settings, keys, hot, cold, _mover(client, settings), queue, wanted


def test_a_small_cold_queue_waits_a_minute_then_spills_whole(
    redis_client: redis.Redis, tail_settings: Settings
) -> None:
    """A cold queue under COLD_SPILL_MIN keeps its flag for COLD_WAIT_S after it was raised (links
    arriving one by one make one segment), then spills whatever it holds: no remainder stays in
    Redis, where a zset of a few requests costs more than a kilobyte."""
    settings, keys, hot, cold, mover, queue, wanted = _small_cold_queue(redis_client, tail_settings)
    flagged_at = redis_client.zscore(wanted, queue)
    assert flagged_at is not None
    _settle(mover)
    # not spilled yet, its flag kept for a minute after it was raised (to the next whole second)
    assert redis_client.zcard(queue) == 3
    put_off = redis_client.zscore(wanted, queue)
    assert put_off is not None and put_off.is_integer() and 0 <= put_off - (flagged_at + COLD_WAIT_S) < 1
    # a minute later, that flag come due: all three go, in one segment
    assert mover.spill(queue, put_off) == 3
    assert redis_client.zcard(queue) == 0
    assert [parse_tail_member(m)[1] for m in _tail_members(redis_client, settings, "z-cold.example")] == [3]
    if keys.shards == 1:  # the hot domain's queue keeps its head
        assert redis_client.zcard(keys.crawl_queue("link", "app", "t1", "a-hot.example")) == 3
    assert sorted(_drain(redis_client, settings, mover)) == sorted(hot + cold)


def test_a_small_cold_queue_spills_when_its_put_off_flag_comes_due(
    redis_client: redis.Redis, tail_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the mover's own passes (COLD_WAIT_S made 1 s): the put-off flag, once due, spills
    the queue. Before, the pass took the put-off flag's score for a new flag and put it off again,
    for ever: a cold queue of a few requests never left Redis (and bench/tails.py's broad crawl
    never settled)."""
    monkeypatch.setattr(tail_mover, "COLD_WAIT_S", 1.0)
    settings, keys, hot, cold, mover, queue, wanted = _small_cold_queue(redis_client, tail_settings)
    shard = keys.shard_of("z-cold.example")
    deadline = time.monotonic() + 10
    while redis_client.zcard(queue):
        assert time.monotonic() < deadline, ("never spilled", redis_client.zscore(wanted, queue))
        mover.run_once(shard)
        time.sleep(0.1)
    assert [parse_tail_member(m)[1] for m in _tail_members(redis_client, settings, "z-cold.example")] == [3]
    assert redis_client.zscore(wanted, queue) is None
    assert sorted(_drain(redis_client, settings, mover)) == sorted(hot + cold)


def test_a_small_cold_queue_that_grows_spills_at_once(redis_client: redis.Redis, tail_settings: Settings) -> None:
    """A cold queue whose flag was put off (under COLD_SPILL_MIN) and that then grows to
    COLD_SPILL_MIN or more spills at the next push's flag, not when the minute is up. Before, the
    put-off flag kept its later score against the pushes' flags (``NX``): a crawl of 10 hosts that
    finished within the minute spilled nothing (CI saw it in the chaos test)."""
    settings, keys, hot, cold, mover, queue, wanted = _small_cold_queue(redis_client, tail_settings)
    _settle(mover)
    put_off = redis_client.zscore(wanted, queue)
    assert redis_client.zcard(queue) == 3 and put_off is not None and put_off > time.time() + COLD_WAIT_S / 2
    more = [f"http://z-cold.example/q{i}" for i in range(COLD_SPILL_MIN)]
    _push(redis_client, settings, more)  # a later push (another Frontier: its own flag clock)
    flagged = redis_client.zscore(wanted, queue)
    assert flagged is not None and flagged <= time.time()
    _settle(mover)
    assert redis_client.zcard(queue) == 0  # cold: all of it in the tail
    assert sum(parse_tail_member(m)[1] for m in _tail_members(redis_client, settings, "z-cold.example")) == 3 + len(
        more
    )
    assert redis_client.zscore(wanted, queue) is None
    assert sorted(_drain(redis_client, settings, mover)) == sorted(hot + cold + more)


def test_small_spills_of_a_queue_grow_its_last_segment(
    redis_client: redis.Redis, tail_settings: Settings, tmp_path: Path
) -> None:
    """A cold queue spilled 10 requests at a time (its links arriving between the mover's passes)
    keeps one pointer per segment of at least half FRONTIER_SEGMENT_SIZE (50), not one per spill:
    each spill rewrites the tail's last segment while it holds fewer than 25 and the rows fit; the
    replaced objects are deleted, the stats count what the pointers hold, every request is served
    once and in order."""
    settings = tail_settings.copy_with(FRONTIER_HOT_DOMAINS=0)  # every domain cold: spilled whole
    keys = keys_from_settings(settings)
    shard = keys.shard_of("grow.example")
    mover = _mover(redis_client, settings)
    urls: list[str] = []
    for spill in range(6):
        more = [f"http://grow.example/s{spill}p{i}" for i in range(10)]
        _push(redis_client, settings, more)
        urls += more
        _settle(mover)
    # 10 -> 20 -> 30 (merged twice), then 10 -> 20 -> 30 again: two segments of 30
    assert sorted(parse_tail_member(m)[1] for m in _tail_members(redis_client, settings, "grow.example")) == [30, 30]
    assert mover.counts.merged == 4 and mover.counts.spilled == 60
    live = {parse_tail_member(m)[0] for m in _tail_members(redis_client, settings, "grow.example")}
    assert {p.name.removesuffix(".seg") for p in _segments(tmp_path / "tails")} == live  # replaced ones deleted
    stats = redis_client.hgetall(keys.tail_stats(shard))
    assert int(stats[b"requests"]) == 60 and int(stats[b"segments"]) == 2
    assert int(stats[b"bytes"]) == sum(
        parse_tail_member(m)[2] for m in _tail_members(redis_client, settings, "grow.example")
    )
    assert _drain(redis_client, settings, mover) == urls
    stats = redis_client.hgetall(keys.tail_stats(shard))
    assert int(stats[b"requests"]) == 0 and int(stats[b"segments"]) == 0 and int(stats[b"bytes"]) == 0


def test_a_refill_during_a_merge_wins_and_nothing_is_lost(
    redis_client: redis.Redis, tail_settings: Settings, tmp_path: Path
) -> None:
    """A refill (another redis-monitor) takes the small last segment between a merging spill's read
    of it and its script: the script finds the pointer gone and moves nothing (its new object is
    deleted), the refilled requests are in the head, the next spill makes a segment of its own;
    then every request is served once. A kill between the merged segment's write and its script
    leaves the old segment in place and an orphan the sweep deletes."""
    settings = tail_settings.copy_with(FRONTIER_HOT_DOMAINS=0)
    keys = keys_from_settings(settings)
    queue = keys.crawl_queue("link", "app", "t1", "race.example")
    first = [f"http://race.example/a{i}" for i in range(10)]
    _push(redis_client, settings, first)
    _settle(_mover(redis_client, settings))
    assert [parse_tail_member(m)[1] for m in _tail_members(redis_client, settings, "race.example")] == [10]

    class KilledAfterWrite(TailStore):
        def write_many(self, objects: list[tuple[str, bytes]]) -> None:
            super().write_many(objects)
            raise SystemExit("killed")

    second = [f"http://race.example/b{i}" for i in range(10)]
    _push(redis_client, settings, second)
    killed = _mover(redis_client, settings)
    killed.store = KilledAfterWrite(str(tmp_path / "tails"), settings.REDIS_KEY_PREFIX)
    with pytest.raises(SystemExit):
        killed.spill(queue)
    assert redis_client.zcard(queue) == 10  # still in Redis, the old segment still named
    assert [parse_tail_member(m)[1] for m in _tail_members(redis_client, settings, "race.example")] == [10]
    assert len(_segments(tmp_path / "tails")) == 2  # the old one and the orphan

    other = _mover(redis_client, settings)

    class RefillDuringWrite(TailStore):
        def write_many(self, objects: list[tuple[str, bytes]]) -> None:
            super().write_many(objects)
            other.refill(queue)  # takes the small segment the merge read

    mover = _mover(redis_client, settings)
    mover.store = RefillDuringWrite(str(tmp_path / "tails"), settings.REDIS_KEY_PREFIX)
    assert mover.spill(queue) == 0 and mover.counts.aborted == 1 and mover.counts.merged == 0
    assert redis_client.zcard(queue) == 20  # the refilled ten and the ten the spill left
    assert _tail_members(redis_client, settings, "race.example") == []
    assert mover.sweep(keys.shard_of("race.example"), older_than_s=0) == 1  # the orphan of the kill
    assert _segments(tmp_path / "tails") == []
    assert sorted(_drain(redis_client, settings, _mover(redis_client, settings))) == sorted(first + second)


def test_one_pass_spills_and_refills_many_queues_together(
    redis_client: redis.Redis, tail_settings: Settings, tmp_path: Path
) -> None:
    """A broad crawl's many queues are worked as one batch a pass (a segment of each per round):
    long queues over several rounds, small cold ones in one, a queue that changed under the batch
    left whole in Redis while the others go; every request is then served once, each domain's in
    order, and one refill pass fills many short heads."""
    settings = tail_settings.copy_with(FRONTIER_HOT_DOMAINS=0)  # every domain cold: no heads kept
    keys = keys_from_settings(settings)
    domains = [f"d{n:02d}.example" for n in range(40)]
    urls = {d: [f"http://{d}/p{i}" for i in range(10 if n % 4 else 120)] for n, d in enumerate(domains)}
    _push(redis_client, settings, [u for d in domains for u in urls[d]])
    queues = {d: keys.crawl_queue("link", "app", "t1", d) for d in domains}
    changed = domains[1]

    class PopDuringWrite(TailStore):
        def write_many(self, objects: list[tuple[str, bytes]]) -> None:
            super().write_many(objects)
            mine = f"{self.root}/{keys.shard_of(changed)}/"  # a batch of its shard's queues
            if objects[0][0].startswith(mine) and redis_client.zcard(queues[changed]) == 10:
                # a pop of one request the batch read
                redis_client.zrem(queues[changed], redis_client.zrange(queues[changed], 3, 3)[0])

    mover = _mover(redis_client, settings)
    mover.store = PopDuringWrite(str(tmp_path / "tails"), settings.REDIS_KEY_PREFIX)
    passes = 0
    while sum(mover.run_once(shard) for shard in range(keys.shards)):
        passes += 1
    assert passes <= keys.shards  # 40 flags: one pass of each shard took them all
    assert mover.counts.aborted == 1
    assert redis_client.zcard(queues[changed]) == 9  # nothing of it moved
    for n, domain in enumerate(domains):
        if domain != changed:
            assert redis_client.zcard(queues[domain]) == 0, domain
            counts = [parse_tail_member(m)[1] for m in _tail_members(redis_client, settings, domain)]
            assert counts == ([10] if n % 4 else [50, 50, 20]), domain
    assert mover.counts.spilled == 10 * 29 + 120 * 10
    # the live-segment index: 128 ids a key, each a compact list (about 30 bytes a segment, not 100)
    index = [k for shard in range(keys.shards) for k in redis_client.scan_iter(f"{keys.tail_segments_base(shard)}:*")]
    assert sum(redis_client.zcard(k) for k in index) == mover.counts.segments_written == 59
    assert {redis_client.object("encoding", k) for k in index} <= {b"listpack", b"ziplist"}

    # the pops find empty heads and ask for refills; one pass of the mover serves them all
    mover.store = TailStore(str(tmp_path / "tails"), settings.REDIS_KEY_PREFIX)
    shard_flags = {
        shard: {q: 0 for d, q in queues.items() if d != changed and keys.shard_of(d) == shard}
        for shard in range(keys.shards)
    }
    for shard, flags in shard_flags.items():
        if flags:
            redis_client.zadd(keys.tail_refill_wanted(shard), flags)
    for shard in range(keys.shards):
        mover.run_once(shard)
    for n, domain in enumerate(domains):
        if domain != changed:  # each head holds at least half of FRONTIER_HEAD_SIZE again
            assert redis_client.zcard(queues[domain]) == (10 if n % 4 else 50), domain
    served = _drain(redis_client, settings, mover)
    assert sorted(served) == sorted(u for d in domains for u in urls[d] if u != f"http://{changed}/p3")
    for domain in domains:
        mine = [u for u in served if f"//{domain}/" in u]
        assert mine == [u for u in urls[domain] if u in mine], domain


def test_segments_indexed_before_the_buckets_stay_live(
    redis_client: redis.Redis, tail_settings: Settings, tmp_path: Path
) -> None:
    """A cluster upgraded with tails in its store: a segment the earlier release listed in its one
    index zset (the buckets' base key) is not swept as an orphan, and its refill removes it there."""
    urls = [f"http://upgrade.example/p{i}" for i in range(100)]
    _push(redis_client, tail_settings, urls)
    keys = keys_from_settings(tail_settings)
    shard = keys.shard_of("upgrade.example")
    mover = _mover(redis_client, tail_settings)
    _settle(mover)
    segments = [parse_tail_member(m)[0] for m in _tail_members(redis_client, tail_settings, "upgrade.example")]
    assert segments
    for segment in segments:  # as the earlier release indexed them
        bucket = keys.tail_segments(shard, bucket=keys.tail_segment_bucket(segment))
        score = redis_client.zscore(bucket, segment)
        assert score is not None
        redis_client.zrem(bucket, segment)
        redis_client.zadd(keys.tail_segments_base(shard), {segment: score})
    assert mover.sweep(shard, older_than_s=0) == 0
    assert len(_segments(tmp_path / "tails")) == len(segments)
    assert _drain(redis_client, tail_settings, mover) == urls
    assert redis_client.zcard(keys.tail_segments_base(shard)) == 0
    assert _segments(tmp_path / "tails") == []
