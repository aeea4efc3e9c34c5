"""Chaos: a whole cluster (kafka-monitor, redis-monitor, 3 crawlers, all real subprocesses) crawls a
10-host loopback site while its processes are SIGKILLed and restarted, or Redis or the broker is
restarted under it. What must hold (docs/contract.md §1, §3.12):

* every page appears on ``crawled_firehose`` at least once, and the duplicates are no more than
  the leases outstanding at the kills (ZCARD of the spider's lease set, recorded just before each
  kill);
* ``complete`` arrives exactly once on ``outbound_firehose``;
* every ``info`` request sent during the chaos gets an answer;
* afterwards Redis holds only what a finished crawl may keep (support.chaos.ALLOWED_AFTER_COMPLETE): no
  queued request, no lease, no registered domain, no active crawl.

Scale: ``CRAWLHIVE_CHAOS_SCALE=ci`` (default; 430 pages, about a minute per test) or ``full``
(2,110 pages over a few minutes).
"""

from __future__ import annotations

import collections
import gc
import json
import os
import random
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from support.chaos import AofRedis, Proc, TopicReader, TreeSite, audit_leftovers, component_env, scale, wait_until

from crawlhive.app.embedded import EmbeddedBroker
from crawlhive.crawler.admit import stored_fingerprint
from crawlhive.crawler.requests import url_fingerprint
from crawlhive.utils.backends.kafka_clients import ensure_topics, make_producer
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import FrontierReader

FULL = scale() == "full"
BRANCHING = 14 if FULL else 6  # 10 hosts x (1 + b + b*b): 2,110 or 430 pages
CHAOS_S = 240.0 if FULL else 45.0  # kills stop after this, or once STOP_KILLS_AT of the pages arrived
STOP_KILLS_AT = 0.9
pytestmark = [pytest.mark.timeout(900 if FULL else 180), pytest.mark.slow]

APPID, CRAWLID, SPIDER = "chaos", "c1", "link"
TOPICS = ("incoming", "crawled_firehose", "outbound_firehose", "dead_letter")

#: Component settings: short leases and a throttle that spreads the crawl over the chaos period.
COMPONENT_SETTINGS: dict[str, Any] = {
    "LEASE_TIMEOUT": 3,
    "QUEUE_HITS": 3,
    "QUEUE_WINDOW": 2,
    "QUEUE_MODERATED": True,
    "CONCURRENT_REQUESTS": 4,
    "DOWNLOAD_TIMEOUT": 5,
    "HEARTBEAT_INTERVAL": 1,
    "HEARTBEAT_TIMEOUT": 5,
    "REDIS_MONITOR_CLAIM_IDLE_S": 3,
    "CRAWLER_STATS_FLUSH_S": 1,
    "CRAWLER_ALLOWED_NETWORKS": ["127.0.0.0/8"],  # the tree site is on loopback (§10.2)
    # A page whose lease expired RETRY_TIMES + 1 times is failed by design (§3.12: a page that kills
    # its crawlers must not loop). With 3 s leases, the kills, and a machine loaded by a parallel
    # test pass, a crawler starved for 3 s loses its leases too: the default 3 was seen exhausted
    # once (a page dead-lettered, `complete` with it missing). What is tested here is loss by kills.
    "RETRY_TIMES": 10,
}


