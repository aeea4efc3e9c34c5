"""The worker skeleton both monitors run, against a real Redis: one rule for transient errors,
back-off and retry, a teardown that never raises and always removes the heartbeat."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from crawlhive.utils.config.settings import Settings
from crawlhive.utils.process.worker import ProcessContext, Worker
from crawlhive.utils.state.heartbeat import live_nodes


def live(client: redis.Redis, worker: Any, component: str) -> list[str]:
    """Node ids of *component*'s live heartbeats, whatever their host."""
    return sorted(node for nodes in live_nodes(client, worker.keys, component).values() for node in nodes)


class Scripted(Worker):
    """Raises what it is told to, iteration by iteration."""

    component = "test-worker"

    def __init__(self, settings: Settings, client: redis.Redis, script: list[BaseException | None]) -> None:
        super().__init__(settings, client)
        self.script = list(script)
        self.setups = self.iterations = self.closes = 0
        self.seen_live: list[str] = []

    def setup(self) -> None:
        self.setups += 1
        self.beat(force=True)

    def run_once(self) -> Any:
        self.iterations += 1
        self.seen_live = live(self.redis, self, self.component)
        error = self.script.pop(0) if self.script else None
        if error is not None:
            raise error
        if not self.script:
            self.stopping = True

    def close(self) -> None:
        self.closes += 1
        raise RuntimeError("closing failed")  # teardown reports it and goes on


def test_transient_errors_back_off_and_retry_others_end_the_loop_after_teardown(
    redis_settings: Settings, redis_client: redis.Redis
) -> None:
    worker = Scripted(redis_settings, redis_client, [RedisConnectionError("gone"), ResponseError("LOADING wait"), None])
    worker.backoff.first_s = 0.01
    worker.run()
    assert (worker.setups, worker.iterations, worker.closes) == (1, 3, 1)
    assert worker.seen_live == [worker.node_id]  # its heartbeat was there while it ran
    assert live(redis_client, worker, "test-worker") == []  # and removed by the teardown

    fatal = Scripted(redis_settings, redis_client, [ResponseError("WRONGTYPE Operation against a key")])
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        fatal.run()
    assert fatal.closes == 1 and live(redis_client, fatal, "test-worker") == []


def test_a_process_context_is_built_once_with_a_fresh_node_id(
    redis_settings: Settings, redis_client: redis.Redis
) -> None:
    first = ProcessContext.create(redis_settings, redis_client, "rest")
    second = ProcessContext.create(redis_settings, redis_client, "rest", heartbeat_extra={"spider": "link"})
    assert first.node_id != second.node_id and len(first.node_id) == 12
    assert first.keys.prefix == redis_settings["REDIS_KEY_PREFIX"]
    second.heartbeat.beat()
    assert live(redis_client, second, "rest") == [second.node_id]
    second.close()
    assert live(redis_client, second, "rest") == []


def test_batch_counts_add_subtract_and_name_their_outcomes() -> None:
    """The counts every consumer worker (kafka-monitor, cleaner, sink) keeps and reports."""
    from dataclasses import dataclass

    from crawlhive.utils.process.worker import BatchCounts

    @dataclass
    class Counts(BatchCounts):
        cleaned: int = 0
        dead_letters: int = 0

    totals = Counts()
    totals.add(Counts(records=3, cleaned=2, dead_letters=1))
    mark = Counts(records=3, cleaned=2, dead_letters=1)
    totals.add(Counts(records=5, cleaned=5))
    assert totals == Counts(records=8, cleaned=7, dead_letters=1)
    assert totals.minus(mark) == Counts(records=5, cleaned=5, dead_letters=0)
    assert totals.outcomes() == "7 cleaned, 1 dead letters"


def test_the_liveness_file_is_renewed_by_the_loop_while_redis_fails(
    redis_settings: Settings, redis_client: redis.Redis, tmp_path: Any
) -> None:
    """HEARTBEAT_FILE (the liveness probe's): each heartbeat renews it before trying Redis, and the
    loop renews it after every iteration, failed ones included, so a Redis outage never makes a
    running process look dead."""
    import os
    import time

    from crawlhive.utils.state.heartbeat import Heartbeat

    alive = tmp_path / "alive"
    dead = redis.Redis(port=1, socket_connect_timeout=0.2)  # nothing listens there
    keys = ProcessContext.create(redis_settings, redis_client, "t").keys
    beat = Heartbeat(dead, keys, "t", "n1", "h", 30.0, alive_file=str(alive))
    with pytest.raises(redis.RedisError):
        beat.beat()
    assert time.time() - alive.stat().st_mtime < 5  # renewed although Redis refused

    settings = redis_settings.copy_with(HEARTBEAT_FILE=str(tmp_path / "loop"))
    worker = Scripted(settings, redis_client, [RedisConnectionError("gone"), RedisConnectionError("gone"), None])
    worker.backoff.first_s = 0.01
    ages: list[float] = []
    run_once = worker.run_once

    def aged() -> Any:
        loop = tmp_path / "loop"
        ages.append(time.time() - loop.stat().st_mtime)
        os.utime(loop, (0, 0))  # as if stale: only the loop's renewal makes it fresh again
        return run_once()

    worker.run_once = aged  # type: ignore[method-assign]
    worker.run()
    assert len(ages) == 3 and all(age < 5 for age in ages), ages
