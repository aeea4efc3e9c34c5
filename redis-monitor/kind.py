"""The redis-monitor as a process kind (:mod:`crawlhive.utils.process.kinds`): ``crawlhive redis-monitor``."""

from __future__ import annotations

from crawlhive.utils.process.kinds import ProcessKind, UpGroup, worker_entry

KIND = ProcessKind(
    name="redis-monitor",
    summary="run one redis-monitor process",
    epilog="example:\n  REDIS_URL=redis://db:6379/0 KAFKA_BOOTSTRAP_SERVERS=kafka:9092 crawlhive redis-monitor",
    entry=worker_entry("crawlhive.redis_monitor.monitor.RedisMonitor", "redis-monitor"),
    order=20,
    up=(UpGroup(),),
    compose=("redis-monitor",),
    consumes=("control", "frontier", "tails"),
    produces=("outbound_firehose", "outbound_<appid>", "dead_letter", "frontier", "tails"),
)
