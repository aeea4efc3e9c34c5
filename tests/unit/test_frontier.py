"""The frontier against a real Redis: push, pop-and-lease under the throttle, ack, requeue, purge, info."""

from __future__ import annotations

import dataclasses
import json
import time

import redis

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import (
    PRIORITY_MAX,
    PRIORITY_MIN,
    Frontier,
    FrontierLeaser,
    FrontierReader,
    FrontierRequest,
    ThrottleConfig,
    TouchStatus,
    clamp_priority,
    decode_priority,
    encode_score,
    retried,
)

FAST = ThrottleConfig(hits=1000, window_s=1.0, moderated=False, type_enabled=True, egress_id=None)


def push(frontier: Frontier, *requests: FrontierRequest) -> None:
    pipe = frontier.redis.pipeline(transaction=True)
    frontier.push(list(requests), pipe)
    pipe.execute()


def req(url: str, priority: int = 1, crawlid: str = "c1", appid: str = "app", **kw: object) -> FrontierRequest:
    return FrontierRequest(url=url, appid=appid, crawlid=crawlid, priority=priority, request_id=url, **kw)


def drain(worker: FrontierLeaser, spider: str = "link") -> list[str]:
    urls = []
    while (outcome := worker.pop(spider)).lease is not None:
        urls.append(outcome.lease.request.url)
        assert worker.ack(outcome.lease, "crawled")
    return urls


def test_priority_then_fifo_within_a_domain_and_best_crawl_first(frontier: Frontier, worker: FrontierLeaser) -> None:
    push(
        frontier,
        req("http://a.com/1", 1),
        req("http://a.com/2", 5),
        req("http://a.com/3", 1),
        req("http://a.com/4", 50, crawlid="c2"),
        req("http://a.com/5", -9, crawlid="c2"),
    )
    assert drain(worker) == ["http://a.com/4", "http://a.com/2", "http://a.com/1", "http://a.com/3", "http://a.com/5"]
    assert worker.pop("link").wait_s is None  # nothing queued: the caller waits for the wake channel


def test_fetching_renews_the_crawl_record_however_many_shards(
    frontier: Frontier, worker: FrontierLeaser, redis_client: redis.Redis, keys: Keys
) -> None:
    """A crawl that fetches without queueing links keeps its record (CRAWL_RECORD_TTL after its
    last fetch): with one shard the ack renews it, with several the crawler's finish does."""
    push(frontier, req("http://a.com/1"))
    record = keys.crawl("link", "app", "c1")
    redis_client.expire(record, 100)
    lease = worker.pop("link").lease
    assert lease is not None

    def finish() -> redis.client.Pipeline:  # as the crawler finishes a page: ack, renewal
        pipe = redis_client.pipeline(transaction=True)
        worker.queue_ack(lease, "crawled", pipe)
        frontier.renew_records([lease.request], pipe)
        return pipe

    worker.scripts.execute(finish)
    assert 3500 < redis_client.ttl(record) <= 3600


def test_round_robin_across_domains(frontier: Frontier, worker: FrontierLeaser) -> None:
    push(frontier, *[req(f"http://a.com/{i}") for i in range(3)], *[req(f"http://b.org/{i}") for i in range(3)])
    domains = [u.split("/")[2] for u in drain(worker)]
    assert sorted(domains) == ["a.com"] * 3 + ["b.org"] * 3
    assert all(domains[i] != domains[i + 1] for i in range(5)), domains


def test_spiders_are_separate(frontier: Frontier, worker: FrontierLeaser) -> None:
    push(frontier, req("http://a.com/x", spiderid="wandering"))
    assert worker.pop("link").lease is None
    assert drain(worker, "wandering") == ["http://a.com/x"]


def test_pop_leases_and_ack_counts_once(
    frontier: Frontier, worker: FrontierLeaser, reader: FrontierReader, redis_client: redis.Redis, keys: Keys
) -> None:
    push(frontier, req("http://a.com/1", expires=int(time.time()) + 3600), req("http://b.com/1"))
    lease = worker.pop("link").lease
    assert lease is not None and lease.deadline > time.time() + 25
    assert redis_client.zscore(keys.leases("link", keys.shard_of(lease.request.domain)), lease.member) is not None
    state = reader.crawl_state("link", "app", "c1")
    assert state.inflight == 1 and state.pending == 1
    assert worker.touch(lease) is TouchStatus.RENEWED
    assert worker.ack(lease, "crawled") is True
    assert worker.ack(lease, "crawled") is False  # a second ack changes nothing
    assert worker.touch(lease) is TouchStatus.LOST
    other = worker.pop("link").lease
    assert other is not None and worker.ack(other, "failed")
    state = reader.crawl_state("link", "app", "c1")
    assert (state.inflight, state.crawled, state.failed, state.pending) == (0, 1, 1, 0)
    assert state.expires > time.time()


