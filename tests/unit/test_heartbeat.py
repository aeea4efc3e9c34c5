"""Heartbeats, node maps and the health check, on a real Redis."""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

import pytest
import redis

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.state.heartbeat import Heartbeat, check_health, live_nodes, new_node_id


@pytest.fixture
def keys(names: Any) -> Keys:
    return Keys(names.key_prefix)


def _redis_now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1_000_000


def test_node_ids_are_12_lowercase_hex_and_fresh() -> None:
    ids = {new_node_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(re.fullmatch(r"[0-9a-f]{12}", node_id) for node_id in ids)


def test_beat_writes_the_key_with_expiry_and_indexes_it(redis_client: redis.Redis, keys: Keys) -> None:
    beat = Heartbeat(redis_client, keys, "kafka-monitor", "e2be29329410", "worker-1", 120.0)
    beat.beat()
    payload = json.loads(redis_client.get(keys.heartbeat("kafka-monitor", "e2be29329410")))
    assert payload["host"] == "worker-1" and payload["node_id"] == "e2be29329410"
    assert payload["component"] == "kafka-monitor" and payload["pid"] == os.getpid()
    assert isinstance(payload["started"], float)
    assert 119_000 < redis_client.pttl(beat.key) <= 120_000
    score = redis_client.zscore(keys.heartbeat_index("kafka-monitor"), "e2be29329410")
    assert score is not None and abs(score - (_redis_now(redis_client) + 120.0)) < 0.5  # expiry, Redis clock
    assert check_health(redis_client, keys, "kafka-monitor", "e2be29329410") is True


def test_live_nodes_is_the_node_map(redis_client: redis.Redis, keys: Keys) -> None:
    assert live_nodes(redis_client, keys, "kafka-monitor") == {}
    for node_id, host in [("bbbbbbbbbbbb", "worker-1"), ("aaaaaaaaaaaa", "worker-1"), ("cccccccccccc", "worker-2")]:
        Heartbeat(redis_client, keys, "kafka-monitor", node_id, host, 60.0).beat()
    Heartbeat(redis_client, keys, "redis-monitor", "dddddddddddd", "worker-1", 60.0).beat()
    assert live_nodes(redis_client, keys, "kafka-monitor") == {
        "worker-1": ["aaaaaaaaaaaa", "bbbbbbbbbbbb"],
        "worker-2": ["cccccccccccc"],
    }
    assert live_nodes(redis_client, keys, "redis-monitor") == {"worker-1": ["dddddddddddd"]}


def test_stop_removes_key_and_index_entry(redis_client: redis.Redis, keys: Keys) -> None:
    beat = Heartbeat(redis_client, keys, "rest", new_node_id(), "scdev", 60.0)
    beat.beat()
    beat.stop()
    assert redis_client.exists(beat.key) == 0
    assert redis_client.zcard(keys.heartbeat_index("rest")) == 0
    assert check_health(redis_client, keys, "rest", beat.node_id) is False
    assert live_nodes(redis_client, keys, "rest") == {}


def test_heartbeat_expires_after_its_timeout(redis_client: redis.Redis, keys: Keys) -> None:
    dying = Heartbeat(redis_client, keys, "crawler", new_node_id(), "worker-1", 1.0)
    living = Heartbeat(redis_client, keys, "crawler", new_node_id(), "worker-1", 1.0)
    dying.beat()
    living.beat()
    assert check_health(redis_client, keys, "crawler", dying.node_id) is True
    for _ in range(3):  # the living one renews twice as often as it must
        time.sleep(0.4)
        living.beat()
    assert check_health(redis_client, keys, "crawler", dying.node_id) is False
    assert check_health(redis_client, keys, "crawler", living.node_id) is True
    assert live_nodes(redis_client, keys, "crawler") == {"worker-1": [living.node_id]}
    assert redis_client.zrange(keys.heartbeat_index("crawler"), 0, -1) == [living.node_id.encode()]  # pruned


def test_index_entry_without_key_is_dropped(redis_client: redis.Redis, keys: Keys) -> None:
    beat = Heartbeat(redis_client, keys, "crawler", new_node_id(), "worker-1", 60.0)
    beat.beat()
    redis_client.delete(beat.key)  # e.g. a flush of the heartbeat alone
    assert live_nodes(redis_client, keys, "crawler") == {}
    assert redis_client.zcard(keys.heartbeat_index("crawler")) == 0


def test_timeout_must_be_positive(redis_client: redis.Redis, keys: Keys) -> None:
    with pytest.raises(ValueError, match="HEARTBEAT_TIMEOUT"):
        Heartbeat(redis_client, keys, "crawler", new_node_id(), "worker-1", 0)