@dataclass
class Cluster:
    """The component processes of one test and what the test observed."""

    settings: Settings
    client: redis.Redis
    site: TreeSite
    procs: dict[str, Proc]
    reader: TopicReader
    producer: Any
    keys: Keys = field(init=False)
    info_uuids: list[str] = field(default_factory=list)
    kills: list[tuple[str, int]] = field(default_factory=list)  # (victim, leases outstanding)

    def __post_init__(self) -> None:
        self.keys = keys_from_settings(self.settings)

    def topic(self, short: str) -> str:
        return self.settings.topic(short)

    def produce(self, message: dict[str, Any]) -> None:
        self.producer.send(self.topic("incoming"), json.dumps(message).encode()).get(timeout=10)

    def feed_seeds(self, crawlid: str = CRAWLID, seeds: list[str] | None = None, maxdepth: int = 2) -> None:
        for url in seeds or self.site.seeds():
            self.produce({"url": url, "appid": APPID, "crawlid": crawlid, "maxdepth": maxdepth, "priority": 50})

    def ask_info(self) -> None:
        ident = f"info-{uuid.uuid4().hex[:12]}"
        self.produce({"action": "info", "appid": APPID, "crawlid": CRAWLID, "spiderid": SPIDER, "uuid": ident})
        self.info_uuids.append(ident)

    def items(self, reader: TopicReader | None = None) -> list[dict[str, Any]]:
        return [m for m in (reader or self.reader).of(self.topic("crawled_firehose")) if m.get("crawlid") == CRAWLID]

    def seen_urls(self) -> set[str]:
        return {i["url"] for i in self.items()}

    def completes(self, reader: TopicReader | None = None) -> list[dict[str, Any]]:
        out = (reader or self.reader).of(self.topic("outbound_firehose"))
        return [m for m in out if m.get("action") == "complete" and m.get("crawlid") == CRAWLID]

    def leases(self) -> int:
        return int(self.client.zcard(self.keys.leases(SPIDER)))

    def kill_and_restart(self, name: str) -> None:
        self.kills.append((name, self.leases()))
        self.procs[name].kill()
        self.procs[name].start()

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{proc.tail(1500)}" for name, proc in self.procs.items())


@pytest.fixture
def site() -> Iterator[TreeSite]:
    site = TreeSite(hosts=10, branching=BRANCHING, delay_s=0.3).start()
    yield site
    site.stop()


@pytest.fixture
def cluster_factory(site: TreeSite, tmp_path: Path) -> Iterator[Callable[[Settings, redis.Redis, int], Cluster]]:
    made: list[Cluster] = []

    def make(settings: Settings, client: redis.Redis, crawlers: int = 3, **extra: Any) -> Cluster:
        ensure_topics(settings, [settings.topic(t) for t in TOPICS])
        env = component_env(settings, **{**COMPONENT_SETTINGS, **extra})
        procs = {"kafka-monitor": Proc("kafka-monitor", ["kafka-monitor"], env, tmp_path)}
        procs["redis-monitor"] = Proc("redis-monitor", ["redis-monitor"], env, tmp_path)
        for i in range(crawlers):
            procs[f"crawler-{i + 1}"] = Proc(f"crawler-{i + 1}", ["crawler", "--spider", SPIDER], env, tmp_path)
        reader = TopicReader(settings, [settings.topic(t) for t in TOPICS[1:]])
        cluster = Cluster(settings, client, site, procs, reader, make_producer(settings))
        made.append(cluster)
        for proc in procs.values():
            proc.start()
        keys = cluster.keys
        ready = wait_until(lambda: client.zcard(keys.heartbeat_index("crawler")) >= crawlers, 60)
        assert ready, cluster.logs()
        return cluster

    yield make
    for cluster in made:
        for proc in cluster.procs.values():
            proc.kill()
        cluster.producer.close(timeout=5)
        cluster.reader.close()
    made.clear()
    # kafka-python drops (without closing) the socket of a connection attempt refused while the
    # broker restarts; collect it here rather than let its ResourceWarning fail a later test.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def finish(cluster: Cluster, timeout: float) -> None:
    """Wait for ``complete``, stop every process gracefully, and check what Redis kept."""
    done = wait_until(lambda: len(cluster.completes()) >= 1, timeout, step=0.25)
    missing = sorted(cluster.site.expected_urls() - cluster.seen_urls())
    assert done, f"no complete; {len(missing)} pages missing, e.g. {missing[:5]}\n{cluster.logs()}"
    # A kafka-monitor restarted just before the end rejoins its group only after the killed
    # member's session times out (KAFKA_SESSION_TIMEOUT_MS): give the last info requests that long.
    outbound = cluster.topic("outbound_firehose")
    wait_until(lambda: set(cluster.info_uuids) <= {m.get("uuid") for m in cluster.reader.of(outbound)}, 60, 0.25)
    time.sleep(3)  # a duplicate complete, or late items, would show up by now
    for name, proc in cluster.procs.items():
        assert proc.terminate() == 0, f"{name} did not stop cleanly:\n{proc.tail()}"
    prefix = cluster.settings["REDIS_KEY_PREFIX"]
    problems = audit_leftovers(cluster.client, cluster.keys, prefix)
    assert problems == [], problems


