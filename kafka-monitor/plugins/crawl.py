"""Crawl requests (docs/contract.md §2.2): seeds into the Redis frontier."""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from crawlhive.kafka_monitor.plugins import Incoming, IncomingPlugin
from crawlhive.utils.contract.messages import CrawlRequest
from crawlhive.utils.control import ORIGIN_MARKER_TTL_S
from crawlhive.utils.frontier import Frontier, seed_from_request

if TYPE_CHECKING:
    from crawlhive.kafka_monitor.monitor import KafkaMonitor
    from crawlhive.utils.redis_types import RedisPipeline


class ScraperHandler(CrawlRequest, IncomingPlugin):
    """Queues each crawl request as a seed in its spider's per-domain frontier."""

    def __init__(self, frontier: Frontier) -> None:
        self.frontier = frontier

    @classmethod
    def from_monitor(cls, monitor: KafkaMonitor) -> Self:
        return cls(Frontier.from_settings(monitor.redis, monitor.settings))

    def handle(self, requests: list[Incoming], pipe: RedisPipeline) -> None:
        """Queue the seeds of *requests* whose Kafka record was never queued before.

        A record's seed is queued together with a marker of its origin (same ``MULTI``), so a
        redelivered record finds the marker and queues nothing, even when its seed was crawled
        meanwhile (``ZADD NX`` alone would queue it again, and its links after it). One round trip
        reads the markers first; a deliberate resubmission is a new record, so it is queued.
        """
        keys = self.frontier.keys
        seeds = [seed_from_request(r.message, r.origin) for r in requests]
        # the marker is in the seed's frontier shard, beside its queue (one slot on a cluster)
        markers = [
            keys.seed_origin(r.origin, keys.shard_of(seed.domain)) for r, seed in zip(requests, seeds, strict=True)
        ]
        pipe_read = self.frontier.redis.pipeline(transaction=False)
        for marker in markers:
            pipe_read.get(marker)
        queued_before = pipe_read.execute() if markers else []
        fresh = [(s, m) for s, m, before in zip(seeds, markers, queued_before, strict=True) if before is None]
        for _, marker in fresh:
            pipe.set(marker, b"1", ex=ORIGIN_MARKER_TTL_S)
        self.frontier.push([seed for seed, _ in fresh], pipe)
