"""The kafka-monitor as a process kind (:mod:`crawlhive.utils.kinds`): ``crawlhive kafka-monitor``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from crawlhive.utils.kinds import ProcessKind, UpGroup

if TYPE_CHECKING:
    from crawlhive.utils.settings import Settings


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Run one kafka-monitor until SIGINT/SIGTERM (0 after a graceful stop, 1 when forced)."""
    from crawlhive.kafka_monitor.monitor import KafkaMonitor
    from crawlhive.utils.worker import run_until_stopped

    return run_until_stopped(KafkaMonitor.from_settings(settings), "kafka-monitor")


KIND = ProcessKind(
    name="kafka-monitor",
    summary="run one kafka-monitor process",
    epilog="example:\n  REDIS_URL=redis://db:6379/0 KAFKA_BOOTSTRAP_SERVERS=kafka:9092 crawlhive kafka-monitor",
    entry=run,
    order=10,
    up=(UpGroup(),),
    compose=("kafka-monitor",),
)
