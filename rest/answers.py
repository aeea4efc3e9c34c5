"""Answers to requests with a ``uuid``: who waits for them, and where the rest go (docs/contract.md §7.1).

``POST /feed`` of a request with a ``uuid`` registers a waiter in the :class:`AnswerBook` **before**
the request is produced, then awaits an asyncio future: no polling loop. The
:class:`KafkaLink`'s listener thread reads ``<prefix>.outbound_firehose`` from its end (no consumer
group: every REST instance sees every answer) and hands each message with a string ``uuid`` to
:meth:`AnswerBook.deliver`, which resolves the local waiters of that uuid or, when there are none,
stores the message in Redis for ``POST /poll`` on any instance (``keys.poll_result``, TTL
POLL_RESULT_TTL).

Several instances: while an instance waits for a uuid it sets ``keys.poll_waiter(uuid)``, so the
other instances (which consume the same answer) do not store a copy that ``/feed`` already
delivered. If the wait times out first, the waiting instance removes the marker; its own listener then
finds no waiter and stores the answer when it arrives. An answer is therefore stored unless it was
delivered, except in the window where the waiting instance dies while its marker lives. Instances
store an answer once per Kafka record (``keys.poll_origin``), so a slower instance never stores
again an answer that ``/poll`` already took.

The listener also keeps the last dead letters of ``<prefix>.dead_letter`` for the dashboard.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from crawlhive.utils.backends.kafka_clients import ensure_topics, make_consumer, make_producer, record_origin
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.backends.scripts import scripts
from crawlhive.utils.config.errors import BackendUnavailable, CrawlhiveError
from crawlhive.utils.contract.encoding import encode
from crawlhive.utils.contract.fit import RECORD_OVERHEAD_BYTES, value_limit
from crawlhive.utils.contract.kafka_errors import KafkaError, MessageSizeTooLargeError, TopicPartition

if TYPE_CHECKING:
    from crawlhive.utils.backends.keys import Keys
    from crawlhive.utils.backends.rdkafka import RdKafkaConsumer, RdKafkaSendProducer
    from crawlhive.utils.backends.redis_types import RedisPipeline
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

#: Dead letters the dashboard shows (the newest ones this instance consumed).
DEAD_LETTERS_KEPT = 50
#: Milliseconds one poll of the listener blocks; bounds how fast it notices a stop request.
LISTEN_POLL_MS = 200
#: Seconds between two attempts to connect to Kafka while it is unreachable (doubling up to the max).
RECONNECT_FIRST_S, RECONNECT_MAX_S = 0.5, 10.0
#: Extra seconds a ``poll_waiter`` marker lives beyond the longest a ``/feed`` can wait.
WAITER_MARGIN_S = 5.0


#: Fields of a dead letter the dashboard shows: never its ``payload``, which is whatever a stranger
#: sent (docs/contract.md §10.1).
DASHBOARD_LETTER_FIELDS = (
    "stage",
    "error",
    "url",
    "appid",
    "crawlid",
    "spiderid",
    "uuid",
    "retry_times",
    "server_time",
)
#: Characters of a dead letter's text fields the dashboard keeps.
DASHBOARD_LETTER_CHARS = 500


def dashboard_letter(message: dict[str, Any]) -> dict[str, Any]:
    """What the dashboard keeps of a dead letter: the known fields but ``payload``, texts cut short."""
    kept: dict[str, Any] = {"received": time.time()}
    for name in DASHBOARD_LETTER_FIELDS:
        value = message.get(name)
        if isinstance(value, str):
            kept[name] = value[:DASHBOARD_LETTER_CHARS]
        elif isinstance(value, int | float) and not isinstance(value, bool):
            kept[name] = value
    return kept


class KafkaUnavailable(CrawlhiveError):
    """The broker cannot be reached or did not acknowledge within KAFKA_FEED_TIMEOUT."""


class RecordTooLarge(CrawlhiveError):
    """A request larger than one Kafka record may be (KAFKA_PRODUCER_MAX_REQUEST_SIZE); the
    broker is fine, so it says nothing about the connection."""


def incoming_record(request: Any) -> bytes:
    """The record value of *request* on ``<prefix>.incoming``: compact JSON, UTF-8, non-ASCII as is
    (ASCII escapes would make a 960 KB body of accents 2.9 MB). A string no UTF-8 can hold (a lone
    surrogate) is written as its JSON escape (``\\ud800``), as the kafka-monitor reads it back."""
    return encode(request)


def encodable(text: str) -> bool:
    """True if *text* can be part of a Redis key (UTF-8; JSON may carry lone surrogates)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _resolve(future: asyncio.Future[dict[str, Any]], message: dict[str, Any]) -> None:
    if not future.done():
        future.set_result(message)


