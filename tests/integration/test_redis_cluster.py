"""A real local Redis Cluster (3 primaries, 3 replicas; tests/support/redis_cluster.py): how crawlhive
finds one, and the transport its cluster mode builds on (docs/contract.md §18).

The tests of this module share one cluster and run in order: the last one kills a primary.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster
from support.redis_cluster import SLOTS, LocalCluster

from crawlhive.utils.backends import redis_clients
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.replication import ReplicaWait
from crawlhive.utils.backends.scripts import scripts
from crawlhive.utils.config.errors import SettingsError, UnsupportedBackend
from crawlhive.utils.config.settings import Settings


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(primaries=3, replicas=1) as local:
        yield local


def cluster_client(cluster: LocalCluster) -> RedisCluster:
    return RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", n.port) for n in cluster.nodes], socket_timeout=5)


def test_the_kit_builds_three_primaries_owning_every_slot_and_a_replica_of_each(cluster: LocalCluster) -> None:
    client = cluster_client(cluster)
    try:
        owned = sorted(n.primary_of for n in cluster.primaries)
        assert owned[0][0] == 0 and owned[-1][1] == SLOTS - 1
        assert all(a[1] + 1 == b[0] for a, b in zip(owned, owned[1:], strict=False))
        assert len(cluster.primary_nodes()) == 3
        for replica in cluster.replicas:
            info = replica.client().info("replication")
            assert info["role"] == "slave" and info["master_link_status"] == "up"
        # a key on every primary
        keys = [f"k{i}" for i in range(64)]
        for key in keys:
            client.set(key, key)
        assert {client.get_node_from_key(k).port for k in keys} == {n.port for n in cluster.primaries}
    finally:
        client.close()


def test_one_node_url_is_detected_as_a_cluster_with_64_shards_and_another_count_is_refused(
    cluster: LocalCluster,
) -> None:
    prefix = "detect"
    settings = Settings.from_overrides(REDIS_URL=cluster.primaries[0].url, REDIS_KEY_PREFIX=prefix)
    client = redis_clients.redis_from_settings(settings)
    try:
        assert isinstance(client, RedisCluster)  # one node named: the whole cluster is used
        assert redis_clients.frontier_shards(settings) == 64
        redis_clients.check_redis(client, settings)  # stores the count
        assert client.get(f"{prefix}:frontier-shards") == b"64"
        other = settings.copy_with(FRONTIER_SHARDS=16)
        with pytest.raises(SettingsError, match=r"FRONTIER_SHARDS: .* 16 shards.* created with 64.*FRONTIER_SHARDS=64"):
            redis_clients.check_redis(client, other)
        # a node that did not answer when a component built its client was taken for a single
        # Redis: that process cannot switch clients, so it exits (a restart detects the cluster)
        plain = redis.Redis.from_url(cluster.primaries[0].url)
        try:
            with pytest.raises(UnsupportedBackend, match=r"node of a Redis Cluster .* start it again"):
                redis_clients.check_redis(plain, settings)
        finally:
            plain.close()
    finally:
        client.delete(f"{prefix}:frontier-shards")
        client.close()


def test_replica_wait_is_confirmed_on_every_primary_and_a_shortfall_warns_once_per_node(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    client = cluster_client(cluster)
    keys = Keys("rw", 64)
    try:
        for shard in range(keys.shards):
            client.set(keys.head(shard) + "x", b"1")
        enough = ReplicaWait(client, keys, replicas=1, timeout_ms=2000)
        with caplog.at_level(logging.WARNING, logger="crawlhive.utils.backends.replication"):
            enough.wait()
            assert not caplog.records  # every primary's replica confirmed
            for node in cluster.replicas:  # and holds the mark written just before the WAIT
                held = [k for k in node.client().scan_iter(match="rw:*replication-mark")]
                assert held, f"replica {node.port} has no mark"
            too_many = ReplicaWait(client, keys, replicas=2, timeout_ms=100)
            too_many.wait()
            too_many.wait()  # within the minute: not again
        warned = [r.getMessage() for r in caplog.records]
        assert len(warned) == 3 and all("1 of REDIS_WAIT_REPLICAS=2" in w for w in warned), warned
        assert len({w.split()[2] for w in warned}) == 3  # one per primary, named
    finally:
        for shard in range(keys.shards):
            client.delete(keys.head(shard) + "x", keys.replication_mark(shard))
        client.delete(keys.replication_mark())
        client.close()


def _run(client: RedisCluster, keys: list[str]) -> list[object]:
    """One pipelined EVALSHA per key (every slot, every primary) through crawlhive's ScriptSet."""
    script_set = scripts(client)

    def build() -> redis.client.Pipeline:
        pipe = client.pipeline(transaction=False)
        for key in keys:
            script_set.queue(pipe, "domain_defer", [key], ["example.com", 0])
        return pipe  # type: ignore[return-value]

    return script_set.execute(build)


def _getkeys_calls(cluster: LocalCluster) -> int:
    stats = [node.client().info("commandstats") for node in cluster.nodes]
    return sum(int(s.get("cmdstat_command|getkeys", {}).get("calls", 0)) for s in stats)


def test_pipelined_scripts_are_routed_by_their_first_key_without_asking_a_node(cluster: LocalCluster) -> None:
    """redis-py 8's blocking cluster pipeline asks a node ``COMMAND GETKEYS`` for each ``EVALSHA``
    it routes itself: 96,500 round trips took ``GET /crawls`` of 500 crawls past 30 s. ScriptSet.queue
    names each call's node, so a pipeline of them asks nothing; each call still runs where its key is."""
    client = cluster_client(cluster)
    keys = [f"ch:route:{i}" for i in range(48)]
    try:
        _run(client, keys)  # loads the scripts where missing
        before = _getkeys_calls(cluster)
        assert len(_run(client, keys)) == len(keys)
        assert _getkeys_calls(cluster) == before
        for key in keys:  # domain_defer wrote each key on the node that owns it
            assert client.zscore(key, "example.com") is not None
    finally:
        for key in keys:
            client.delete(key)
        client.close()


def test_scripts_pipelined_across_slots_run_per_node_and_survive_a_primary_failover(cluster: LocalCluster) -> None:
    client = cluster_client(cluster)
    keys = [f"ch:domains:link:{i}" for i in range(48)]
    try:
        assert len(_run(client, keys)) == len(keys)  # first run loads the scripts (NOSCRIPT) on every primary
        victim_port = client.get_node_from_key(keys[0]).port
        victim = next(n for n in cluster.primaries if n.port == victim_port)
        cluster.kill(victim)
        deadline = time.monotonic() + 30
        while True:  # the replica is promoted after the node timeout; it has no scripts loaded
            try:
                assert len(_run(client, keys)) == len(keys)
                break
            except (redis.ConnectionError, redis.exceptions.ClusterDownError, redis.TimeoutError):
                assert time.monotonic() < deadline, "no failover within 30 s"
                time.sleep(0.2)
        assert client.get_node_from_key(keys[0]).port != victim_port
        cluster.restart(victim)  # as a supervisor would: it rejoins as a replica
        cluster.wait_healthy()
        assert victim.client().info("replication")["role"] == "slave"
    finally:
        client.close()