def test_throttle_limits_pops_and_reports_the_wait(frontier: Frontier, redis_client: redis.Redis, keys: Keys) -> None:
    slow = FrontierLeaser(redis_client, keys, 30, 3600, dataclasses.replace(FAST, hits=2, window_s=2.0))
    push(frontier, *[req(f"http://a.com/{i}") for i in range(5)])
    assert slow.pop("link").lease is not None and slow.pop("link").lease is not None
    third = slow.pop("link")
    assert third.lease is None and third.wait_s is not None and 1.0 < third.wait_s <= 2.0


def test_window_margin_lengthens_the_counted_window(frontier: Frontier, redis_client: redis.Redis, keys: Keys) -> None:
    margined = FrontierLeaser(
        redis_client, keys, 30, 3600, dataclasses.replace(FAST, hits=2, window_s=2.0, margin_s=0.5)
    )
    push(frontier, *[req(f"http://a.com/{i}") for i in range(5)])
    assert margined.pop("link").lease is not None and margined.pop("link").lease is not None
    third = margined.pop("link")
    assert third.lease is None and third.wait_s is not None and 2.0 < third.wait_s <= 2.5
    ttl = redis_client.pttl(keys.throttle_prefix("link", None, keys.shard_of("a.com")) + "a.com")
    assert ttl > 2500  # the hits are kept as long as they are counted


def test_window_margin_comes_from_settings(redis_settings: Settings) -> None:
    assert ThrottleConfig.from_settings(redis_settings).margin_s == 0.1
    assert ThrottleConfig.from_settings(redis_settings.copy_with(QUEUE_WINDOW_MARGIN=0.25)).margin_s == 0.25


def test_moderated_throttle_spaces_pops(frontier: Frontier, redis_client: redis.Redis, keys: Keys) -> None:
    moderated = FrontierLeaser(
        redis_client, keys, 30, 3600, dataclasses.replace(FAST, hits=4, window_s=2.0, moderated=True)
    )
    push(frontier, *[req(f"http://a.com/{i}") for i in range(3)])
    assert moderated.pop("link").lease is not None
    second = moderated.pop("link")
    assert second.lease is None and 0.3 < second.wait_s <= 0.5


def test_domain_config_and_blacklist_apply_live(
    frontier: Frontier, worker: FrontierLeaser, redis_client: redis.Redis, keys: Keys
) -> None:
    push(frontier, *[req(f"http://a.com/{i}") for i in range(4)])
    redis_client.sadd(keys.domain_blacklist(keys.shard_of("a.com")), "a.com")
    out = worker.pop("link")
    assert out.lease is None and out.wait_s is not None and out.wait_s <= 1.0
    redis_client.srem(keys.domain_blacklist(keys.shard_of("a.com")), "a.com")
    redis_client.hset(
        keys.domain_config(keys.shard_of("a.com")), "a.com", json.dumps({"hits": 4, "window": 60, "scale": 0.5})
    )
    time.sleep(1.05)  # the blacklisted domain is re-checked after RECHECK_S
    assert worker.pop("link").lease is not None and worker.pop("link").lease is not None
    assert worker.pop("link").lease is None  # floor(4 * 0.5) = 2 per 60 s
    redis_client.hset(
        keys.domain_config(keys.shard_of("a.com")), "a.com", json.dumps({"hits": 4, "window": 60, "scale": 0.0})
    )
    assert worker.pop("link").lease is None  # scale 0 pauses the domain


def test_requeue_hands_back_and_retries_lower_priority(
    frontier: Frontier, worker: FrontierLeaser, reader: FrontierReader
) -> None:
    push(frontier, req("http://a.com/1", 5), req("http://a.com/2", 1))
    lease = worker.pop("link").lease
    assert lease is not None and lease.request.url == "http://a.com/1"
    assert worker.requeue(lease.member, lease.request)  # graceful shutdown: unchanged
    assert worker.requeue(lease.member, lease.request) is False  # no longer leased
    again = worker.pop("link").lease
    assert again is not None and again.request.url == "http://a.com/1"
    retry = retried(again.request)
    assert (retry.retry_times, retry.priority) == (1, -5)
    assert worker.requeue(again.member, retry)
    state = reader.crawl_state("link", "app", "c1")
    assert state.domains["a.com"].total == 2 and state.domains["a.com"].low_priority == -5
    assert state.inflight == 0
    assert drain(worker) == ["http://a.com/2", "http://a.com/1"]


def test_expired_leases_are_listed(frontier: Frontier, redis_client: redis.Redis, keys: Keys) -> None:
    short = FrontierLeaser(redis_client, keys, 0.2, 3600, FAST)
    push(frontier, req("http://a.com/1"), req("http://a.com/2"))
    first = short.pop("link").lease
    assert first is not None and short.expired_leases("link") == []
    time.sleep(0.3)
    expired = short.expired_leases("link")
    assert [r.url for _, r in expired] == ["http://a.com/1"] and expired[0][0] == first.member


