"""Redis-only mode (docs/contract.md §12): seeds from a Redis list, for developing a spider without Kafka.

``crawlhive crawler --spider NAME --no-kafka`` (``KAFKA_ENABLED=false``) opens no Kafka connection.
Its :class:`SeedReader` takes the entries of the scrapy-redis style list ``REDIS_START_URLS_KEY``
(default ``<name>:start_urls``): each one a URL (a crawl of ``appid`` ``redis``, ``crawlid`` = the
spider's name) or a JSON crawl request (§2.2), validated by the kafka-monitor's own validator, so
a request behaves here as it will on the cluster. Accepted seeds join the frontier; anything else
becomes a §6 a dead letter in ``<name>:dead_letter``. Items and crawl dead letters go to Redis lists
too (:class:`~crawlhive.crawler.emitter.RedisOutput`).

Why not scrapy-redis's ``RedisSpider``: it turns each entry straight into a Scrapy request of the
one process that popped it, with no validation, frontier, throttle or lease; an entry it popped is
lost if that process dies. Here entries leave the list in the same ``MULTI`` that queues their
seeds, so a crawler killed at any moment loses none. Its list name and entry format are kept.

With no redis-monitor running (Redis-only mode needs none), the crawler also reclaims the expired
leases of its spider type itself, so the work of a killed crawler is crawled again.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from redis.exceptions import WatchError

from crawlhive.utils.backends.keys import SpiderLists
from crawlhive.utils.backends.redis_clients import is_cluster
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.contract.encoding import parse_json
from crawlhive.utils.contract.records import validation_dead_letter
from crawlhive.utils.contract.validation import Accepted
from crawlhive.utils.frontier import Frontier, FrontierRequest, seed_from_request
from crawlhive.utils.process.intake import request_validator

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

#: Entries taken from the list per pass.
BATCH = 100
#: Milliseconds a crawler may hold a start-URLs list's lock on a Redis Cluster (one batch's work).
LOCK_MS = 30_000
#: The appid of a seed given as a bare URL.
URL_APPID = "redis"


class SeedReader:
    """Moves the entries of a spider's start-URLs list into the frontier (see the module docstring).

    Args:
        redis: a bytes client.
        settings: the validator's settings (plugins, limits, SPIDER_IDS) and the frontier's.
        spider: the spider's name (default ``spiderid`` of its seeds, ``crawlid`` of bare URLs).
        start_urls_key: the list read.
        dead_letter_key: the list invalid entries go to.
    """

    def __init__(
        self, redis: RedisClient, settings: Settings, spider: str, start_urls_key: str, dead_letter_key: str
    ) -> None:
        self.redis = redis
        self.spider = spider
        self.start_urls_key = start_urls_key
        self.dead_letter_key = dead_letter_key
        self.lock_key = SpiderLists.start_urls_lock(start_urls_key)
        self.cluster = is_cluster(redis)
        self.frontier = Frontier.from_settings(redis, settings)
        self.validator = request_validator(settings)
        self.max_record_bytes = settings.KAFKA_PRODUCER_MAX_REQUEST_SIZE

    def decide(self, raw: bytes) -> tuple[dict[str, Any] | None, bytes | None]:
        """``(accepted crawl request, None)`` or ``(None, dead letter)`` for one list entry: a bare
        URL stands for ``{"url", "appid": "redis", "crawlid": <spider>}``; a JSON object is taken
        as it is, its ``spiderid`` defaulting to this spider."""
        value: Any
        if raw.lstrip().startswith(b"{"):
            value, error = parse_json(raw)
            if error is not None:
                return None, validation_dead_letter(raw, error, self.max_record_bytes)
            if isinstance(value, dict) and "url" in value:
                value.setdefault("spiderid", self.spider)
        else:
            url = raw.decode("utf-8", errors="replace").strip()
            value = {"url": url, "appid": URL_APPID, "crawlid": self.spider, "spiderid": self.spider}
        verdict = self.validator.validate(value)
        if isinstance(verdict, Accepted) and verdict.plugin.kind == "crawl":
            return verdict.message, None
        reason = (
            verdict.reason
            if not isinstance(verdict, Accepted)
            else f"Invalid request: {verdict.plugin.kind} requests are not read from {self.start_urls_key} "
            "(only crawl requests and URLs are, in Redis-only mode)"
        )
        return None, validation_dead_letter(raw, reason, self.max_record_bytes)

    def run_once(self) -> int:
        """Move up to BATCH entries: seeds to the frontier, the rest to the dead-letter list, and
        the entries off the list, in one ``MULTI`` (retried if another crawler took them first).

        Returns:
            how many entries were taken.
        """
        if self.cluster:
            return self._run_once_cluster()
        while True:
            with self.redis.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(self.start_urls_key)
                    entries: list[bytes] = list(pipe.lrange(self.start_urls_key, 0, BATCH - 1))  # type: ignore[arg-type]
                    if not entries:
                        return 0
                    seeds, letters = self._sort(entries)
                    pipe.multi()
                    self.frontier.push(seeds, pipe)
                    if letters:
                        pipe.rpush(self.dead_letter_key, *letters)
                    pipe.ltrim(self.start_urls_key, len(entries), -1)
                    pipe.execute()
                except WatchError:
                    continue
            self._report(seeds, letters)
            return len(entries)

    def _sort(self, entries: list[bytes]) -> tuple[list[FrontierRequest], list[bytes]]:
        """The seeds of *entries* and the dead letters of the others (:meth:`decide`)."""
        seeds, letters = [], []
        for raw in entries:
            message, letter = self.decide(raw)
            if message is not None:
                seeds.append(seed_from_request(message, f"redis/{self.spider}/{uuid.uuid4().hex}"))
            elif letter is not None:
                letters.append(letter)
        return seeds, letters

    def _report(self, seeds: list[FrontierRequest], letters: list[bytes]) -> None:
        for letter in letters:
            logger.info("rejected an entry of %s: %.300s", self.start_urls_key, letter.decode(errors="replace"))
        if seeds:
            logger.info("%d seeds from %s queued", len(seeds), self.start_urls_key)

    def _run_once_cluster(self) -> int:
        """:meth:`run_once` on a Redis Cluster, where the list, the frontier and the dead-letter
        list are in different slots (no ``WATCH``/``MULTI`` over them): the crawler holding the
        list's lock (``SpiderLists.start_urls_lock``, LOCK_MS) reads a batch, queues it, then
        trims it off the list. A crawler killed before the trim leaves the batch for the next one,
        which queues its seeds again (at least once; the frontier's writes are idempotent)."""
        token = uuid.uuid4().hex.encode()
        if not self.redis.set(self.lock_key, token, nx=True, px=LOCK_MS):
            return 0
        try:
            entries: list[bytes] = list(self.redis.lrange(self.start_urls_key, 0, BATCH - 1))  # type: ignore[arg-type]
            if not entries:
                return 0
            seeds, letters = self._sort(entries)
            pipe = self.redis.pipeline(transaction=False)
            self.frontier.push(seeds, pipe)
            if letters:
                pipe.rpush(self.dead_letter_key, *letters)
            pipe.execute()
            self.redis.ltrim(self.start_urls_key, len(entries), -1)
        finally:
            if self.redis.get(self.lock_key) == token:  # ours still (not expired and taken over)
                self.redis.delete(self.lock_key)
        self._report(seeds, letters)
        return len(entries)