@dataclass(frozen=True)
class Answer:
    """An outbound message with a string ``uuid``, as consumed from Kafka.

    Attributes:
        origin: :func:`~crawlhive.utils.backends.kafka_clients.record_origin` of its record, the same in every
            REST instance.
    """

    uuid: str
    message: dict[str, Any]
    raw: bytes
    origin: str


class AnswerBook:
    """Waiters for answers by uuid, and the Redis store of answers nobody waited for.

    Args:
        redis: bytes client on REDIS_URL.
        keys: the cluster's key formats (``poll_result``, ``poll_waiter``).
        poll_ttl_s: POLL_RESULT_TTL.
        waiter_ttl_s: lifetime of a ``poll_waiter`` marker (longest wait plus a margin).
    """

    def __init__(self, redis: RedisClient, keys: Keys, poll_ttl_s: float, waiter_ttl_s: float) -> None:
        self.redis = redis
        self.keys = keys
        self.poll_ttl_ms = max(1, int(poll_ttl_s * 1000))
        self.waiter_ttl_ms = max(1, int(waiter_ttl_s * 1000))
        self._lock = threading.Lock()
        self._waiters: dict[str, list[asyncio.Future[dict[str, Any]]]] = {}
        self.stored = 0
        """Answers stored for ``/poll`` by this instance (a metric)."""
        self.scripts = scripts(redis)

    def waiting(self) -> int:
        """How many ``/feed`` calls of this instance are waiting now."""
        with self._lock:
            return sum(len(f) for f in self._waiters.values())

    def register(self, uuid: str) -> asyncio.Future[dict[str, Any]]:
        """A future resolved with the first answer to *uuid*; call in the event loop, before producing."""
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._waiters.setdefault(uuid, []).append(future)
        return future

    def withdraw(self, uuid: str, future: asyncio.Future[dict[str, Any]]) -> bool:
        """Stop waiting with *future*.

        Returns:
            True if it was still registered (no answer claimed it); False if an answer claimed it,
            in which case the future is resolved, or about to be, in the event loop.
        """
        with self._lock:
            futures = self._waiters.get(uuid)
            if futures is None or future not in futures:
                return False
            futures.remove(future)
            if not futures:
                del self._waiters[uuid]
            return True

    def mark_waiting(self, uuid: str) -> None:
        """Tell the other instances that this one waits for *uuid* (blocking; Redis errors are logged)."""
        if not encodable(uuid):
            return
        try:
            self.redis.set(self.keys.poll_waiter(uuid), b"1", px=self.waiter_ttl_ms)
        except RedisError as exc:
            logger.warning("could not mark uuid %r as awaited (%r); check REDIS_URL", uuid, exc)

    def unmark_waiting(self, uuid: str) -> None:
        """Remove the marker of *uuid* unless another local ``/feed`` still waits for it (blocking)."""
        with self._lock:
            if uuid in self._waiters:
                return
        if not encodable(uuid):
            return
        try:
            self.redis.delete(self.keys.poll_waiter(uuid))
        except RedisError as exc:
            logger.warning("could not unmark uuid %r (%r); check REDIS_URL", uuid, exc)

    def deliver(self, answers: list[Answer]) -> None:
        """Hand each answer to its waiters, or store it for ``/poll``.

        Called by the listener thread. Stores in one pipeline per call, each answer atomically with
        :file:`utils/backends/lua/answer_store.lua`: skipped while another instance waits for its uuid, and stored
        once per Kafka record across instances. A Redis failure is logged and loses those answers for
        ``/poll`` only.
        """
        to_store: list[Answer] = []
        for answer in answers:
            with self._lock:
                futures = self._waiters.pop(answer.uuid, None)
            if futures:
                for future in futures:
                    future.get_loop().call_soon_threadsafe(_resolve, future, answer.message)
            elif not encodable(answer.uuid):
                logger.warning("answer with a uuid that cannot be a Redis key not stored for /poll: %r", answer.uuid)
            else:
                to_store.append(answer)
        if not to_store:
            return
        try:

            def build() -> RedisPipeline:
                pipe = self.redis.pipeline(transaction=False)
                for answer in to_store:
                    self.scripts.queue(
                        pipe,
                        "answer_store",
                        [
                            self.keys.poll_waiter(answer.uuid),
                            self.keys.poll_origin(answer.origin),
                            self.keys.poll_result(answer.uuid),
                        ],
                        [answer.raw, self.poll_ttl_ms],
                    )
                return pipe

            self.stored += sum(int(done) for done in self.scripts.execute(build))
        except RedisError as exc:
            logger.error("could not store %d answer(s) for /poll (%r); check REDIS_URL", len(to_store), exc)


