"""The redis-monitor as a process kind (:mod:`crawlhive.utils.kinds`): ``crawlhive redis-monitor``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from crawlhive.utils.kinds import ProcessKind, UpGroup

if TYPE_CHECKING:
    from crawlhive.utils.settings import Settings


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Run one redis-monitor until SIGINT/SIGTERM (0 after a graceful stop, 1 when forced)."""
    from crawlhive.redis_monitor.monitor import RedisMonitor
    from crawlhive.utils.worker import run_until_stopped

    return run_until_stopped(RedisMonitor.from_settings(settings), "redis-monitor")


KIND = ProcessKind(
    name="redis-monitor",
    summary="run one redis-monitor process",
    epilog="example:\n  REDIS_URL=redis://db:6379/0 KAFKA_BOOTSTRAP_SERVERS=kafka:9092 crawlhive redis-monitor",
    entry=run,
    order=20,
    up=(UpGroup(),),
    compose=("redis-monitor",),
)
