"""The tail store's shared helpers for its users (the tail mover, the Bloom compactor):
:class:`~crawlhive.utils.frontier.tails.Schedule` (the sweeps) and
:class:`~crawlhive.utils.frontier.tails.StoreHealth` (one WARNING when the store stops answering)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from crawlhive.utils.frontier.tails import Schedule, StoreHealth, TailStore


def test_a_sweep_round_runs_when_due_and_stops_at_the_first_store_failure() -> None:
    schedule = Schedule(every_s=3600, first_s=0)
    swept: list[int] = []
    failures: list[BaseException] = []

    def sweep(shard: int) -> int:
        swept.append(shard)
        if shard == 2:
            raise OSError("the store is down")
        return 0

    schedule.sweep_shards(5, sweep, failures.append)
    assert swept == [0, 1, 2] and [str(e) for e in failures] == ["the store is down"]
    schedule.sweep_shards(5, sweep, failures.append)  # not due again for an hour
    assert swept == [0, 1, 2] and len(failures) == 1


def test_the_store_going_down_warns_once_naming_the_setting(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="crawlhive")
    health = StoreHealth(TailStore(str(tmp_path), "p"), "queues keep their requests in Redis")
    assert not health.up()  # answering all along: nothing said
    for _ in range(3):
        health.down(OSError("no route"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "FRONTIER_TAIL_URL" in warnings[0] and "queues keep their requests" in warnings[0]
    assert health.errors == 3 and health.reason == "no route"
    assert health.up() and health.reason is None
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO][-1].endswith("answers again")
