"""recrawl (docs/contract.md §19): release due pages into the frontier, end crawls past ``until``.

Every tick, a script per frontier shard (:meth:`Schedule.release_due`) moves up to
RECRAWL_RELEASE_BATCH due pages from the shard's schedule into the crawl queues, called again while
a shard has more due (for at most RELEASE_SHARE of a tick, so control requests are not held up),
and idle crawlers of their spider type are woken. A batch is one script: a smaller one holds Redis
for less time at once, a larger one costs fewer calls (bench/README.md: recrawl_release). Each
release is atomic (the page's state says a visit is on in the same script), so several
redis-monitors may run this plugin: a page is released once.

Every few seconds it also walks the recurring crawls (``recurring`` in the crawl record): it renews
their records (a crawl whose pages are visited weekly keeps its record and option sets), takes the
pages that left their schedules off their appid's count (§19.1's limits), and a crawl past its
``until`` whose schedule is empty stops recurring, so the completion check ends it with a
``complete`` event (§19.6).

Why the redis-monitor and not the crawlers: see ``utils/frontier/recrawl.py``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Self

from redis.exceptions import RedisError

from crawlhive.redis_monitor.plugins import MonitorPlugin
from crawlhive.utils.config.errors import NotConfigured
from crawlhive.utils.contract.recrawl import RecrawlConfig
from crawlhive.utils.frontier.model import text
from crawlhive.utils.frontier.recrawl import RECORD_FIELD, RECURRING_FIELD, Schedule
from crawlhive.utils.frontier.writer import wake_message

if TYPE_CHECKING:
    from crawlhive.redis_monitor.monitor import RedisMonitor
    from crawlhive.utils.backends.keys import Keys
    from crawlhive.utils.backends.redis_types import RedisClient

logger = logging.getLogger(__name__)

#: Seconds between two walks of the recurring crawls (records renewed, ``until`` checked).
CRAWLS_EVERY_S = 5.0
#: Share of REDIS_MONITOR_TICK_S (0.25 s) one tick may spend releasing (batch after batch while a
#: shard has more due pages): a tick releases thousands of pages (a 500-page batch takes Redis
#: 4-8 ms), a larger backlog drains over the next ticks, and control requests wait at most that.
RELEASE_SHARE = 0.8


class RecrawlReleaser(MonitorPlugin):
    """Releases due pages every tick; renews and ends recurring crawls every few seconds."""

    name = "RecrawlReleaser"
    tick_every = 1

    def __init__(
        self, redis: RedisClient, keys: Keys, schedule: Schedule, batch: int, record_ttl_s: float, budget_s: float = 0.2
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.schedule = schedule
        self.batch = batch
        self.budget_s = budget_s
        """Seconds a tick may spend releasing (RELEASE_SHARE of REDIS_MONITOR_TICK_S)."""
        self.record_ttl_s = int(record_ttl_s)
        self._crawls_at = 0.0
        self.released = 0
        """Pages this plugin released (tests and logs)."""

    @classmethod
    def from_monitor(cls, monitor: RedisMonitor) -> Self:
        settings = monitor.settings
        if not settings.RECRAWL_ENABLED:
            raise NotConfigured("RECRAWL_ENABLED is false")
        schedule = Schedule(monitor.redis, monitor.keys, settings.RECRAWL_STATE_BUCKETS, settings.CRAWL_RECORD_TTL)
        return cls(
            monitor.redis,
            monitor.keys,
            schedule,
            settings.RECRAWL_RELEASE_BATCH,
            settings.CRAWL_RECORD_TTL,
            RELEASE_SHARE * settings.REDIS_MONITOR_TICK_S,
        )

    def tick(self) -> None:
        lanes: dict[tuple[str, bool], set[int]] = {}
        pending = list(range(self.keys.shards))
        deadline = time.monotonic() + self.budget_s
        while pending:
            more = []
            for shard in pending:
                released, again = self.schedule.release_due(shard, self.batch)
                for spider, render, count in released:
                    lanes.setdefault((spider, render), set()).add(shard)
                    self.released += count
                if again:
                    more.append(shard)
            pending = more if time.monotonic() < deadline else []
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
        with an empty schedule (they then complete); write each crawl's true count of scheduled
        pages into its appid's count (what crawlers check a crawl's cap and
        APPID_MAX_SCHEDULED_PAGES against, §19.1: they count the pages that join, only the shards
        see a page leave, and a first visit whose crawler died never ends)."""
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
            self.schedule.sync_count(spider, appid, crawlid)
            try:
                config = RecrawlConfig.from_json(raw)
            except (ValueError, KeyError, TypeError):
                continue
            if config.until and now > config.until and not self.schedule.counts(spider, appid, crawlid)["scheduled"]:
                self.redis.hdel(record, RECURRING_FIELD)
                logger.info("crawl %s/%s is past its recrawl until: it ends", appid, crawlid)


__all__ = ["RecrawlReleaser"]