def test_purge_removes_only_that_crawl_and_cancels_its_leases(
    frontier: Frontier, worker: FrontierLeaser, reader: FrontierReader, redis_client: redis.Redis, keys: Keys
) -> None:
    push(
        frontier,
        *[req(f"http://a.com/{i}", expires=int(time.time()) + 99) for i in range(3)],
        *[req(f"http://b.com/{i}") for i in range(2)],
        *[req(f"http://a.com/o{i}", crawlid="other") for i in range(2)],
    )
    lease = worker.pop("link").lease
    assert lease is not None
    mine = lease if lease.request.crawlid == "c1" else None
    assert reader.purge("link", "app", "c1") == (4 if mine else 5)
    state = reader.crawl_state("link", "app", "c1")
    assert state.pending == 0 and state.inflight == 0 and state.expires == 0
    assert redis_client.zcard(keys.expiries()) == 0
    if mine:
        assert worker.touch(mine) is TouchStatus.STOPPED
        assert worker.ack(mine, "crawled") is False
    assert sorted(drain(worker)) == (["http://a.com/o0", "http://a.com/o1"] if mine else ["http://a.com/o1"])
    assert reader.purge("link", "app", "unknown") == 0


def test_crawl_state_reports_domains_with_high_and_low_priority(frontier: Frontier, reader: FrontierReader) -> None:
    push(frontier, req("http://a.com/1", 1), req("http://www.a.com/2", -9), req("http://x.b.org/", 7, expires=42))
    push(frontier, req("http://a.com/9", 3, crawlid="c2"))
    state = reader.crawl_state("link", "app", "c1")
    assert state.pending == 3 and state.expires == 42
    assert {d: (b.total, b.high_priority, b.low_priority) for d, b in state.domains.items()} == {
        "a.com": (2, 1, -9),
        "b.org": (1, 7, 7),
    }
    assert reader.app_crawlids("link", "app") == ["c1", "c2"]
    unknown = reader.crawl_state("link", "app", "nope")
    assert unknown.pending == 0 and unknown.domains == {} and unknown.crawled == 0


def test_redelivered_push_queues_nothing_twice(frontier: Frontier, reader: FrontierReader) -> None:
    batch = [req(f"http://a.com/{i}") for i in range(50)]
    push(frontier, *batch)
    push(frontier, *batch)
    assert reader.crawl_state("link", "app", "c1").pending == 50


def test_ids_with_separators_work_end_to_end(
    frontier: Frontier, worker: FrontierLeaser, reader: FrontierReader
) -> None:
    push(frontier, req("http://[::1]:8080/x", appid="a:p%p", crawlid="c:1"))
    assert reader.crawl_state("link", "a:p%p", "c:1").domains["::1"].total == 1
    assert drain(worker) == ["http://[::1]:8080/x"]
    assert reader.crawl_state("link", "a:p%p", "c:1").crawled == 1


def test_score_encoding_is_exact_and_the_lua_twin_agrees(
    frontier: Frontier, worker: FrontierLeaser, redis_client: redis.Redis, keys: Keys
) -> None:
    for priority in (PRIORITY_MAX, 1, 0, -1, -9, -1000, PRIORITY_MIN):
        for seq in (0, 1, 2**32 - 1, 2**40 + 5):
            score = encode_score(priority, seq)
            assert abs(score) < 2**53 and float(score) == score
            assert decode_priority(float(score)) == priority
    assert clamp_priority(10**9) == PRIORITY_MAX and clamp_priority(-(10**9)) == PRIORITY_MIN
    # utils/backends/lua/lib/score.lua (used by a requeue) computes the score encode_score computes
    for priority in (PRIORITY_MAX, -9, PRIORITY_MIN):
        push(frontier, req("http://example.com/p", priority=priority))
        lease = worker.pop("link").lease
        assert lease is not None and worker.requeue(lease.member, lease.request)
        seq = int(redis_client.get(keys.queue_sequence(keys.shard_of("example.com"))))
        queue = keys.crawl_queue("link", "app", "c1", "example.com")
        assert redis_client.zscore(queue, lease.request.member()) == encode_score(priority, seq)
        assert worker.pop("link").lease is not None  # leave the queue empty for the next priority
        redis_client.delete(keys.crawl_queue("link", "app", "c1", "example.com"))


def test_retry_backoff_doubles_to_its_cap_with_jitter() -> None:
    """docs/contract.md §14: base × 2^(n−1), capped, ±20 %; 0 base = at once."""
    import random

    from crawlhive.utils.frontier import retry_backoff

    rng = random.Random(7)
    for failures, nominal in ((1, 5.0), (2, 10.0), (3, 20.0), (7, 300.0), (60, 300.0), (10_000, 300.0)):
        waits = [retry_backoff(failures, 5.0, 300.0, rng) for _ in range(200)]
        assert all(nominal * 0.8 <= w <= nominal * 1.2 for w in waits), (failures, min(waits), max(waits))
        assert max(waits) - min(waits) > nominal * 0.2  # jittered, not constant
    assert retry_backoff(3, 0.0, 300.0) == 0.0
    assert retry_backoff(0, 5.0, 300.0) == 0.0
