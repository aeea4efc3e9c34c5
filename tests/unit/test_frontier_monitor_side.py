"""The redis-monitor's side of the frontier and its shared contracts: completion scan, expiry
timers, lease reclaim, spider backlog, key prefixes for scripts, stats counter names."""

from __future__ import annotations

import json
import time

import pytest
import redis

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.frontier import (
    Frontier,
    FrontierLeaser,
    FrontierReader,
    FrontierRequest,
    ThrottleConfig,
    reclaim_expired_leases,
)
from crawlhive.utils.state.control import ControlQueue
from crawlhive.utils.state.stats import (
    crawler_counter_name,
    machine_counter_name,
    parse_plugin_counter_name,
    parse_status_counter_name,
    plugin_counter_name,
)

FAST = ThrottleConfig(hits=1000, window_s=1.0, moderated=False, type_enabled=True, egress_id=None)


def push(client: redis.Redis, keys: Keys, *requests: FrontierRequest) -> None:
    pipe = client.pipeline(transaction=True)
    Frontier(client, keys, 3600).push(list(requests), pipe)
    pipe.execute()


def events(client: redis.Redis, keys: Keys) -> list[tuple[str, dict]]:
    return ControlQueue(client, keys).pending()


@pytest.mark.parametrize(("spider", "appid", "crawlid"), [("link", "app", "c1"), ("a:b", "%", ":%3A")])
def test_crawl_ref_prefixes_complete_to_the_real_keys(spider: str, appid: str, crawlid: str) -> None:
    keys = Keys("ch")
    p = keys.crawl_ref_prefixes()
    ref = keys.crawl_ref(spider, appid, crawlid)
    assert p["crawl_domains"] + ref == keys.crawl_domains(spider, appid, crawlid)
    assert p["render_crawl_domains"] + ref == keys.crawl_domains(spider, appid, crawlid, render=True)
    assert p["crawl_leases"] + ref == keys.crawl_leases(spider, appid, crawlid)
    assert p["crawl"] + ref == keys.crawl(spider, appid, crawlid)
    assert p["app_crawls"] + ref.rsplit(":", 1)[0] == keys.app_crawls(spider, appid)


def test_scan_complete_reports_each_finished_crawl_once(
    redis_client: redis.Redis, keys: Keys, reader: FrontierReader
) -> None:
    odd = ("a%b", "c:1")  # ids that need escaping come back unescaped
    push(
        redis_client,
        keys,
        FrontierRequest("http://example.com/", "app", "busy", request_id="1"),
        FrontierRequest("http://example.com/x", odd[0], odd[1], request_id="2"),
    )
    worker = FrontierLeaser(redis_client, keys, 30, 3600, FAST)
    leases = [worker.pop("link").lease for _ in range(2)]
    done = next(lease for lease in leases if lease and lease.request.appid == odd[0])
    assert reader.scan_complete() == (0, 0)  # both in flight
    worker.ack(done, "crawled")
    assert reader.scan_complete() == (0, 1)
    assert reader.scan_complete() == (0, 0)  # once
    (event,) = events(redis_client, keys)
    assert event == (
        "complete",
        {"spiderid": "link", "appid": odd[0], "crawlid": odd[1], "total_crawled": 1, "total_failed": 0},
    )
    assert not redis_client.sismember(keys.app_crawls("link", odd[0]), odd[1])
    assert redis_client.smembers(keys.active_crawls()) == {keys.crawl_ref("link", "app", "busy").encode()}
    assert reader.active_spiders() == {"link"}


def test_fire_expiries_fires_due_timers_once(redis_client: redis.Redis, keys: Keys, reader: FrontierReader) -> None:
    now = int(time.time())
    push(
        redis_client,
        keys,
        FrontierRequest("http://example.com/", "app", "due", request_id="1", expires=now - 1),
        FrontierRequest("http://example.com/", "app", "later", request_id="2", expires=now + 3600),
    )
    assert reader.fire_expiries() == 1
    assert reader.fire_expiries() == 0
    assert events(redis_client, keys) == [
        ("expire", {"spiderid": "link", "appid": "app", "crawlid": "due", "expires": now - 1})
    ]
    assert redis_client.zrange(keys.expiries(), 0, -1) == [keys.crawl_ref("link", "app", "later").encode()]


