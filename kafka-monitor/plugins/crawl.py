"""Crawl requests (docs/contract.md §2.2): seeds into the Redis frontier."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Self

from crawlhive.kafka_monitor.plugins import Incoming, IncomingPlugin
from crawlhive.utils.contract.messages import CrawlRequest
from crawlhive.utils.frontier import Frontier, seed_from_request
from crawlhive.utils.state.control import ORIGIN_MARKER_TTL_S

if TYPE_CHECKING:
    from crawlhive.kafka_monitor.monitor import KafkaMonitor
    from crawlhive.utils.backends.redis_types import RedisPipeline

logger = logging.getLogger(__name__)


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

        The same round trip reads the stop marker of each seed's crawl (§3.9): a seed whose record
        was sent before its crawl's stop took effect is not queued. Records of several partitions
        are read in no particular order, so a stop sent after a seed can be handled first; queueing
        the seed then would start the stopped crawl again, for ever when no crawler serves it.
        """
        keys = self.frontier.keys
        seeds = [seed_from_request(r.message, r.origin) for r in requests]
        for request, seed in zip(requests, seeds, strict=True):
            if request.trace is not None:  # tracing on (§26.3): the seed's page continues its trace
                seed.trace = request.trace
        # the marker is in the seed's frontier shard, beside its queue (one slot on a cluster)
        markers = [
            keys.seed_origin(r.origin, keys.shard_of(seed.domain)) for r, seed in zip(requests, seeds, strict=True)
        ]
        pipe_read = self.frontier.redis.pipeline(transaction=False)
        for marker, seed in zip(markers, seeds, strict=True):
            pipe_read.get(marker)
            pipe_read.get(keys.crawl_stopped(seed.spiderid, seed.appid, seed.crawlid, keys.shard_of(seed.domain)))
        replies = pipe_read.execute() if markers else []
        fresh = []
        for request, seed, marker, before, stopped in zip(
            requests, seeds, markers, replies[::2], replies[1::2], strict=True
        ):
            if before is not None:
                continue
            if stopped is not None and request.sent_ms and request.sent_ms <= stopped_at_ms(stopped):
                logger.info(
                    "seed %s of crawl %s/%s not queued: sent before the crawl's stop, read after it",
                    seed.url,
                    seed.appid,
                    seed.crawlid,
                    extra={"appid": seed.appid, "crawlid": seed.crawlid, "spiderid": seed.spiderid},
                )
                continue
            fresh.append((seed, marker))
        for _, marker in fresh:
            pipe.set(marker, b"1", ex=ORIGIN_MARKER_TTL_S)
        self.frontier.push([seed for seed, _ in fresh], pipe)


def stopped_at_ms(marker: bytes | str) -> int:
    """When a crawl's stop took effect (epoch ms), from its stop marker's value; 0 for a marker of
    an earlier release (``1``) or an unreadable one: any seed counts as sent after it."""
    try:
        value = int(marker)
    except (TypeError, ValueError):
        return 0
    return value if value > 1 else 0
