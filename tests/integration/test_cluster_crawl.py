"""End to end on a local Redis Cluster of 3 primaries and 3 replicas (tests/support/redis_cluster.py): the real
kafka-monitor, crawler and redis-monitor commands crawl 24 domains, answer ``info`` and ``stop``
over every shard, and ride through the SIGKILL of a primary (docs/contract.md §18).

The crawled site is one HTTP server per loopback address 127.0.0.1-127.0.0.24 (24 domains, so the
frontier's 64 shards spread over every primary). The tests of this module share one cluster.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cluster_crawl import HOSTS, MultiHostSite, Stack, keys_on_primaries
from support.crawler import CLI, crawler_env, isolated_settings, redis_for
from support.redis_cluster import LocalCluster

from crawlhive.utils.backends.redis_clients import check_redis, keys_from_settings

pytestmark = [
    pytest.mark.timeout(240),
    # A client of this process connecting to the primary the failover test SIGKILLs can leave an
    # unconnected socket behind, collected later as an unraisable exception (seen once in CI, in a
    # logging filter); the components under test are subprocesses, whose logs the tests read.
    pytest.mark.filterwarnings("ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"),
]

#: Pages per host: /p/0 .. /p/{DEPTH - 1}, a chain; the seed page links every host's /p/0.
DEPTH = 3


class ChainSite(MultiHostSite):
    """/seed links every host's /p/0; each host's /p/N links its /p/N+1, up to DEPTH pages."""

    def links(self, host: str, path: str) -> list[str]:
        if path == "/seed":
            return [self.url(h, 0) for h in HOSTS]
        if path.startswith("/p/") and path[3:].isdigit() and int(path[3:]) < DEPTH - 1:
            return [self.url(host, int(path[3:]) + 1)]
        return []

    def all_pages(self) -> set[str]:
        return {self.url(h, p) for h in HOSTS for p in range(DEPTH)}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(primaries=3, replicas=1) as local:
        yield local


@pytest.fixture
def site() -> Iterator[MultiHostSite]:
    served = ChainSite()
    served.start()
    yield served
    served.stop()


def crawl_request(crawlid: str, url: str, **extra: Any) -> dict[str, Any]:
    return {"url": url, "appid": "capp", "crawlid": crawlid, "spiderid": "link", "maxdepth": DEPTH, **extra}


def test_a_24_domain_crawl_on_the_cluster_emits_every_page_complete_info_and_stop(
    cluster: LocalCluster, site: MultiHostSite, kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = isolated_settings(cluster.url, kafka_bootstrap, tmp_path, "cl")
    stack = Stack(settings, tmp_path)
    codes: list[int] = []
    try:
        prefix = settings["REDIS_KEY_PREFIX"]
        # A crawl of a spider type no crawler runs: its 24 seeds stay queued, over many shards.
        for host in HOSTS:
            stack.send(crawl_request("parked", site.url(host, 0), spiderid="wandering"))
        keys = keys_from_settings(settings)
        assert keys.shards == 64
        deadline = time.monotonic() + 30
        while sum(stack.redis.zcard(keys.crawl_queue("wandering", "capp", "parked", h)) for h in HOSTS) < 24:
            assert time.monotonic() < deadline, stack.logs()
            time.sleep(0.2)
        spread = keys_on_primaries(cluster, prefix)
        assert len(spread) == 3 and all(count > 0 for count in spread.values()), spread  # keys on every primary
        assert len({keys.shard_of(h) for h in HOSTS}) > 12

        stack.send({"action": "info", "appid": "capp", "crawlid": "parked", "spiderid": "wandering", "uuid": "i1"})
        info = stack.answer("parked", "i1")
        assert info["total_pending"] == 24 and len(info["domains"]) == 24, info
        assert all(d["total"] == 1 for d in info["domains"].values())

        stack.send({"action": "stop", "appid": "capp", "crawlid": "parked", "spiderid": "wandering", "uuid": "s1"})
        stopped = stack.answer("parked", "stop")
        assert stopped["total_purged"] == 24, stopped
        assert sum(stack.redis.zcard(keys.crawl_queue("wandering", "capp", "parked", h)) for h in HOSTS) == 0
        assert stack.answer("parked", "complete")["total_crawled"] == 0

        # The crawl proper: one seed page linking every host, three pages deep on each (maxdepth 3).
        crawler = stack.crawler()
        crawler.wait_ready(stack.redis, prefix)
        stack.send(crawl_request("c24", site.url("127.0.0.1", 0).replace("/p/0", "/seed")))
        done = stack.answer("c24", "complete", timeout=90)
        pages = set(stack.pages("c24"))
        assert site.all_pages() <= pages, sorted(site.all_pages() - pages)
        assert done["total_crawled"] == 1 + 24 * DEPTH, done
        stack.send({"action": "info", "appid": "capp", "crawlid": "c24", "spiderid": "link", "uuid": "i2"})
        info = stack.answer("c24", "i2")
        assert info["total_pending"] == 0 and info["total_crawled"] == 1 + 24 * DEPTH, info
    finally:
        logs = stack.logs()
        codes = stack.close()
    assert codes == [0, 0, 0], logs


def test_sigkill_of_the_busiest_primary_mid_crawl_loses_no_page_with_wait_replicas(
    cluster: LocalCluster, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """§18.3: REDIS_WAIT_REPLICAS=1; the primary holding most of the crawl's keys is SIGKILLed while
    pages are in flight, its replica takes over, the old primary comes back as a replica (as a
    supervisor would restart it); every page is emitted (at least once) and the crawl completes."""
    site = ChainSite(delay_s=0.05)
    site.start()
    settings = isolated_settings(cluster.url, kafka_bootstrap, tmp_path, "fo")
    stack = Stack(settings, tmp_path, REDIS_WAIT_REPLICAS=1, LEASE_TIMEOUT=6, QUEUE_HITS=2, QUEUE_WINDOW=1)
    codes: list[int] = []
    try:
        prefix = settings["REDIS_KEY_PREFIX"]
        crawler = stack.crawler()
        crawler.wait_ready(stack.redis, prefix)
        stack.send(crawl_request("fo", site.url("127.0.0.1", 0).replace("/p/0", "/seed")))
        deadline = time.monotonic() + 60
        while len(set(stack.pages("fo"))) < 30:  # under way: links queued on every primary
            assert time.monotonic() < deadline, stack.logs()
            time.sleep(0.1)
        spread = keys_on_primaries(cluster, prefix)
        busiest = max(spread, key=lambda port: spread[port])
        victim = next(n for n in cluster.nodes if n.port == busiest)
        cluster.kill(victim)
        emitted_at_kill = len(set(stack.pages("fo")))
        assert emitted_at_kill < len(site.all_pages()), "the crawl ended before the kill: slow the site down"
        # its replica is promoted within the node timeout; then the old primary comes back
        cluster.wait_failover(victim)
        cluster.restart(victim)
        cluster.wait_healthy()
        done = stack.answer("fo", "complete", timeout=150)
        pages = set(stack.pages("fo"))
        assert site.all_pages() <= pages, (sorted(site.all_pages() - pages), stack.logs())
        assert done["total_crawled"] >= 1 + 24 * DEPTH
        # While the promoted replica had no replica of its own, WAIT fell short: components went
        # on and said so, naming the node, at most once a minute each
        for process in [*stack.components, *stack.crawlers]:
            warned = [line for line in process.output().splitlines() if "replicas confirmed writes" in line]
            nodes = [line.split("Redis node ")[1].split(":")[0:2] for line in warned]
            assert len(nodes) == len({tuple(n) for n in nodes}), warned
    finally:
        logs = stack.logs()
        codes = stack.close()
        site.stop()
    assert codes == [0, 0, 0], logs


def test_a_component_with_another_shard_count_refuses_to_start(
    cluster: LocalCluster, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """§18.2: the first component stores the count (64 on a cluster); one started with another
    FRONTIER_SHARDS exits at once with a message naming both and the fix."""
    settings = isolated_settings(cluster.url, kafka_bootstrap, tmp_path, "sh")
    client = redis_for(cluster.url)
    try:
        check_redis(client, settings)  # what every component does first: stores 64
        env = crawler_env(settings, FRONTIER_SHARDS=16)
        out = subprocess.run([*CLI, "redis-monitor"], env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 1, out.stdout + out.stderr
        said = out.stdout + out.stderr
        assert "FRONTIER_SHARDS: this component would use 16 shards" in said and "set FRONTIER_SHARDS=64" in said
    finally:
        client.delete(keys_from_settings(settings).frontier_shards())
        client.close()
