"""recrawl (docs/contract.md §19): release due pages into the frontier, end crawls past ``until``.

Every tick, one script per frontier shard (:meth:`Schedule.release`) moves up to
RECRAWL_RELEASE_BATCH due pages from the shard's schedule into the crawl queues, and idle crawlers
of their spider type are woken. Each release is atomic (the page's state says a visit is on in the
same script), so several redis-monitors may run this plugin: a page is released once.

Every few seconds it also walks the recurring crawls (``recurring`` in the crawl record): it renews
their records (a crawl whose pages are visited weekly keeps its record and option sets), and a
crawl past its ``until`` whose schedule is empty stops recurring, so the completion check ends it
with a ``complete`` event (§19.6).

Why the redis-monitor and not the crawlers: see ``utils/frontier/recrawl.py``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Self

from redis.exceptions import RedisError

from crawlhive.redis_monitor.plugins import MonitorPlugin
from crawlhive.utils.errors import NotConfigured
from crawlhive.utils.frontier.model import text
from crawlhive.utils.frontier.recrawl import RECORD_FIELD, RECURRING_FIELD, RecrawlConfig, Schedule
from crawlhive.utils.frontier.writer import wake_message

if TYPE_CHECKING:
    from redis import Redis

    from crawlhive.redis_monitor.monitor import RedisMonitor
    from crawlhive.utils.keys import Keys

logger = logging.getLogger(__name__)

#: Seconds between two walks of the recurring crawls (records renewed, ``until`` checked).
CRAWLS_EVERY_S = 5.0


class RecrawlReleaser(MonitorPlugin):
    """Releases due pages every tick; renews and ends recurring crawls every few seconds."""

    name = "RecrawlReleaser"
    tick_every = 1

    def __init__(self, redis: Redis, keys: Keys, schedule: Schedule, batch: int, record_ttl_s: float) -> None:
        self.redis = redis
        self.keys = keys
        self.schedule = schedule
        self.batch = batch
        self.record_ttl_s = int(record_ttl_s)
        self._crawls_at = 0.0
        self.released = 0
        """Pages this plugin released (tests and logs)."""

    @classmethod
    def from_monitor(cls, monitor: RedisMonitor) -> Self:
        settings = monitor.settings
        if not settings.getbool("RECRAWL_ENABLED"):
            raise NotConfigured("RECRAWL_ENABLED is false")
        schedule = Schedule(
            monitor.redis, monitor.keys, settings.getint("RECRAWL_STATE_BUCKETS"), settings.getfloat("CRAWL_RECORD_TTL")
        )
        return cls(
            monitor.redis,
            monitor.keys,
            schedule,
            settings.getint("RECRAWL_RELEASE_BATCH"),
            settings.getfloat("CRAWL_RECORD_TTL"),
        )

    def tick(self) -> None:
        lanes: dict[tuple[str, bool], set[int]] = {}
        for shard in range(self.keys.shards):
            for spider, render, count in self.schedule.release(shard, self.batch):
                lanes.setdefault((spider, render), set()).add(shard)
                self.released += count
        for (spider, render), shards in lanes.items():
            try:
                self.redis.publish(self.keys.wake_channel(spider, render), wake_message(shards))
            except RedisError:
                logger.debug("could not wake the crawlers of %s; they find the pages later", spider, exc_info=True)
        now = time.monotonic()
        if now >= self._crawls_at:
            self._crawls_at = now + CRAWLS_EVERY_S
            self.walk_crawls()

    def walk_crawls(self) -> None:
        """Renew the records of recurring crawls; stop the recurrence of those past ``until``
        with an empty schedule (they then complete)."""
        keys = self.keys
        refs = [text(r) for r in self.redis.smembers(keys.active_crawls())]
        if not refs:
            return
        pipe = self.redis.pipeline(transaction=False)
        for ref in refs:
            spider, appid, crawlid = keys.parse_crawl_ref(ref)
            pipe.hmget(keys.crawl(spider, appid, crawlid), RECORD_FIELD, RECURRING_FIELD)
        records = pipe.execute()
        now = int(time.time())
        for ref, (raw, recurring) in zip(refs, records, strict=True):
            if recurring is None or raw is None:
                continue
            spider, appid, crawlid = keys.parse_crawl_ref(ref)
            record = keys.crawl(spider, appid, crawlid)
            self.redis.expire(record, self.record_ttl_s)
            try:
                config = RecrawlConfig.from_json(raw)
            except (ValueError, KeyError, TypeError):
                continue
            if config.until and now > config.until and not self.schedule.counts(spider, appid, crawlid)["scheduled"]:
                self.redis.hdel(record, RECURRING_FIELD)
                logger.info("crawl %s/%s is past its recrawl until: it ends", appid, crawlid)


__all__ = ["RecrawlReleaser"]
