"""utils/backends/replication.py on a single Redis (the cluster case: tests/integration/test_redis_cluster.py)."""

from __future__ import annotations

import logging

import pytest
import redis

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.replication import ReplicaWait


def test_no_wait_asked_sends_nothing(redis_client: redis.Redis, names: object) -> None:
    keys = Keys(names.key_prefix)  # type: ignore[attr-defined]
    waiter = ReplicaWait(redis_client, keys, replicas=0, timeout_ms=1000)
    waiter.wait()
    assert waiter.waits == 0 and not redis_client.exists(keys.replication_mark())


def test_a_redis_without_replicas_times_out_warns_once_a_minute_and_goes_on(
    redis_client: redis.Redis, names: object, caplog: pytest.LogCaptureFixture
) -> None:
    keys = Keys(names.key_prefix)  # type: ignore[attr-defined]
    waiter = ReplicaWait(redis_client, keys, replicas=1, timeout_ms=50)
    with caplog.at_level(logging.WARNING, logger="crawlhive.utils.backends.replication"):
        waiter.wait()
        waiter.wait()
    assert waiter.waits == 2
    assert redis_client.pttl(keys.replication_mark()) > 0  # the mark written before each WAIT
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "0 of REDIS_WAIT_REPLICAS=1 replicas" in warning and "REDIS_WAIT_TIMEOUT=50 ms" in warning