def check_outcome(cluster: Cluster, allowed_duplicates: int) -> dict[str, int]:
    expected = cluster.site.expected_urls()
    items = cluster.items()
    counts = collections.Counter(i["url"] for i in items)
    missing = expected - set(counts)
    if missing:  # what the processes logged of them, the kills around, and what Redis knows
        logs = cluster.logs()
        paths = [urlsplit(url).path for url in sorted(missing)[:10]]
        lines = [line for line in logs.splitlines() if any(path in line for path in paths)]
        detail = "\n".join(lines[-40:])
        raise AssertionError(
            f"{len(missing)} pages never reached crawled_firehose: {sorted(missing)[:10]}\n"
            f"kills: {cluster.kills}\n{diagnose(cluster, missing, counts)}\nlog lines naming them:\n{detail}"
        )
    assert set(counts) == expected
    duplicates = len(items) - len(expected)
    assert duplicates <= allowed_duplicates, (duplicates, cluster.kills)
    completes = cluster.completes()
    assert len(completes) == 1, completes
    assert completes[0]["total_crawled"] >= len(expected), completes[0]
    assert completes[0]["total_failed"] == 0, completes[0]
    letters = [d for d in cluster.reader.of(cluster.topic("dead_letter")) if d.get("crawlid") == CRAWLID]
    assert letters == []
    robots_blocked = cluster.site.fetched("/private/")
    assert robots_blocked == [], robots_blocked
    answered = {m.get("uuid") for m in cluster.reader.of(cluster.topic("outbound_firehose"))}
    unanswered = [u for u in cluster.info_uuids if u not in answered]
    assert unanswered == [], f"{len(unanswered)} of {len(cluster.info_uuids)} info requests got no answer"
    return {"pages": len(expected), "items": len(items), "duplicates": duplicates, "kills": len(cluster.kills)}


def diagnose(cluster: Cluster, missing: set[str], counts: collections.Counter[str]) -> str:
    """What tells the causes of a lost page apart: whether a fresh reader of the firehose finds it
    (the test's reader missed it), and its dupefilter entry: absent (never admitted as a link),
    or the page that admitted it (whose links were then lost, if that page was crawled)."""
    fresh = TopicReader(cluster.settings, [cluster.topic("crawled_firehose")])
    try:
        wait_until(lambda: False, 5)
        refound = sorted(missing & {i["url"] for i in cluster.items(fresh)})
    finally:
        fresh.close()
    owners = {stored_fingerprint(url_fingerprint(url))[:4]: url for url in cluster.site.expected_urls()}
    entries = []
    for url in sorted(missing)[:10]:
        fp = stored_fingerprint(url_fingerprint(url))
        shard = cluster.keys.shard_of(urlsplit(url).hostname or "")
        owner = cluster.client.hget(cluster.keys.dupefilter(SPIDER, APPID, CRAWLID, shard), fp)
        if owner is None:
            entries.append(f"{url}: no dupefilter entry")
            continue
        parent = owners.get(owner, owner.hex())
        entries.append(f"{url}: admitted by {parent} (emitted {counts.get(parent, 0)} times)")
    letters = [d for d in cluster.reader.of(cluster.topic("dead_letter")) if d.get("url") in missing]
    errors = [(d.get("url"), d.get("error") or d.get("reason")) for d in letters]
    completes = [(c.get("total_crawled"), c.get("total_failed")) for c in cluster.completes()]
    return (
        f"a fresh reader of the firehose finds {refound}\ndead letters of them: {errors}\n"
        f"complete (crawled, failed): {completes}\ndupefilter: " + "; ".join(entries)
    )


def tail_settings(tmp_path: Path) -> dict[str, Any]:
    """Queue tails in a folder (docs/contract.md §23), with heads so small that every host's queue
    spills and refills many times during the crawl, and only 3 of the 10 hosts hot (the others'
    queues are all tail until the scheduler reaches them)."""
    return {
        "FRONTIER_TAIL_URL": str(tmp_path / "tails"),
        "FRONTIER_HEAD_SIZE": 4,
        "FRONTIER_SEGMENT_SIZE": 6,
        "FRONTIER_HOT_DOMAINS": 3,
    }