def test_reclaim_requeues_expired_leases_and_dead_letters_those_out_of_retries(
    redis_client: redis.Redis, keys: Keys, reader: FrontierReader
) -> None:
    push(
        redis_client,
        keys,
        FrontierRequest("http://example.com/a", "app", "c", request_id="1", priority=5),
        FrontierRequest("http://other.org/b", "app", "c", request_id="2", priority=5, retry_times=3),
        FrontierRequest("http://third.net/c", "app", "c", request_id="3", priority=5),
    )
    short = FrontierLeaser(redis_client, keys, 0.2, 3600, FAST)
    leases = [short.pop("link").lease for _ in range(3)]
    renewed = next(lease for lease in leases if lease and lease.request.url == "http://third.net/c")
    time.sleep(0.3)
    FrontierLeaser(redis_client, keys, 30, 3600, FAST).touch(renewed)  # alive again: kept
    result = reclaim_expired_leases(short, "link", max_retries=3)
    assert (result.requeued, result.failed) == (1, 1)
    assert reclaim_expired_leases(short, "link", max_retries=3).requeued == 0  # once
    state = reader.crawl_state("link", "app", "c")
    assert state.domains["example.com"].high_priority == -5 and state.inflight == 1 and state.failed == 1
    ((kind, letter),) = events(redis_client, keys)
    assert kind == "dead-letter" and isinstance(letter.pop("server_time"), int)
    assert letter == {
        "stage": "crawl",
        "error": "lease expired",
        "url": "http://other.org/b",
        "appid": "app",
        "crawlid": "c",
        "spiderid": "link",
        "retry_times": 3,
    }


def test_spider_backlog_sums_crawl_queues_per_domain(
    redis_client: redis.Redis, keys: Keys, reader: FrontierReader
) -> None:
    push(
        redis_client,
        keys,
        *[FrontierRequest(f"http://example.com/{i}", "app", "c1", request_id=str(i)) for i in range(3)],
        FrontierRequest("http://example.com/z", "app", "c2", request_id="z"),
        FrontierRequest("http://[::1]:8080/", "app", "c2", request_id="v6"),
    )
    assert reader.spider_backlog("link") == {"example.com": 4, "::1": 1}
    assert reader.spider_backlog("wandering") == {}
    reader.purge("link", "app", "c1")
    assert reader.spider_backlog("link") == {"example.com": 1, "::1": 1}


def test_stats_counter_names_round_trip() -> None:
    assert parse_status_counter_name(crawler_counter_name("link", 200)) == ("spider", "link", 200)
    assert parse_status_counter_name(machine_counter_name("worker-1", 504)) == ("machine", "worker-1", 504)
    assert parse_status_counter_name("total") is None and parse_status_counter_name("spider:x:abc") is None
    assert parse_plugin_counter_name(plugin_counter_name("InfoMonitor")) == "InfoMonitor"
    assert parse_plugin_counter_name("fail") is None
    assert json.dumps(crawler_counter_name("link", 404)) == '"spider:link:404"'


def test_a_crawl_with_work_in_both_lanes_is_one_crawl(
    redis_client: redis.Redis, keys: Keys, reader: FrontierReader
) -> None:
    """§15: a crawl's rendering requests sit in their own lane (only rendering crawlers pop them),
    but info, stop and completion see the one crawl across both lanes."""
    plain = FrontierRequest(url="http://a.example/1", appid="app", crawlid="both", priority=5)
    rendered = [
        FrontierRequest(url="http://a.example/2", appid="app", crawlid="both", priority=9, render=True),
        FrontierRequest(url="http://b.example/1", appid="app", crawlid="both", priority=1, render=True),
    ]
    push(redis_client, keys, plain, *rendered)
    worker = FrontierLeaser(redis_client, keys, lease_s=60, record_ttl_s=3600, throttle=FAST)
    state = reader.crawl_state("link", "app", "both")
    assert state.pending == 3 and state.lanes == {False, True}
    assert state.domains["a.example"].total == 2
    assert (state.domains["a.example"].high_priority, state.domains["a.example"].low_priority) == (9, 5)
    # A plain crawler pops only the plain request, a rendering one only the rendered ones.
    first = worker.pop("link")
    assert first.lease is not None and first.lease.request.url == "http://a.example/1"
    assert worker.pop("link").lease is None
    leases = [worker.pop("link", render=True).lease for _ in range(2)]
    assert {lease.request.url for lease in leases if lease} == {"http://a.example/2", "http://b.example/1"}
    assert worker.pop("link", render=True).lease is None
    # Not complete while a rendered request is queued (nothing in flight); stop purges both lanes.
    push(redis_client, keys, FrontierRequest(url="http://c.example/", appid="app", crawlid="both", render=True))
    for lease in [first.lease, *leases]:
        assert lease is not None and worker.ack(lease, "crawled")
    reader.scan_complete()
    assert all(kind != "complete" for kind, _ in events(redis_client, keys))
    assert reader.purge("link", "app", "both") == 1
    assert redis_client.zcard(keys.domain_crawls("link", "c.example", render=True)) == 0
    assert reader.crawl_state("link", "app", "both").pending == 0
