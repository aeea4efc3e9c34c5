"""The redis-monitor against a real Redis and a real broker: the exact answers of stats and
domain-config for hand-seeded state; retries of a failing request; answers cut to fit; takeover of
a dead monitor's requests; appid topics; Redis going away; the real command.
(Info, stop, expire, complete and leases: test_redis_monitor.py.)"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from support.chaos import wait_until
from support.redis_monitor import (
    Running,
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
)

from crawlhive.app.embedded import EmbeddedRedis
from crawlhive.redis_monitor.monitor import RedisMonitor
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings, settings_env
from crawlhive.utils.frontier import FrontierLeaser, ThrottleConfig
from crawlhive.utils.state.control import CONTROL_GROUP, ControlConsumer
from crawlhive.utils.state.heartbeat import Heartbeat
from crawlhive.utils.state.stats import KAFKA_MONITOR, Stats, plugin_counter_name, record_response

# the fixtures imported from support.redis_monitor: pytest finds them here
__all__ = ["dead_letters", "keys", "outbound", "rm_settings", "running"]


# --- stats -----------------------------------------------------------------------------------------


def test_stats_answers_of_every_type(
    rm_settings: Settings, redis_client: redis.Redis, keys: Keys, outbound: Topic, running: Callable[..., RedisMonitor]
) -> None:
    stats = Stats(redis_client, keys, rm_settings.getlist("STATS_TIMES"))
    stats.incr(KAFKA_MONITOR, "total", 3)
    stats.incr(KAFKA_MONITOR, "fail", 1)
    stats.incr(KAFKA_MONITOR, plugin_counter_name("StatsHandler"), 2)
    for code in (200, 200, 404, 504, 302):  # 302 is not in STATS_RESPONSE_CODES
        record_response(stats, "link", "worker-1", code, rm_settings.getlist("STATS_RESPONSE_CODES"))
    crawlers = [
        Heartbeat(redis_client, keys, "crawler", f"c0000000000{i}", "worker-1", 60, extra={"spider": "link"})
        for i in range(2)
    ]
    for beat in crawlers:
        beat.beat()
    km = Heartbeat(redis_client, keys, "kafka-monitor", "e2be29329410", "worker-1", 60)
    km.beat()
    cleaner = Heartbeat(redis_client, keys, "cleaner", "c1ea0000000a", "worker-2", 60)
    cleaner.beat()
    stats.incr_many([("cleaner", "cleaned", 5), ("cleaner", "skipped", 2), ("cleaner", "dead_letters", 1)])
    stats.incr("cleaner", "machine:worker-2:cleaned", 5)
    push(
        redis_client,
        rm_settings,
        *[req(f"http://example.com/{i}") for i in range(3)],
        req("http://other.org/"),
        req("http://example.com/w", spiderid="wandering"),
    )
    monitor = running(rm_settings)
    uuids = ["kafka-monitor", "crawler", "cleaner", "spider", "machine", "queue", "rest", "all"]
    submit(redis_client, rm_settings, "stats", *[{"uuid": u, "appid": "testapp", "stats": u} for u in uuids])
    answers = by_uuid(outbound.wait_for(len(uuids)))
    assert answers["kafka-monitor"] == {
        "stats": "kafka-monitor",
        "appid": "testapp",
        "uuid": "kafka-monitor",
        "total": {w: 3 for w in ("900", "3600", "21600", "43200", "86400", "604800", "lifetime")},
        "fail": {w: 1 for w in ("900", "3600", "21600", "43200", "86400", "604800", "lifetime")},
        "plugins": {"StatsHandler": {w: 2 for w in ("900", "3600", "21600", "43200", "86400", "604800", "lifetime")}},
        "nodes": {"worker-1": ["e2be29329410"]},
    }
    one = {w: 1 for w in ("900", "3600", "21600", "43200", "86400", "604800", "lifetime")}
    two = {w: 2 for w in one}
    spiders = {
        "unique_spider_count": 1,
        "total_spider_count": 2,
        "link": {"count": 2, "200": two, "404": one, "504": one},
    }
    machines = {"count": 1, "worker-1": {"200": two, "404": one, "504": one}}
    queues = {
        "queue_link": {
            "spider_backlog": 4,
            "num_domains": 2,
            "crawlers": 2,
            "domains": [{"domain": "example.com", "backlog": 3}, {"domain": "other.org", "backlog": 1}],
        },
        "queue_wandering": {
            "spider_backlog": 1,
            "num_domains": 1,
            "crawlers": 0,  # nobody runs a wandering crawler: its crawls wait (§11)
            "domains": [{"domain": "example.com", "backlog": 1}],
        },
        "total_backlog": 5,
    }
    assert answers["spider"] == {"stats": "spider", "appid": "testapp", "uuid": "spider", "spiders": spiders}
    assert answers["machine"] == {"stats": "machine", "appid": "testapp", "uuid": "machine", "machines": machines}
    assert answers["queue"] == {"stats": "queue", "appid": "testapp", "uuid": "queue", "queues": queues}
    assert answers["crawler"] == {
        "stats": "crawler",
        "appid": "testapp",
        "uuid": "crawler",
        "spiders": spiders,
        "machines": machines,
        "queue": queues,
        "queues": queues,
        "fetch": {"spiders": {}, "machines": {}},  # no page fetched (§25.7)
    }
    assert answers["rest"] == {"stats": "rest", "appid": "testapp", "uuid": "rest"}  # no REST running
    everything = answers["all"]
    kinds = {"kafka-monitor", "redis-monitor", "crawler", "cleaner", "sink", "rest"}  # the registry's stats kinds
    assert set(everything) == {"stats", "appid", "uuid", *kinds}
    # docs/contract.md §13: the cleaners' counters per window, and their nodes
    cleaned = answers["cleaner"]
    assert cleaned["cleaned"]["lifetime"] == 5 and cleaned["skipped"]["900"] == 2
    assert cleaned["duplicates"] == {} and cleaned["dead_letters"]["lifetime"] == 1
    assert cleaned["nodes"] == {"worker-2": ["c1ea0000000a"]}
    assert cleaned["machines"] == {"worker-2": {"cleaned": cleaned["cleaned"]}}  # per host
    assert everything["cleaner"] == {k: v for k, v in cleaned.items() if k not in ("stats", "appid", "uuid")}
    assert everything["kafka-monitor"]["total"]["lifetime"] == 3
    assert everything["crawler"]["queues"] == queues and everything["rest"] == {}
    assert everything["redis-monitor"]["nodes"] == {"worker-1": [monitor.node_id]}

    # The redis-monitor's own counters, as another stats request sees them.
    submit(redis_client, rm_settings, "stats", {"uuid": "rm", "appid": "testapp", "stats": "redis-monitor"})
    rm = by_uuid(outbound.wait_for(1, where=lambda m: m.get("uuid") == "rm"))["rm"]
    assert rm["total"]["lifetime"] == len(uuids) and "fail" not in rm
    assert rm["plugins"] == {"StatsMonitor": {w: len(uuids) for w in one}}
    assert rm["nodes"] == {"worker-1": [monitor.node_id]}


# --- domain config ---------------------------------------------------------------------------------


def test_domain_config_actions_apply_and_answer(
    rm_settings: Settings, redis_client: redis.Redis, keys: Keys, outbound: Topic, running: Callable[..., RedisMonitor]
) -> None:
    def dc(action: str, uuid: str, **kw: Any) -> dict[str, Any]:
        return {"action": action, "uuid": uuid, "appid": "madisonTest", "domain": "www.Example.COM", **kw}

    submit(
        redis_client,
        rm_settings,
        "domain-config",
        dc("domain-update", "d1", hits=60, window=60, scale=0.9),
        dc("blacklist-update", "b1"),
        dc("blacklist-update", "b2"),  # idempotent
        dc("domain-update", "d2", domain="other.org", hits=5, window=10, scale=1.0),
    )
    running(rm_settings)
    answers = by_uuid(outbound.wait_for(4))
    for uuid in ("d1", "b1", "b2"):
        action = "domain-update" if uuid.startswith("d") else "blacklist-update"
        assert answers[uuid] == {"action": action, "domain": "example.com", "appid": "madisonTest", "uuid": uuid}
    shard = keys.shard_of("example.com")
    assert json.loads(redis_client.hget(keys.domain_config(shard), "example.com")) == {
        "hits": 60,
        "window": 60,
        "scale": 0.9,
    }
    assert redis_client.smembers(keys.domain_blacklist(shard)) == {b"example.com"}

    submit(redis_client, rm_settings, "domain-config", dc("domain-remove", "r1"), dc("blacklist-remove", "r2"))
    answers = by_uuid(outbound.wait_for(6))
    assert answers["r1"]["action"] == "domain-remove" and answers["r2"]["domain"] == "example.com"
    assert [d for k in range(keys.shards) for d in redis_client.hkeys(keys.domain_config(k))] == [b"other.org"]
    assert redis_client.scard(keys.domain_blacklist(shard)) == 0

    # Redis refuses the write (the key holds another type): an error answer, nothing changed.
    redis_client.delete(keys.domain_blacklist(shard))
    redis_client.set(keys.domain_blacklist(shard), "not a set")
    submit(redis_client, rm_settings, "domain-config", dc("blacklist-update", "e1"))
    answers = by_uuid(outbound.wait_for(7))
    assert answers["e1"] == {
        "action": "blacklist-update",
        "domain": "example.com",
        "appid": "madisonTest",
        "uuid": "e1",
        "error": "Unable to store domain config",
    }


@pytest.mark.parametrize("loosen", ["domain-remove", "domain-update"])
def test_a_loosened_or_removed_domain_limit_applies_within_2s_not_after_the_old_delay(
    loosen: str,
    rm_settings: Settings,
    redis_client: redis.Redis,
    keys: Keys,
    outbound: Topic,
    running: Callable[..., RedisMonitor],
) -> None:
    """docs/contract.md §3.11: a domain parked by a pop under 1 hit / 60 s is fetched again within 2 s of a
    domain-remove (back to the defaults) or a domain-update to a looser limit, and idle crawlers
    are woken; a tightened limit applies at the next pop."""
    push(redis_client, rm_settings, *(req(f"http://www.example.com/{n}") for n in range(4)))
    defaults = ThrottleConfig(hits=10, window_s=1.0, moderated=True, type_enabled=True, egress_id=None)
    crawler = FrontierLeaser(redis_client, keys, lease_s=30.0, record_ttl_s=3600, throttle=defaults)
    wake = redis_client.pubsub()
    wake.subscribe(keys.wake_channel("link"))
    running(rm_settings)

    def configure(uuid: str, action: str, **limits: Any) -> None:
        request = {"action": action, "uuid": uuid, "appid": "testapp", "domain": "example.com", **limits}
        submit(redis_client, rm_settings, "domain-config", request)
        outbound.wait_for(1, where=lambda m: m.get("uuid") == uuid)

    configure("slow", "domain-update", hits=1, window=60)
    assert crawler.pop("link").lease is not None
    parked = crawler.pop("link")
    assert parked.lease is None and parked.wait_s is not None and parked.wait_s > 50
    while wake.get_message(timeout=0.1) is not None:  # drop the subscription confirmation and older wakes
        pass

    if loosen == "domain-remove":
        configure("loose", "domain-remove")
    else:
        configure("loose", "domain-update", hits=100, window=1)
    changed = time.monotonic()
    woken = wake.get_message(timeout=2.0)
    assert woken is not None and woken["type"] == "message"  # idle crawlers of the spider type wake up
    while (outcome := crawler.pop("link")).lease is None:
        assert time.monotonic() - changed < 2.0, f"still parked after the change: {outcome}"
        time.sleep(0.05)

    # Tightening again applies at the next pop (the default spacing of 0.1 s has passed by then).
    configure("tight", "domain-update", hits=1, window=60)
    time.sleep(0.2)
    tightened = crawler.pop("link")
    assert tightened.lease is None and tightened.wait_s is not None and tightened.wait_s > 50
    wake.close()


# --- failures, takeover, appid topics --------------------------------------------------------------


def test_a_failing_request_is_retried_then_reported_and_the_loop_keeps_answering(
    rm_settings: Settings,
    redis_client: redis.Redis,
    keys: Keys,
    outbound: Topic,
    dead_letters: Topic,
    running: Callable[..., RedisMonitor],
) -> None:
    # "stats": "bogus" passes no schema, so only a writer bypassing the kafka-monitor can send it:
    # the StatsMonitor raises on it every time.
    bad = {"uuid": "bad", "appid": "testapp", "stats": "bogus"}
    good = {"uuid": "good", "appid": "testapp", "crawlid": "c1", "spiderid": "link", "action": "info"}
    submit(redis_client, rm_settings, "stats", bad)
    submit(redis_client, rm_settings, "action", good)
    redis_client.xadd(keys.control_stream(), {"kind": "action", "request": "{not json"})
    redis_client.xadd(keys.control_stream(), {"kind": "teleport", "request": '{"appid": "testapp"}'})
    running(rm_settings)
    (answer,) = outbound.wait_for(1)
    assert answer["uuid"] == "good"
    letters = dead_letters.wait_for(3)
    by_error = {letter["error"].split(":")[0]: without_time(letter) for letter in letters}
    assert by_error["stats"] == {
        "stage": "control",
        "error": "stats: StatsMonitor failed 3 times: ValueError: unknown stats type 'bogus'",
        "payload": bad,
        "uuid": "bad",
        "appid": "testapp",
    }
    assert by_error["action"]["payload"] == "{not json"
    assert by_error["teleport"]["error"] == "teleport: No redis-monitor plugin handles 'teleport' requests"
    assert by_error["teleport"]["appid"] == "testapp"
    deadline = time.monotonic() + 5
    while redis_client.xlen(keys.control_stream()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert redis_client.xlen(keys.control_stream()) == 0
    # the monitor counts a batch just after acknowledging it: wait for the counts, then pin them
    stats = Stats(redis_client, keys, rm_settings.getlist("STATS_TIMES"))

    def counted() -> tuple[int, int]:
        return stats.read("redis-monitor", "fail")["lifetime"], stats.read("redis-monitor", "total")["lifetime"]

    deadline = time.monotonic() + 5
    while counted() != (3, 4) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert counted() == (3, 4)


def test_answers_larger_than_the_producer_allows_are_cut_to_fit_and_hold_up_nothing(
    rm_settings: Settings, redis_client: redis.Redis, outbound: Topic, running: Callable[..., RedisMonitor]
) -> None:
    """docs/contract.md §10.5: with KAFKA_PRODUCER_MAX_REQUEST_SIZE at 16 KiB, an info answer about
    an appid of 40 crawls x 30 domains (about 120 KB) used to fail its send forever and wedge the
    monitor; now it arrives cut to fit, and the small answers around it arrive too."""
    limit = 16384
    small = rm_settings.copy_with(KAFKA_PRODUCER_MAX_REQUEST_SIZE=limit)
    push(
        redis_client,
        small,
        *(req(f"http://site{d}.com/", crawlid=f"big{c:02d}", appid="bigapp") for c in range(40) for d in range(30)),
    )
    push(redis_client, small, req("http://example.com/", crawlid="tiny"))
    before = {"action": "info", "appid": "testapp", "crawlid": "tiny", "spiderid": "link", "uuid": "before"}
    huge = {"action": "info", "appid": "bigapp", "spiderid": "link", "uuid": "huge"}
    after = {**before, "uuid": "after"}
    submit(redis_client, small, "action", before, huge, after)
    running(small)
    answers = {m["uuid"]: m for m in outbound.wait_for(3, where=lambda m: "uuid" in m)}
    assert set(answers) == {"before", "huge", "after"}
    assert "truncated" not in answers["before"] and "truncated" not in answers["after"]
    cut = answers["huge"]
    assert cut["truncated"] is True and 0 < len(cut["crawlids"]) < 40
    assert list(cut["crawlids"]) == [f"big{c:02d}" for c in range(len(cut["crawlids"]))]  # the first ones, in order
    assert len(json.dumps(cut, separators=(",", ":")).encode()) <= limit
    assert cut["total_pending"] == 40 * 30  # totals still count everything


def test_requests_a_dead_monitor_held_are_answered_by_another(
    rm_settings: Settings, redis_client: redis.Redis, keys: Keys, outbound: Topic, running: Callable[..., RedisMonitor]
) -> None:
    settings = rm_settings.copy_with(REDIS_MONITOR_CLAIM_IDLE_S=1.0)
    submit(
        redis_client,
        settings,
        "action",
        *[
            {"action": "info", "appid": "testapp", "crawlid": "c1", "spiderid": "link", "uuid": f"d{i}"}
            for i in range(3)
        ],
    )
    ghost = ControlConsumer(redis_client, keys, "deadbeef0000")
    ghost.ensure_group()
    assert len(ghost.read(10, 0)) == 3  # taken, then the ghost "dies" without answering
    running(settings)
    messages = outbound.wait_for(3)
    assert sorted(m["uuid"] for m in messages) == ["d0", "d1", "d2"]


def test_appid_topics_get_a_copy_of_each_answer(
    rm_settings: Settings, redis_client: redis.Redis, outbound: Topic, running: Callable[..., RedisMonitor]
) -> None:
    settings = rm_settings.copy_with(KAFKA_APPID_TOPICS=True)
    submit(
        redis_client,
        settings,
        "action",
        {"action": "info", "appid": "testapp", "crawlid": "c1", "spiderid": "link", "uuid": "t1"},
        {"action": "info", "appid": "bad app!", "crawlid": "c1", "spiderid": "link", "uuid": "t2"},
    )
    running(settings)
    assert sorted(m["uuid"] for m in outbound.wait_for(2)) == ["t1", "t2"]
    per_app = Topic(settings, settings.topic("outbound_testapp"))
    try:
        assert [m["uuid"] for m in per_app.wait_for(1)] == ["t1"]
    finally:
        per_app.close()


# --- backends going away; the real command ---------------------------------------------------------


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "not-persistent"])
def test_redis_going_away_backs_off_naming_the_setting_and_resumes(
    persistent: bool, rm_settings: Settings, tmp_path: Path, outbound: Topic, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis stops and comes back; the monitor backs off meanwhile, then answers again. Without
    persistence Redis comes back empty: the control stream's consumer group is gone, and the
    monitor creates it again (its claim from the missing group raised ``NOGROUP`` and the monitor
    stopped)."""
    with EmbeddedRedis(appendonly=persistent, workdir=tmp_path / "redis") as server:
        settings = rm_settings.copy_with(REDIS_URL=server.url)
        client = redis.Redis.from_url(server.url)
        runner = Running()
        try:
            runner.start(settings, client)
            info = {"action": "info", "appid": "testapp", "crawlid": "c1", "spiderid": "link"}
            submit(client, settings, "action", {**info, "uuid": "before"})
            outbound.wait_for(1)
            # The answer is out before its entry is acknowledged: Redis stopped in between would
            # (rightly) deliver "before" again. This test is about the outage, not that window.
            stream = keys_from_settings(settings).control_stream()
            assert wait_until(lambda: client.xpending(stream, CONTROL_GROUP)["pending"] == 0, 10), "never acknowledged"
            with caplog.at_level(logging.WARNING):
                server.stop()
                time.sleep(1.5)
                server.restart()
                submit(client, settings, "action", {**info, "uuid": "after"})
                assert sorted(m["uuid"] for m in outbound.wait_for(2, timeout_s=40)) == ["after", "before"]
            assert any("check REDIS_URL" in r.getMessage() for r in caplog.records)
            recreated = [r for r in caplog.records if "had no consumer group" in r.getMessage()]
            assert len(recreated) == (0 if persistent else 1), [r.getMessage() for r in recreated]
        finally:
            runner.stop()
            client.close()


def test_the_crawlhive_redis_monitor_command_answers_and_stops_on_sigterm(
    rm_settings: Settings, redis_client: redis.Redis, outbound: Topic
) -> None:
    env = {**os.environ, **settings_env(rm_settings)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "crawlhive.app.cli", "redis-monitor"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        submit(
            redis_client,
            rm_settings,
            "action",
            {"action": "info", "appid": "testapp", "crawlid": "c1", "spiderid": "link", "uuid": "cli"},
        )
        assert [m["uuid"] for m in outbound.wait_for(1, timeout_s=30)] == ["cli"]
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0, output
        assert "reading" in output and "stopping after this iteration" in output  # start and stop, said once
        assert "enabled plugins" not in output  # a start-up detail: DEBUG (docs/contract.md §17.4)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