def assert_no_segment_left(tmp_path: Path, cluster: Cluster) -> None:
    """After completion the store holds no segment a pointer names (every one was refilled), and
    the shards' tail counters are back at zero; orphans of kills are the only files allowed."""
    for shard in range(cluster.keys.shards):
        stats = cluster.client.hgetall(cluster.keys.tail_stats(shard))
        assert int(stats.get(b"requests", 0)) == 0 and int(stats.get(b"segments", 0)) == 0, stats
    spilled = sum(
        int(cluster.client.hget(cluster.keys.tail_stats(s), "spilled") or 0) for s in range(cluster.keys.shards)
    )
    assert spilled > 0, "the crawl never used its tails"


@pytest.mark.parametrize("tails", [False, True], ids=["redis-only", "with-tails"])
def test_sigkilled_crawlers_and_monitors_lose_nothing(
    settings: Settings,
    redis_client: redis.Redis,
    cluster_factory: Callable[..., Cluster],
    tails: bool,
    tmp_path: Path,
) -> None:
    cluster = cluster_factory(settings, redis_client, 3, **(tail_settings(tmp_path) if tails else {}))
    expected = cluster.site.expected_urls()
    cluster.feed_seeds()
    # The kills start once pages flow. A kafka-monitor killed between its Redis write and its
    # commit redelivers seeds; their origin markers keep them from being queued again
    # (test_kafka_monitor.py::test_a_record_redelivered_after_its_seed_was_crawled_queues_nothing).
    # Requests produced during the chaos are info requests, each of which must be answered.
    assert wait_until(lambda: len(cluster.seen_urls()) >= 10, 60), cluster.logs()
    rng = random.Random(int(time.time()))
    names = list(cluster.procs)
    start = time.monotonic()
    next_kill = start + rng.uniform(2.0, 4.0)
    while time.monotonic() - start < CHAOS_S and len(cluster.seen_urls()) < STOP_KILLS_AT * len(expected):
        cluster.ask_info()
        if time.monotonic() >= next_kill:
            cluster.kill_and_restart(rng.choice(names))
            next_kill = time.monotonic() + rng.uniform(2.0, 4.0)
        time.sleep(0.5)
    assert len(cluster.kills) >= 4, cluster.kills
    finish(cluster, timeout=120 if not FULL else 400)
    outcome = check_outcome(cluster, allowed_duplicates=sum(leases for _, leases in cluster.kills))
    if tails:
        assert_no_segment_left(tmp_path, cluster)
    print(f"chaos kills: {outcome}, kills {cluster.kills}")


@pytest.mark.parametrize("tails", [True], ids=["with-tails"])
def test_redis_crash_with_aof_mid_crawl_loses_nothing(
    kafka_bootstrap: str, tmp_path: Path, cluster_factory: Callable[..., Cluster], tails: bool
) -> None:
    with AofRedis() as server:
        client = redis.Redis.from_url(server.url)
        prefix = f"aof{uuid.uuid4().hex[:6]}"
        settings = Settings.from_overrides(
            REDIS_URL=server.url,
            KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
            REDIS_KEY_PREFIX=prefix,
            KAFKA_TOPIC_PREFIX=prefix,
            CRAWLHIVE_HOME=str(tmp_path),
            FRONTIER_SHARDS=int(os.environ.get("FRONTIER_SHARDS") or 0),
        )
        try:
            cluster = cluster_factory(settings, client, 3, **(tail_settings(tmp_path) if tails else {}))
            expected = cluster.site.expected_urls()
            cluster.feed_seeds()
            assert wait_until(lambda: len(cluster.seen_urls()) >= 0.4 * len(expected), 120), cluster.logs()
            cluster.kills.append(("redis", cluster.leases()))
            server.crash()
            time.sleep(2.0)
            server.restart()
            cluster.ask_info()
            finish(cluster, timeout=150)
            outcome = check_outcome(cluster, allowed_duplicates=cluster.kills[0][1])
            if tails:
                assert_no_segment_left(tmp_path, cluster)
            print(f"redis crash: {outcome}")
        finally:
            client.close()


