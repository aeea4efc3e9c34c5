"""The redis-monitor against a real Redis and a real broker: the exact answers of info, stop and
expire for hand-seeded state; exactly-once with two monitors; complete events; lease reclaim.
(Stats, domain-config, failing requests, takeover and backends going away: test_redis_monitor_stats.py.)"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from support.redis_monitor import (
    Topic,
    by_uuid,
    dead_letters,
    keys,
    outbound,
    push,
    req,
    rm_settings,
    running,
    submit,
    without_time,
    worker,
)

from crawlhive.redis_monitor.monitor import RedisMonitor
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import FrontierReader, FrontierRequest
from crawlhive.utils.state.control import CONTROL_GROUP
from crawlhive.utils.state.heartbeat import Heartbeat
from crawlhive.utils.state.stats import Stats, failed_counter_name

# the fixtures imported from support.redis_monitor: pytest finds them here
__all__ = ["dead_letters", "keys", "outbound", "rm_settings", "running"]


# --- info ------------------------------------------------------------------------------------------


def test_info_by_crawlid_and_by_appid_have_the_exact_shapes(
    rm_settings: Settings, redis_client: redis.Redis, keys: Keys, outbound: Topic, running: Callable[..., RedisMonitor]
) -> None:
    expires = int(time.time()) + 3600
    push(
        redis_client,
        rm_settings,
        req("http://example.com/a", priority=5, expires=expires),
        req("http://example.com/b", priority=-9),
        req("http://www.example.com/c", priority=1),
        req("http://other.org/", priority=-9),
        req("http://example.com/x", crawlid="c2", priority=1),
        req("http://example.com/y", crawlid="c2", priority=7),
    )
    w = worker(redis_client, keys)
    leased = [w.pop("link").lease for _ in range(2)]  # one of each domain or crawl, in flight
    assert all(leased)
    w.ack(leased[0], "crawled")  # type: ignore[arg-type]
    state = FrontierReader.from_settings(redis_client, rm_settings)
    c1, c2 = state.crawl_state("link", "testapp", "c1"), state.crawl_state("link", "testapp", "c2")

    def domains(s: Any) -> dict[str, Any]:
        return {
            d: {"total": b.total, "high_priority": b.high_priority, "low_priority": b.low_priority}
            for d, b in s.domains.items()
        }

    submit(
        redis_client,
        rm_settings,
        "action",
        {"action": "info", "appid": "testapp", "crawlid": "c1", "spiderid": "link", "uuid": "by-crawl"},
        {"action": "info", "appid": "testapp", "spiderid": "link", "uuid": "by-app"},
        {"action": "info", "appid": "testapp", "crawlid": "nope", "spiderid": "link", "uuid": "unknown"},
        {"action": "info", "appid": "nobody", "spiderid": "link", "uuid": "unknown-app"},
    )
    running(rm_settings)
    answers = by_uuid(outbound.wait_for(4))
    assert answers["by-crawl"] == {
        "uuid": "by-crawl",
        "appid": "testapp",
        "crawlid": "c1",
        "spiderid": "link",
        "total_pending": c1.pending,
        "total_domains": len(c1.domains),
        "domains": domains(c1),
        "expires": str(expires),
        "total_inflight": c1.inflight,
        "total_crawled": c1.crawled,
        "total_failed": 0,
        "max_pages": rm_settings.CRAWL_MAX_PAGES_DEFAULT,  # every crawl has a budget (§10.7)
        "total_admitted": 0,  # pushed here, never admitted by a crawler
    }
    # The frontier state behind it, as seeded: 4 queued in c1 minus what was popped from it.
    assert c1.pending + c2.pending == 4 and c1.inflight + c2.inflight == 1 and c1.crawled + c2.crawled == 1
    assert set(c1.domains) <= {"example.com", "other.org"}
    assert answers["by-app"] == {
        "uuid": "by-app",
        "appid": "testapp",
        "spiderid": "link",
        "total_pending": 4,
        "total_crawlids": 2,
        "total_domains": len(set(c1.domains) | set(c2.domains)),
        "crawlids": {
            "c1": {
                "total": c1.pending,
                "distinct_domains": len(c1.domains),
                "expires": expires,
                "domains": domains(c1),
                "total_inflight": c1.inflight,
                "total_crawled": c1.crawled,
                "total_failed": 0,
            },
            "c2": {
                "total": c2.pending,
                "distinct_domains": len(c2.domains),
                "domains": domains(c2),
                "total_inflight": c2.inflight,
                "total_crawled": c2.crawled,
                "total_failed": 0,
            },
        },
        "total_inflight": 1,
        "total_crawled": 1,
        "total_failed": 0,
    }
    assert answers["unknown"] == {
        "uuid": "unknown",
        "appid": "testapp",
        "crawlid": "nope",
        "spiderid": "link",
        "total_pending": 0,
        "total_domains": 0,
        "domains": {},
        "total_inflight": 0,
        "total_crawled": 0,
        "total_failed": 0,
    }
    assert answers["unknown-app"] == {
        "uuid": "unknown-app",
        "appid": "nobody",
        "spiderid": "link",
        "total_pending": 0,
        "total_crawlids": 0,
        "total_domains": 0,
        "crawlids": {},
        "total_inflight": 0,
        "total_crawled": 0,
        "total_failed": 0,
    }
    # Answered entries are deleted, just after the broker acknowledged the answer (which the test
    # may read first).
    deadline = time.monotonic() + 5
    while redis_client.xlen(keys.control_stream()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert redis_client.xlen(keys.control_stream()) == 0


def test_info_shows_the_page_budget_that_holds(
    rm_settings: Settings, redis_client: redis.Redis, outbound: Topic, running: Callable[..., RedisMonitor]
) -> None:
    """docs/contract.md §10.7: ``max_pages`` of the request, or CRAWL_MAX_PAGES_DEFAULT, the smaller."""
    push(
        redis_client,
        rm_settings,
        req("http://example.com/a", crawlid="b1", max_pages=50),
        req("http://example.com/b", crawlid="b2", max_pages=10),
        req("http://example.com/c", crawlid="b3"),
    )
    submit(
        redis_client,
        rm_settings,
        "action",
        *[
            {"action": "info", "appid": "testapp", "crawlid": c, "spiderid": "link", "uuid": f"budget-{c}"}
            for c in ("b1", "b2", "b3")
        ],
    )
    running(rm_settings.copy_with(CRAWL_MAX_PAGES_DEFAULT=20))
    answers = by_uuid(outbound.wait_for(3))
    assert [answers[f"budget-{c}"].get("max_pages") for c in ("b1", "b2", "b3")] == [20, 10, 20]


def test_info_priorities_are_request_priorities(
    rm_settings: Settings, redis_client: redis.Redis, outbound: Topic, running: Callable[..., RedisMonitor]
) -> None:
    push(
        redis_client,
        rm_settings,
        req("http://example.com/a", priority=5),
        req("http://example.com/b", priority=-9),
        req("http://other.org/", priority=-19),
    )
    submit(
        redis_client,
        rm_settings,
        "action",
        {"action": "info", "appid": "testapp", "crawlid": "c1", "spiderid": "link", "uuid": "i"},
    )
    running(rm_settings)
    (answer,) = outbound.wait_for(1)
    assert answer["domains"] == {
        "example.com": {"total": 2, "high_priority": 5, "low_priority": -9},
        "other.org": {"total": 1, "high_priority": -19, "low_priority": -19},
    }
    assert answer["total_pending"] == 3 and answer["total_domains"] == 2 and "expires" not in answer


def test_two_monitors_answer_20_info_requests_exactly_once(
    rm_settings: Settings, redis_client: redis.Redis, outbound: Topic, running: Callable[..., RedisMonitor]
) -> None:
    push(redis_client, rm_settings, req("http://example.com/"))
    monitors = [running(rm_settings), running(rm_settings)]
    time.sleep(0.5)  # both are reading the stream
    requests = [
        {"action": "info", "appid": "testapp", "crawlid": "c1", "spiderid": "link", "uuid": f"u{i}"} for i in range(20)
    ]
    for request in requests:  # one at a time, so both monitors get some
        submit(redis_client, rm_settings, "action", request)
    try:
        outbound.wait_for(20, where=lambda m: "uuid" in m)
    except AssertionError:  # seen once in CI (19 of 20): which side lost it, Redis or Kafka?
        raise AssertionError(control_report(redis_client, rm_settings, monitors)) from None
    messages = [m for m in outbound.settle(2.0) if "uuid" in m]
    assert sorted(m["uuid"] for m in messages) == sorted(f"u{i}" for i in range(20))


def control_report(client: redis.Redis, settings: Settings, monitors: list[RedisMonitor]) -> str:
    """Where unanswered control entries are: still in the stream (pending with which monitor, idle
    how long, delivered how often) and held by a monitor (its retry time), or gone from the stream
    (answered and acknowledged: then Kafka did not deliver the answer)."""
    keys = keys_from_settings(settings)
    stream = keys.control_stream()
    entries = [(i.decode(), {k.decode(): v.decode() for k, v in f.items()}) for i, f in client.xrange(stream)]
    pending = client.xpending_range(stream, CONTROL_GROUP, "-", "+", 100)
    held = {m.node_id: {i: h.retry_at for i, h in m._held.items()} for m in monitors}
    return f"stream: {entries}\npending: {pending}\nheld by the monitors: {held}"


# --- stop ------------------------------------------------------------------------------------------


def test_stop_removes_exactly_that_crawls_work_then_complete_follows(
    rm_settings: Settings, redis_client: redis.Redis, keys: Keys, outbound: Topic, running: Callable[..., RedisMonitor]
) -> None:
    push(
        redis_client,
        rm_settings,
        *[req(f"http://example.com/{i}") for i in range(5)],
        *[req(f"http://other.org/{i}") for i in range(3)],
        *[req(f"http://example.com/k{i}", crawlid="keep") for i in range(4)],
        req("http://example.com/o", appid="otherapp"),
    )
    push(redis_client, rm_settings, req("http://example.com/e", expires=int(time.time()) + 3600))
    w = worker(redis_client, keys)
    taken = []
    while len([t for t in taken if t.request.crawlid == "c1" and t.request.appid == "testapp"]) < 2:
        outcome = w.pop("link")
        assert outcome.lease is not None
        taken.append(outcome.lease)
    reader = FrontierReader.from_settings(redis_client, rm_settings)
    before = reader.crawl_state("link", "testapp", "c1")
    keep_before = reader.crawl_state("link", "testapp", "keep")
    other_before = reader.crawl_state("link", "otherapp", "c1")

    submit(
        redis_client,
        rm_settings,
        "action",
        {"action": "stop", "appid": "testapp", "crawlid": "c1", "spiderid": "link", "uuid": "s1"},
        {"action": "stop", "appid": "testapp", "crawlid": "ghost", "spiderid": "link", "uuid": "s2"},
    )
    running(rm_settings)
    answers = by_uuid(outbound.wait_for(2, where=lambda m: "uuid" in m))
    assert answers["s1"] == {
        "action": "stop",
        "appid": "testapp",
        "crawlid": "c1",
        "spiderid": "link",
        "total_purged": before.pending,
        "uuid": "s1",
    }
    assert before.pending == 9 - 2
    assert answers["s2"] == {
        "action": "stop",
        "appid": "testapp",
        "crawlid": "ghost",
        "spiderid": "link",
        "total_purged": 0,
        "uuid": "s2",
    }
    after = reader.crawl_state("link", "testapp", "c1")
    assert after.pending == 0 and after.inflight == 0 and after.expires == 0
    assert redis_client.exists(keys.crawl_stopped("link", "testapp", "c1"))
    assert redis_client.zscore(keys.expiries(), keys.crawl_ref("link", "testapp", "c1")) is None
    c1_leases = [t for t in taken if t.request.crawlid == "c1" and t.request.appid == "testapp"]
    assert all(redis_client.zscore(keys.leases("link"), t.member) is None for t in c1_leases)
    assert all(not w.ack(t, "crawled") for t in c1_leases)  # cancelled: a late ack counts nothing
    # Other crawls are untouched (same domains, same appid, same crawlid of another appid).
    keep_after = reader.crawl_state("link", "testapp", "keep")
    other_after = reader.crawl_state("link", "otherapp", "c1")
    assert (keep_after.domains, keep_after.inflight) == (keep_before.domains, keep_before.inflight)
    assert (other_after.domains, other_after.inflight) == (other_before.domains, other_before.inflight)
    # Nothing queued and nothing in flight: complete follows, once.
    (done,) = outbound.wait_for(1, where=lambda m: m.get("action") == "complete")
    assert without_time(done) == {
        "action": "complete",
        "appid": "testapp",
        "crawlid": "c1",
        "spiderid": "link",
        "total_crawled": 0,
        "total_failed": 0,
    }
    time.sleep(1.0)
    assert len([m for m in outbound.settle(0.5) if m.get("action") == "complete"]) == 1


# --- expire ----------------------------------------------------------------------------------------


def test_expire_fires_once_promptly_with_two_monitors(
    rm_settings: Settings, redis_client: redis.Redis, keys: Keys, outbound: Topic, running: Callable[..., RedisMonitor]
) -> None:
    expires = int(time.time()) + 2
    push(
        redis_client,
        rm_settings,
        *[req(f"http://example.com/{i}", crawlid="exp", expires=expires) for i in range(3)],
        req("http://example.com/other", crawlid="stay"),
    )
    w = worker(redis_client, keys)
    lease = w.pop("link").lease
    assert lease is not None
    running(rm_settings)
    running(rm_settings)
    (message,) = outbound.wait_for(1, where=lambda m: m.get("action") == "expired")
    arrived = time.time()
    assert expires <= arrived <= expires + 1.5
    reader = FrontierReader.from_settings(redis_client, rm_settings)
    expired_pending = 3 if lease.request.crawlid != "exp" else 2
    assert without_time(message) == {
        "action": "expired",
        "appid": "testapp",
        "crawlid": "exp",
        "spiderid": "link",
        "total_expired": expired_pending,
    }
    assert reader.crawl_state("link", "testapp", "exp").pending == 0
    assert reader.crawl_state("link", "testapp", "stay").pending + (lease.request.crawlid == "stay") == 1
    assert redis_client.exists(keys.crawl_stopped("link", "testapp", "exp"))
    time.sleep(1.0)
    assert len([m for m in outbound.settle(0.5) if m.get("action") == "expired"]) == 1


# --- complete and the lease reaper -----------------------------------------------------------------


def test_complete_arrives_once_after_the_last_page_and_again_after_a_resubmission(
    rm_settings: Settings, redis_client: redis.Redis, keys: Keys, outbound: Topic, running: Callable[..., RedisMonitor]
) -> None:
    running(rm_settings)
    running(rm_settings)
    push(redis_client, rm_settings, req("http://example.com/", crawlid="cc"))
    w = worker(redis_client, keys)
    # The simulated crawler: the seed's page yields two links, queued before the seed is acked.
    seed = w.pop("link").lease
    assert seed is not None
    links = [req(f"http://example.com/l{i}", crawlid="cc", priority=-9) for i in range(2)]
    push(redis_client, rm_settings, *links)
    w.ack(seed, "crawled")
    time.sleep(0.5)
    assert not [m for m in outbound.settle(0.3) if m.get("action") == "complete"]  # work is left
    first = w.pop("link").lease
    second = w.pop("link").lease
    assert first is not None and second is not None
    w.ack(first, "crawled")
    time.sleep(0.5)
    assert not [m for m in outbound.settle(0.3) if m.get("action") == "complete"]  # one in flight
    w.ack(second, "failed")
    last_ack = time.monotonic()
    (done,) = outbound.wait_for(1, where=lambda m: m.get("action") == "complete")
    assert time.monotonic() - last_ack <= 2.0
    assert without_time(done) == {
        "action": "complete",
        "appid": "testapp",
        "crawlid": "cc",
        "spiderid": "link",
        "total_crawled": 2,
        "total_failed": 1,
    }
    assert not redis_client.sismember(keys.active_crawls(), keys.crawl_ref("link", "testapp", "cc"))
    assert not redis_client.sismember(keys.app_crawls("link", "testapp"), "cc")
    # Resubmitting the crawl reactivates it; its next drain completes it again.
    push(redis_client, rm_settings, FrontierRequest("http://example.com/", "testapp", "cc", request_id="again"))
    again = w.pop("link").lease
    assert again is not None
    w.ack(again, "crawled")
    outbound.wait_for(2, where=lambda m: m.get("action") == "complete")
    completes = [m for m in outbound.settle(1.0) if m.get("action") == "complete"]
    assert len(completes) == 2 and completes[1]["total_crawled"] == 3


def test_a_crawl_no_crawler_serves_is_warned_about_once_with_what_to_start(
    rm_settings: Settings,
    redis_client: redis.Redis,
    keys: Keys,
    running: Callable[..., RedisMonitor],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """docs/contract.md §17.6: a crawl for a spider type nobody runs (or sent with render: true and
    no rendering crawler) was accepted and waited forever without a word. The redis-monitor now
    logs one WARNING per such crawl, after two heartbeat intervals, not one per pass."""
    from crawlhive.utils.state.heartbeat import new_node_id

    plain = Heartbeat(redis_client, keys, "crawler", new_node_id(), "worker-1", 60, extra={"spider": "link"})
    plain.beat()
    try:
        with caplog.at_level(logging.WARNING, logger="crawlhive.redis_monitor"):
            running(rm_settings)
            push(redis_client, rm_settings, req("http://a.example/", crawlid="nobody", spiderid="ghost"))
            push(redis_client, rm_settings, req("http://b.example/", crawlid="browser", render=True))
            push(redis_client, rm_settings, req("http://c.example/", crawlid="served"))

            def warnings() -> list[str]:
                return [r.getMessage() for r in caplog.records if r.name.endswith("waiting")]

            deadline = time.monotonic() + 15
            while len(warnings()) < 2:
                assert time.monotonic() < deadline, warnings()
                time.sleep(0.1)
            time.sleep(3.5)  # three more passes: nothing repeated
            assert sorted(warnings()) == [
                "crawl testapp/browser waits: no live rendering crawler serves spider type 'link' (the crawl was "
                "sent with render: true): start one with `crawlhive crawler --spider link --render`",
                "crawl testapp/nobody waits: no live crawler serves spider type 'ghost': start one with "
                "`crawlhive crawler --spider ghost`",
            ]
            record = next(r for r in caplog.records if r.name.endswith("waiting") and "nobody" in r.getMessage())
            assert (record.levelname, record.spiderid, record.appid) == ("WARNING", "ghost", "testapp")  # type: ignore[attr-defined]
    finally:
        plain.stop()


def test_a_killed_crawlers_leases_come_back_and_out_of_retries_become_dead_letters(
    rm_settings: Settings,
    redis_client: redis.Redis,
    keys: Keys,
    outbound: Topic,
    dead_letters: Topic,
    running: Callable[..., RedisMonitor],
) -> None:
    settings = rm_settings.copy_with(RETRY_TIMES=2)
    push(
        redis_client,
        settings,
        req("http://example.com/a", crawlid="k", priority=5),
        req("http://other.org/b", crawlid="k", priority=5, retry_times=2),
    )
    dying = worker(redis_client, keys, lease_s=0.5)  # the crawler that is killed: it never acks
    leases = [dying.pop("link").lease for _ in range(2)]
    assert all(leases)
    running(settings)
    (letter,) = dead_letters.wait_for(1)
    assert without_time(letter) == {
        "stage": "crawl",
        "error": "lease expired",
        "url": "http://other.org/b",
        "appid": "testapp",
        "crawlid": "k",
        "spiderid": "link",
        "retry_times": 2,
    }
    reader = FrontierReader.from_settings(redis_client, settings)
    # Each shard's leases are reclaimed on their own (64 shards on a cluster): the dead letter of
    # one can come before the other's request is queued again.
    deadline = time.monotonic() + 15
    state = reader.crawl_state("link", "testapp", "k")
    while "example.com" not in state.domains and time.monotonic() < deadline:
        time.sleep(0.1)
        state = reader.crawl_state("link", "testapp", "k")
    assert state.domains["example.com"].total == 1 and state.domains["example.com"].high_priority == -5
    assert state.failed == 1 and state.inflight == 0
    assert Stats(redis_client, keys, [900]).read("crawler", failed_counter_name("link"))["lifetime"] == 1
    healthy = worker(redis_client, keys)
    back = healthy.pop("link").lease
    assert back is not None and back.request.url == "http://example.com/a" and back.request.retry_times == 1
    assert not dying.ack(leases[0], "crawled")  # reclaimed: the dead crawler's late ack counts nothing
    healthy.ack(back, "crawled")
    (done,) = outbound.wait_for(1, where=lambda m: m.get("action") == "complete")
    assert (done["total_crawled"], done["total_failed"]) == (1, 1)
