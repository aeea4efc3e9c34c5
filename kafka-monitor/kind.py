"""The kafka-monitor as a process kind (:mod:`crawlhive.utils.process.kinds`): ``crawlhive kafka-monitor``."""

from __future__ import annotations

from crawlhive.utils.process.kinds import ProcessKind, UpGroup, worker_entry

KIND = ProcessKind(
    name="kafka-monitor",
    summary="run one kafka-monitor process",
    epilog="example:\n  REDIS_URL=redis://db:6379/0 KAFKA_BOOTSTRAP_SERVERS=kafka:9092 crawlhive kafka-monitor",
    entry=worker_entry("crawlhive.kafka_monitor.monitor.KafkaMonitor", "kafka-monitor"),
    order=10,
    up=(UpGroup(),),
    compose=("kafka-monitor",),
    consumes=("incoming",),
    produces=("frontier", "control", "dead_letter"),
)