# While the broker is down, kafka-python's clients in this process (the test's consumer) open
# sockets whose connect is refused and drop them without closing; Python reports them when they are
# collected, from whatever module runs then (seen once from `selectors`, with two test workers), so
# the module filter in pyproject.toml cannot name them. Only for this test, whose subject is that
# restart; every other test still fails on any leaked socket.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_broker_restart_mid_crawl(settings: Settings, tmp_path: Path, cluster_factory: Callable[..., Cluster]) -> None:
    """Tansu's only local storage engine is memory (its binary offers memory, s3 and postgres):
    a restart loses every topic, record and committed offset. What can hold, and is checked here:
    every process survives the outage; once the topics exist again (``crawlhive up`` creates them
    at start-up; here the test does) the crawl resumes from Redis and completes, the kafka-monitor
    accepts new requests and the redis-monitor answers again; and every page reached a reader of
    the firehose, before or after the restart, except items the broker had acknowledged and then
    lost with its memory (bounded by the crawl's ``crawled`` counter at the restart)."""
    with EmbeddedBroker(startup_timeout=30) as broker:
        live = settings.copy_with(KAFKA_BOOTSTRAP_SERVERS=broker.bootstrap)
        cluster = cluster_factory(live, settings_client(settings), 3)
        expected = cluster.site.expected_urls()
        cluster.feed_seeds()
        assert wait_until(lambda: len(cluster.seen_urls()) >= 0.4 * len(expected), 120), cluster.logs()
        cluster.kills.append(("broker", cluster.leases()))
        # The test's own clients are closed across the restart (kafka-python leaks the sockets of
        # refused connection attempts, whose ResourceWarnings would fail a later test); the
        # components' clients are the ones under test.
        cluster.reader.close()
        cluster.producer.close(timeout=5)
        before = cluster.seen_urls()
        read_before = len(cluster.items())
        broker.stop()
        # acked by the old broker (summed over the frontier's shards): a page is counted when its
        # finish, written on the crawler's batcher a round trip or two after the broker's ack, lands,
        # so the count is read once it has stopped moving (no ack comes from a stopped broker)
        reader = FrontierReader(cluster.client, cluster.keys, 3600)
        acked_at_restart = reader.crawl_state(SPIDER, APPID, CRAWLID).crawled
        for _ in range(20):
            time.sleep(0.5)
            counted = reader.crawl_state(SPIDER, APPID, CRAWLID).crawled
            if counted == acked_at_restart:
                break
            acked_at_restart = counted
        broker.restart()
        ensure_topics(live, [live.topic(t) for t in TOPICS])
        cluster.producer = make_producer(live)
        cluster.reader = TopicReader(live, [live.topic(t) for t in TOPICS[1:]])
        cluster.feed_seeds(crawlid="c2", seeds=cluster.site.seeds()[:1], maxdepth=0)
        cluster.ask_info()
        done = wait_until(lambda: len(cluster.completes()) >= 1, 180, step=0.25)
        assert done, cluster.logs()
        after = cluster.seen_urls()
        lost = expected - before - after
        # only items acknowledged by the old broker but not yet read by us may be gone with it
        assert len(lost) <= max(0, acked_at_restart - read_before), (len(lost), acked_at_restart, read_before)
        assert len(cluster.completes()) == 1
        c2 = [i for i in cluster.reader.of(live.topic("crawled_firehose")) if i.get("crawlid") == "c2"]
        assert c2, "the kafka-monitor did not accept a request produced after the restart"
        answered = {m.get("uuid") for m in cluster.reader.of(live.topic("outbound_firehose"))}
        assert cluster.info_uuids[-1] in answered
        for name, proc in cluster.procs.items():
            assert proc.starts == 1 and proc.alive(), f"{name} died:\n{proc.tail()}"
        print(f"broker restart: lost {len(lost)} of {len(expected)} (acked before restart {acked_at_restart})")


def settings_client(settings: Settings) -> redis.Redis:
    return redis.Redis.from_url(settings["REDIS_URL"])