class KafkaLink:
    """The REST service's Kafka clients: a producer for ``/feed`` and one listener thread.

    The thread connects (retrying with back-off while the broker is unreachable), creates the
    topics, assigns every partition of the outbound and dead-letter topics at their end offsets
    (resolved before :attr:`ready` is set, so no answer to a later request can be skipped), then
    polls until :meth:`stop`.

    Args:
        settings: connection settings, topic prefix, KAFKA_FEED_TIMEOUT.
        book: receives the answers.
    """

    def __init__(self, settings: Settings, book: AnswerBook) -> None:
        self.settings = settings
        self.book = book
        self.incoming = settings.topic("incoming")
        self.outbound = settings.topic("outbound_firehose")
        self.dead_letter = settings.topic("dead_letter")
        self.ack_timeout_s = settings.KAFKA_FEED_TIMEOUT
        self.max_request_bytes = settings.KAFKA_PRODUCER_MAX_REQUEST_SIZE
        self.max_value_bytes = value_limit(self.max_request_bytes)
        self.dead_letters: collections.deque[dict[str, Any]] = collections.deque(maxlen=DEAD_LETTERS_KEPT)
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._producer: RdKafkaSendProducer | None = None
        self._consumer: RdKafkaConsumer | None = None
        self._thread: threading.Thread | None = None
        self._failed_send = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rest-kafka-listener", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the listener and close both clients (the consumer first). Never raises."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._close()

    def connected(self) -> bool:
        """True while the clients are set up and the last send (if any) was acknowledged."""
        return self.ready.is_set() and not self._failed_send

    def produce(self, value: bytes, headers: list[tuple[str, bytes]] | None = None) -> None:
        """Send *value* (with the record *headers*, if any) to ``<prefix>.incoming`` and wait for
        the broker's ack (blocking).

        Raises:
            RecordTooLarge: *value* is larger than a record may be (checked first); the connection
                is not marked as failed, so health does not change.
            KafkaUnavailable: not connected, or no ack within KAFKA_FEED_TIMEOUT.
        """
        self.check_size(value)
        producer = self._producer
        if not self.ready.is_set() or producer is None:
            raise KafkaUnavailable("not connected to Kafka yet; check KAFKA_BOOTSTRAP_SERVERS")
        try:
            producer.send(self.incoming, value, headers=headers or None).get(timeout=self.ack_timeout_s)
        except MessageSizeTooLargeError as exc:  # the broker's own limit is lower than ours
            raise RecordTooLarge(
                f"the broker refused a {len(value)}-byte request as too large ({exc}); it allows less "
                "than KAFKA_PRODUCER_MAX_REQUEST_SIZE"
            ) from exc
        except Exception as exc:  # a missing ack: a KafkaError of some class, or a timeout
            self._failed_send = True
            raise KafkaUnavailable(f"no ack within KAFKA_FEED_TIMEOUT={self.ack_timeout_s:g}s: {exc!r}") from exc
        self._failed_send = False

    def check_size(self, value: bytes) -> None:
        """Raise :class:`RecordTooLarge` if *value* cannot be one record (no Kafka call)."""
        if len(value) > self.max_value_bytes:
            raise RecordTooLarge(
                f"the request is {len(value)} bytes as produced (compact UTF-8 JSON), more than one Kafka "
                f"record may hold: KAFKA_PRODUCER_MAX_REQUEST_SIZE={self.max_request_bytes} less "
                f"{RECORD_OVERHEAD_BYTES} bytes of record overhead"
            )

    # --- listener thread -----------------------------------------------------------------------

    def _run(self) -> None:
        delay = RECONNECT_FIRST_S
        while not self._stop.is_set():
            if not self.ready.is_set():
                try:
                    self._connect()
                    delay = RECONNECT_FIRST_S
                except (BackendUnavailable, KafkaError, OSError, ValueError) as exc:
                    self._close()
                    # once per outage: the first attempt, then quietly until it answers
                    log = logger.warning if delay == RECONNECT_FIRST_S else logger.debug
                    log("REST cannot use Kafka (%s); retrying in %.1fs", exc, delay)
                    self._stop.wait(delay)
                    delay = min(RECONNECT_MAX_S, delay * 2)
                continue
            try:
                self._poll_once()
            except Exception:  # one bad poll must not end the listener; the clients reconnect
                logger.error("REST listener failed on a poll", exc_info=True)
                self._stop.wait(RECONNECT_FIRST_S)

    def _connect(self) -> None:
        ensure_topics(self.settings, [self.incoming, self.outbound, self.dead_letter])
        self._producer = make_producer(self.settings)
        consumer = make_consumer(self.settings, group_id=None, auto_offset_reset="latest")
        self._consumer = consumer
        partitions = []
        for topic in (self.outbound, self.dead_letter):
            numbers = consumer.partitions_for_topic(topic)
            if not numbers:
                raise BackendUnavailable(f"no partitions known for {topic}; check KAFKA_BOOTSTRAP_SERVERS")
            partitions += [TopicPartition(topic, p) for p in sorted(numbers)]
        consumer.assign(partitions)
        consumer.seek_to_end(*partitions)
        for partition in partitions:  # resolve the end offsets now, not lazily after a /feed sent
            consumer.position(partition, timeout_ms=int(self.ack_timeout_s * 1000))
        self._failed_send = False
        self.ready.set()
        logger.info("REST listening for answers on %s and dead letters on %s", self.outbound, self.dead_letter)

    def _poll_once(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        answers: list[Answer] = []
        for partition, records in consumer.poll(timeout_ms=LISTEN_POLL_MS).items():
            for record in records:
                try:
                    message = json.loads(record.value)
                except (ValueError, TypeError, RecursionError):
                    continue  # not ours to judge; other consumers see it too
                if not isinstance(message, dict):
                    continue
                if partition.topic == self.dead_letter:
                    self.dead_letters.append(dashboard_letter(message))
                elif isinstance(message.get("uuid"), str):
                    origin = record_origin(record)
                    answers.append(Answer(message["uuid"], message, bytes(record.value), origin))
        if answers:
            self.book.deliver(answers)

    def _close(self) -> None:
        self.ready.clear()
        consumer, self._consumer = self._consumer, None
        producer, self._producer = self._producer, None
        if consumer is not None:
            try:
                consumer.close()
            except Exception:  # closing: report and go on
                logger.warning("closing the REST Kafka consumer failed", exc_info=True)
        if producer is not None:
            try:
                producer.close(timeout=2)
            except Exception:  # closing: report and go on
                logger.warning("closing the REST Kafka producer failed", exc_info=True)
