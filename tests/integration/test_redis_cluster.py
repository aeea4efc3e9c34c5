"""A real local Redis Cluster (3 primaries, 3 replicas; tests/integration/clusterkit.py): what
crawlhive does with one today, and the transport its cluster mode builds on (docs/contract.md §18).

The tests of this module share one cluster and run in order: the last one kills a primary.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from clusterkit import SLOTS, LocalCluster
from redis.cluster import ClusterNode, RedisCluster

from crawlhive.utils import connections
from crawlhive.utils.errors import UnsupportedBackend
from crawlhive.utils.scripts import scripts
from crawlhive.utils.settings import Settings


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


def test_a_component_refuses_a_cluster_node_and_says_why(cluster: LocalCluster) -> None:
    settings = Settings.from_overrides(REDIS_URL=cluster.primaries[0].url)
    client = connections.redis_from_settings(settings)
    try:
        with pytest.raises(UnsupportedBackend, match=r"is a node of a Redis Cluster.*REDIS_URL"):
            connections.check_redis(client, settings)
    finally:
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
