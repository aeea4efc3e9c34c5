"""The REST service's long-lived state: clients, validator, answers, heartbeat (one per process).

:class:`RestService` is built once from the settings, started by the app's lifespan and stopped at
shutdown. Its methods that touch Redis or Kafka block; the HTTP handlers call them in worker threads
so that a waiting request never blocks the others.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

from redis.exceptions import RedisError

from crawlhive.rest.answers import WAITER_MARGIN_S, AnswerBook, KafkaLink, incoming_record
from crawlhive.rest.cluster import ClusterView
from crawlhive.rest.metrics import RestMetrics
from crawlhive.utils.backends.kafka_clients import consumer_lag
from crawlhive.utils.backends.redis_clients import redis_from_settings
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.process.intake import request_validator
from crawlhive.utils.process.loop import cluster_gone
from crawlhive.utils.process.worker import ProcessContext
from crawlhive.utils.state.sinks import failing_sinks

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

#: Seconds a read of the cleaners' consumer lag is reused (each read opens a Kafka consumer).
CLEANER_LAG_CACHE_S = 10.0

COMPONENT = "rest"


def new_uuid() -> str:
    """A server-generated request uuid (32 hex characters, within the schemas' 40)."""
    return uuidlib.uuid4().hex


class RestService:
    """Everything the endpoints share.

    Args:
        settings: the process settings.
        redis: a bytes client on REDIS_URL (not checked: ``GET /`` reports whether it answers).
        owns_redis: close *redis* in :meth:`stop`.
    """

    def __init__(self, settings: Settings, redis: RedisClient, *, owns_redis: bool = False) -> None:
        self.settings = settings
        self.redis = redis
        self.context = ProcessContext.create(settings, redis, COMPONENT, owns_redis=owns_redis)
        self.keys = self.context.keys
        self.node_id = self.context.node_id
        self.heartbeat = self.context.heartbeat
        self.started = time.monotonic()
        self.validator = request_validator(settings)
        self.wait_s = settings.WAIT_FOR_RESPONSE_TIME
        self.book = AnswerBook(
            redis,
            self.keys,
            settings.POLL_RESULT_TTL,
            self.wait_s + settings.KAFKA_FEED_TIMEOUT + WAITER_MARGIN_S,
        )
        self.kafka = KafkaLink(settings, self.book)
        kinds = {plugin.name: plugin.kind for plugin in self.validator.plugins}
        self.view = ClusterView(redis, settings, kinds)
        self.metrics = RestMetrics(self.view, lambda: self.book.waiting(), lambda: self.book.stored, self.cleaner_lag)
        self._lag: tuple[float, float] = (0.0, float("nan"))  # (read at, value) of cleaner_lag
        self._beat_interval_s = self.context.heartbeat_interval_s
        self._stop = threading.Event()
        self._beater: threading.Thread | None = None
        #: Why the service stopped for good (the ``crawlhive up`` it used has exited), or None.
        self.gone: str | None = None
        #: Called (in the heartbeat thread) when it is gone; the server sets it to stop serving.
        self.on_gone: Callable[[], None] = lambda: None

    def cleaner_lag(self) -> float:
        """Records of crawled_firehose the cleaners' group has not committed (§13), read at most
        every CLEANER_LAG_CACHE_S; NaN while the broker cannot say. The embedded broker counts
        record batches here, Apache Kafka records."""
        at, value = self._lag
        if time.monotonic() - at >= CLEANER_LAG_CACHE_S:
            try:
                value = float(
                    consumer_lag(self.settings, self.settings.topic("crawled_firehose"), self.settings.cleaner_group)
                )
            except Exception:  # noqa: BLE001 - a metric must not fail the scrape; NaN says "unknown"
                logger.debug("reading the cleaners' lag failed", exc_info=True)
                value = float("nan")
            self._lag = (time.monotonic(), value)
        return value

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        return cls(settings, redis_from_settings(settings), owns_redis=True)

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the Kafka listener and the heartbeat thread; returns at once (backends may be down)."""
        self.kafka.start()
        self._beater = threading.Thread(target=self._beat_loop, name="rest-heartbeat", daemon=True)
        self._beater.start()
        logger.info("REST service %s started", self.node_id)

    def stop(self) -> None:
        """Stop the threads, close the Kafka clients, remove the heartbeat. Never raises."""
        self._stop.set()
        self.kafka.stop()
        if self._beater is not None:
            self._beater.join(timeout=5)
        self.context.close()

    def _beat_loop(self) -> None:
        failing = False
        while not self._stop.is_set():
            try:
                self.heartbeat.beat()
                if failing:
                    logger.info("REST heartbeat written again")
                failing = False
            except RedisError as exc:
                gone = cluster_gone(self.settings)
                if gone is not None:  # the `crawlhive up` it used has exited: stop (run_rest exits 1)
                    self.gone = gone
                    self.context.backends_gone = True
                    self.on_gone()
                    return
                if not failing:  # log once per outage
                    logger.warning("REST heartbeat failed (%r); check REDIS_URL", exc)
                failing = True
            self._stop.wait(self._beat_interval_s)

    # --- health ------------------------------------------------------------------------------

    def redis_connected(self) -> bool:
        """Ping Redis (blocking)."""
        try:
            return bool(self.redis.ping())
        except (RedisError, OSError):
            return False

    def health(self) -> dict[str, Any]:
        """The ``GET /`` body (blocking: pings Redis). ``node_health`` is YELLOW, not GREEN, while
        a sink reports that it fails (its store or Kafka unreachable; §20.7)."""
        kafka, redis = self.kafka.connected(), self.redis_connected()
        health = {2: "GREEN", 1: "YELLOW", 0: "RED"}[int(kafka) + int(redis)]
        if health == "GREEN" and self._sinks_failing():
            health = "YELLOW"
        return {
            "kafka_connected": kafka,
            "redis_connected": redis,
            "uptime_sec": int(time.monotonic() - self.started),
            "my_id": self.node_id,
            "node_health": health,
        }

    def _sinks_failing(self) -> bool:
        try:
            return bool(failing_sinks(self.redis, self.keys, self.settings.HEARTBEAT_TIMEOUT))
        except (RedisError, OSError):
            return False

    # --- feeding -----------------------------------------------------------------------------

    async def feed(
        self, request: dict[str, Any], headers: list[tuple[str, bytes]] | None = None
    ) -> dict[str, Any] | None:
        """Produce a validated *request* as received, with the record *headers* (its trace
        context, docs/contract.md §26.3); with a ``uuid``, wait for its answer.

        Returns:
            None (no uuid), the answer message, or ``{"poll_id": uuid}`` when no answer came within
            WAIT_FOR_RESPONSE_TIME (the answer will then be stored for ``/poll``).

        Raises:
            RecordTooLarge: the request as produced is larger than a Kafka record may be (before
                anything is registered or sent).
            KafkaUnavailable: not connected or no ack within KAFKA_FEED_TIMEOUT.
        """
        payload = incoming_record(request)
        self.kafka.check_size(payload)
        uuid = request.get("uuid")
        if not isinstance(uuid, str):
            await asyncio.to_thread(self.kafka.produce, payload, headers)
            return None
        future = self.book.register(uuid)  # before producing: the answer may be very fast
        delivered = False
        try:
            await asyncio.to_thread(self.book.mark_waiting, uuid)
            await asyncio.to_thread(self.kafka.produce, payload, headers)
            try:
                answer = await asyncio.wait_for(asyncio.shield(future), self.wait_s)
            except TimeoutError:
                if self.book.withdraw(uuid, future):
                    return {"poll_id": uuid}
                answer = await future  # claimed just now: its result is being set in the loop
            delivered = True
            return answer
        finally:
            if self.book.withdraw(uuid, future):
                future.cancel()
            if not delivered:
                # Our listener must now store the answer for /poll; a delivered answer keeps the
                # marker until it expires, so that slower instances do not store a copy.
                await asyncio.to_thread(self.book.unmark_waiting, uuid)
