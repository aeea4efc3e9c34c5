"""Kafka clients on librdkafka (``confluent-kafka``) where kafka-python's cost shows: the sink's
consumer and the crawler's producer.

**The consumer.** kafka-python reads and decodes in Python (``recv`` of 4 KiB at a time, each record's varints
and headers): 19.6 µs of CPU a 2.6 KB record on Tansu, as much as a whole bare PostgreSQL ``COPY``
loop spends on the record. confluent-kafka, the client Confluent maintains over librdkafka (C),
consumed the same records at 3.2 µs each (measured side by side, ``bench/sink.py``'s records); the
PostgreSQL sink went from 0.72 to 0.86 of the bare loop (median of 3 pairs) and the files sink from
30,000 to 50,000 records/s. The sink, whose every record is read and written once with little else,
uses it; the other workers keep kafka-python, whose producer, admin client and consumer they share.

:class:`RdKafkaConsumer` answers the calls of :class:`~crawlhive.utils.process.worker.ConsumerWorker` and
the sink (``poll``, ``commit``, ``seek``, ``pause``, ``resume``, ``assignment``, ``end_offsets``, ``highwater``,
``committed``, ``close``) with kafka-python's types (``TopicPartition``, records with ``topic``,
``partition``, ``offset`` and ``value``), and raises kafka-python's ``KafkaError`` for librdkafka's
errors, so the loop's rules (what is transient, what rewinds a batch) hold unchanged. Its log lines
go to this module's logger (librdkafka's own ``WARNING``/``ERROR`` when a broker goes away), never to
stderr.

**The producer.** kafka-python builds each record batch, its CRC and its request in Python on a
sender thread of its own that competes with the reactor for the GIL: py-spy put 12 % of a crawler's
samples there on the cluster bench (one full page item a page). :class:`RdKafkaProducer` sends
from librdkafka's C threads, with the options of :func:`~crawlhive.utils.backends.kafka_clients.make_producer`
(``acks=all``, no idempotence, 5 ms linger), and hands the delivery reports back in batches.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import confluent_kafka
from kafka import errors as kafka_errors
from kafka.structs import OffsetAndMetadata, TopicPartition

from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

#: librdkafka's log facilities whose lines are chatter about a broker that went away, at the level
#: they are given here: "Connect to … failed" (``FAIL``) comes for every reconnection attempt of
#: every connection, dozens a second while a broker is down, where the worker's own probe says once
#: which setting to check, and so does the group's session running out then (``SESSTMOUT``: the
#: coordinator did not answer); the poll interval running out (while a worker backs off) is
#: followed by a rejoin that loses nothing (nothing was committed).
QUIETER = {"FAIL": logging.DEBUG, "SESSTMOUT": logging.DEBUG, "MAXPOLL": logging.INFO, "REQTMOUT": logging.INFO}


class _Quieter(logging.Filter):
    """Gives librdkafka's lines of :data:`QUIETER` their level there (it logs ``"%s [%s] %s"`` with
    the facility first)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and args and isinstance(args[0], str) and args[0] in QUIETER:
            level = QUIETER[args[0]]
            if level < record.levelno:
                record.levelno, record.levelname = level, logging.getLevelName(level)
                return logging.getLogger(record.name).isEnabledFor(level)
        return True


#: librdkafka logs through this logger (its lines go where the process's logging sends them).
rdkafka_logger = logging.getLogger(f"{__name__}.librdkafka")
rdkafka_logger.addFilter(_Quieter())

#: kafka-python's option names (as :func:`~crawlhive.utils.backends.kafka_clients.kafka_common_config` and
#: :func:`~crawlhive.utils.backends.kafka_clients.make_consumer` build them) and librdkafka's.
_OPTIONS = {
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "sasl_plain_username": "sasl.username",
    "sasl_plain_password": "sasl.password",
    "ssl_cafile": "ssl.ca.location",
    "group_id": "group.id",
    "auto_offset_reset": "auto.offset.reset",
    "max_poll_interval_ms": "max.poll.interval.ms",
    "session_timeout_ms": "session.timeout.ms",
    "heartbeat_interval_ms": "heartbeat.interval.ms",
    "fetch_max_wait_ms": "fetch.wait.max.ms",
    "max_partition_fetch_bytes": "max.partition.fetch.bytes",
    "fetch_max_bytes": "fetch.max.bytes",
    "acks": "acks",
    "enable_idempotence": "enable.idempotence",
    "linger_ms": "linger.ms",
    "batch_size": "batch.size",
    "max_request_size": "message.max.bytes",
}
#: kafka-python options with no librdkafka counterpart to map (the poll's own arguments carry
#: ``max_poll_records``; the rest are kafka-python's internals or set here for both clients).
_UNMAPPED = frozenset({"bootstrap_timeout_ms", "max_poll_records", "kafka_client", "enable_auto_commit"})
#: Kilobytes librdkafka prefetches per partition at most (its default, 64 MiB, is a lot of memory
#: for a sink of 8 MiB crawled items).
QUEUED_MAX_KBYTES = 16384
#: Milliseconds librdkafka waits before fetching again for a partition whose prefetch queue was
#: full. Its default, 1,000, starved the sink: each second it fetched one queue's worth and the sink
#: waited for the rest (8,400 records/s; 1,000 with a 2 MiB queue); at 10 the sink reads as fast as
#: it writes (14,000 records/s, bench/sink.py).
FETCH_QUEUE_BACKOFF_MS = 10
#: Seconds a metadata call (watermarks, committed offsets) may take.
METADATA_TIMEOUT_S = 5.0


@dataclass(slots=True)
class Record:
    """One consumed record, with the fields of kafka-python's ``ConsumerRecord`` a worker reads."""

    topic: str
    partition: int
    offset: int
    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes]] | None = None


def _headers(message: Any) -> list[tuple[str, bytes]] | None:
    """A consumed message's headers as kafka-python gives them (name, bytes); None without any."""
    headers = message.headers()
    if not headers:
        return None
    return [(str(name), value if isinstance(value, bytes) else str(value or "").encode()) for name, value in headers]


def _mapped(config: dict[str, Any], kind: str) -> dict[str, Any]:
    """librdkafka's names and values for *config*, a kafka-python *kind*'s keyword arguments.

    Raises:
        ValueError: an option this module does not map (a new one must be added to _OPTIONS).
    """
    out: dict[str, Any] = {"bootstrap.servers": ",".join(config["bootstrap_servers"]), "logger": rdkafka_logger}
    for name, value in config.items():
        if name in _OPTIONS:
            if value is not None:
                out[_OPTIONS[name]] = value
        elif name not in _UNMAPPED and name != "bootstrap_servers":
            raise ValueError(f"no librdkafka option for the {kind} option {name!r}")
    return out


def rdkafka_config(config: dict[str, Any]) -> dict[str, Any]:
    """librdkafka's configuration for *config*, a kafka-python consumer's keyword arguments.

    Raises:
        ValueError: an option this module does not map (a new one must be added to _OPTIONS).
    """
    out: dict[str, Any] = {
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "queued.max.messages.kbytes": QUEUED_MAX_KBYTES,
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        **_mapped(config, "consumer"),
    }
    if "session.timeout.ms" in out:  # librdkafka refuses a poll interval shorter than the session
        out["max.poll.interval.ms"] = max(out.get("max.poll.interval.ms", 0), out["session.timeout.ms"])
    return out


def _error(exc: BaseException | confluent_kafka.KafkaError) -> kafka_errors.KafkaError:
    """kafka-python's error for a librdkafka one (a connection failure is a KafkaConnectionError,
    which the worker loop retries like any KafkaError; a record too large a
    MessageSizeTooLargeError, a record not delivered in time a KafkaTimeoutError)."""
    if isinstance(exc, confluent_kafka.KafkaError):
        said: confluent_kafka.KafkaError | None = exc
    else:
        said = exc.args[0] if exc.args and isinstance(exc.args[0], confluent_kafka.KafkaError) else None
    text = f"{said.name()}: {said.str()}" if said is not None else str(exc)
    if said is not None and said.code() == confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE:
        return kafka_errors.MessageSizeTooLargeError(text)
    if said is not None and said.code() == confluent_kafka.KafkaError._MSG_TIMED_OUT:
        return kafka_errors.KafkaTimeoutError(text)
    if said is not None and said.code() in (
        confluent_kafka.KafkaError._TRANSPORT,
        confluent_kafka.KafkaError._ALL_BROKERS_DOWN,
        confluent_kafka.KafkaError._TIMED_OUT,
    ):
        return kafka_errors.KafkaConnectionError(text)
    return kafka_errors.KafkaError(text)


def _theirs(partition: TopicPartition, offset: int = confluent_kafka.OFFSET_INVALID) -> confluent_kafka.TopicPartition:
    return confluent_kafka.TopicPartition(partition.topic, partition.partition, offset)


class RdKafkaConsumer:
    """A group consumer of *topics* on librdkafka (see the module docstring)."""

    def __init__(self, config: dict[str, Any], topics: list[str]) -> None:
        self._consumer = confluent_kafka.Consumer(rdkafka_config(config))
        if topics:
            self._consumer.subscribe(topics)

    def poll(self, timeout_ms: int = 0, max_records: int = 500) -> dict[TopicPartition, list[Record]]:
        """Up to *max_records* records, waiting up to *timeout_ms* for the first, by partition in
        offset order.

        Raises:
            KafkaError: librdkafka reported an error for the consumer (not for one partition's end).
        """
        try:
            # kafka-python's poll returns as soon as records are there; consume() would wait for
            # max_records until the timeout: take what is queued, and wait only for the first.
            messages = self._consumer.consume(max_records, 0)
            if not messages and timeout_ms > 0:
                messages = self._consumer.consume(1, timeout_ms / 1000)
                if messages and max_records > 1:
                    messages += self._consumer.consume(max_records - 1, 0)
        except (confluent_kafka.KafkaException, RuntimeError) as exc:
            raise _error(exc) from exc
        out: dict[TopicPartition, list[Record]] = {}
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    continue
                raise _error(confluent_kafka.KafkaException(error))
            topic, partition = message.topic(), message.partition()
            assert topic is not None and partition is not None  # a message without error has both
            record = Record(
                topic, partition, int(message.offset() or 0), message.value(), message.key(), _headers(message)
            )
            where = TopicPartition(topic, partition)
            batch = out.get(where)
            if batch is None:
                out[where] = [record]
            else:
                batch.append(record)
        return out

    def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata] | None = None, timeout_ms: int = 0) -> None:
        """Commit *offsets* (the next offset to read, per partition), or the position of every
        partition after the records polled so far; returns once the broker acknowledged them.

        Raises:
            KafkaError: the commit failed (not a member any more, the broker gone).
        """
        try:
            if offsets is None:
                # librdkafka's commit() commits the offsets stored for it, and this consumer stores
                # none (enable.auto.offset.store is off): kafka-python's meaning is the positions
                positions = [p for p in self._consumer.position(self._consumer.assignment()) if p.offset >= 0]
                if positions:
                    self._consumer.commit(offsets=positions, asynchronous=False)
            else:
                theirs = [_theirs(p, meta.offset) for p, meta in offsets.items()]
                self._consumer.commit(offsets=theirs, asynchronous=False)
        except confluent_kafka.KafkaException as exc:
            if exc.args and isinstance(exc.args[0], confluent_kafka.KafkaError):
                if exc.args[0].code() == confluent_kafka.KafkaError._NO_OFFSET:
                    return  # nothing polled since the last commit: nothing to commit
            raise _error(exc) from exc

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read *partition* again from *offset* (records fetched beyond it are dropped).

        Raises:
            KafkaError: the partition is not assigned to this consumer.
        """
        try:
            self._consumer.seek(_theirs(partition, offset))
        except confluent_kafka.KafkaException as exc:
            raise _error(exc) from exc

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching *partitions* (polls go on, returning none of their records; the consumer
        stays in its group) until :meth:`resume`."""
        try:
            self._consumer.pause([_theirs(p) for p in partitions])
        except confluent_kafka.KafkaException as exc:
            raise _error(exc) from exc

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch *partitions* again after :meth:`pause`."""
        try:
            self._consumer.resume([_theirs(p) for p in partitions])
        except confluent_kafka.KafkaException as exc:
            raise _error(exc) from exc

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned to this consumer now."""
        return {TopicPartition(p.topic, p.partition) for p in self._consumer.assignment()}

    def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The offset after each partition's last record, as the broker says now.

        Raises:
            KafkaError: the broker did not answer within METADATA_TIMEOUT_S.
        """
        try:
            return {
                p: int(self._consumer.get_watermark_offsets(_theirs(p), timeout=METADATA_TIMEOUT_S)[1])
                for p in partitions
            }
        except confluent_kafka.KafkaException as exc:
            raise _error(exc) from exc

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's end as the last fetch answer said (None before any)."""
        low, high = self._consumer.get_watermark_offsets(_theirs(partition), cached=True)
        return int(high) if high >= 0 else None

    def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset of *partition* (None if it has none).

        Raises:
            KafkaError: the broker did not answer within METADATA_TIMEOUT_S.
        """
        try:
            found = self._consumer.committed([_theirs(partition)], timeout=METADATA_TIMEOUT_S)
        except confluent_kafka.KafkaException as exc:
            raise _error(exc) from exc
        offset = found[0].offset if found else -1
        return int(offset) if offset >= 0 else None

    def close(self, autocommit: bool = False, timeout_ms: int = 0) -> None:
        """Leave the group (committing nothing: offsets are committed only after durable writes)."""
        del autocommit, timeout_ms  # librdkafka's close commits nothing without enable.auto.commit
        self._consumer.close()


def make_rdkafka_consumer(settings: Settings, *topics: str, group_id: str, **overrides: Any) -> RdKafkaConsumer:
    """:func:`~crawlhive.utils.backends.kafka_clients.make_consumer`'s consumer, on librdkafka.

    Raises:
        BackendUnavailable: no bootstrap server accepts a connection (names KAFKA_BOOTSTRAP_SERVERS).
        SettingsError: see :func:`~crawlhive.utils.backends.kafka_clients.kafka_common_config`.
    """
    from crawlhive.utils.backends.kafka_clients import consumer_config, probe_kafka

    probe_kafka(settings)
    return RdKafkaConsumer(consumer_config(settings, group_id, **overrides), list(topics))


#: Milliseconds librdkafka tries to deliver a record before it reports it failed (kafka-python's
#: ``delivery_timeout_ms``, 2 minutes; librdkafka's own default is 5).
MESSAGE_TIMEOUT_MS = 120_000
#: Kilobytes of records librdkafka holds unsent at most (kafka-python's ``buffer_memory`` is
#: 32 MiB); at least two records of KAFKA_PRODUCER_MAX_REQUEST_SIZE.
QUEUE_MAX_KBYTES = 65_536
#: Seconds the delivery thread waits in one ``poll`` (how soon it sees that it should stop).
POLL_S = 0.2

#: A delivery report: the token given to :meth:`RdKafkaProducer.produce` and the error (None when
#: the broker acknowledged the record).
Report = tuple[Any, kafka_errors.KafkaError | None]


def rdkafka_producer_config(config: dict[str, Any]) -> dict[str, Any]:
    """librdkafka's configuration for *config*, a kafka-python producer's keyword arguments
    (:func:`~crawlhive.utils.backends.kafka_clients.producer_config`).

    Raises:
        ValueError: an option this module does not map.
    """
    out = _mapped(config, "producer")
    request_kb = -(-int(out.get("message.max.bytes", 1_000_000)) // 1024)
    return {
        "message.timeout.ms": MESSAGE_TIMEOUT_MS,
        "queue.buffering.max.kbytes": max(QUEUE_MAX_KBYTES, 2 * request_kb),
        "socket.nagle.disable": True,  # as kafka-python's TCP_NODELAY: a lone record is not held back
        **out,
    }


class RdKafkaProducer:
    """A producer on librdkafka whose delivery reports come in batches (see the module docstring).

    A thread of its own serves librdkafka's delivery reports (and its log lines) and hands each
    batch to *on_reports* in that thread, once per ``poll``, rather than one call per record.

    Args:
        config: kafka-python producer options (:func:`~crawlhive.utils.backends.kafka_clients.producer_config`).
        on_reports: called in the delivery thread with the reports of a ``poll``, in order.
    """

    def __init__(self, config: dict[str, Any], on_reports: Callable[[list[Report]], None]) -> None:
        self._producer = confluent_kafka.Producer(rdkafka_producer_config(config))
        self._on_reports = on_reports
        self._reports: list[Report] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="crawlhive-rdkafka-producer", daemon=True)
        self._thread.start()

    def produce(self, topic: str, value: bytes, token: Any, headers: list[tuple[str, bytes]] | None = None) -> None:
        """Queue *value* (with record *headers*, if any) as a record of *topic*; its report, with
        *token*, comes later.

        Raises:
            KafkaError: librdkafka refused it at once (MessageSizeTooLargeError for a record over
                KAFKA_PRODUCER_MAX_REQUEST_SIZE, KafkaTimeoutError while its queue is full).
        """

        def delivered(error: confluent_kafka.KafkaError | None, _message: Any) -> None:
            report: Report = (token, None if error is None else _error(error))
            with self._lock:
                self._reports.append(report)

        try:
            if headers:
                self._producer.produce(topic, value, on_delivery=delivered, headers=list(headers))
            else:
                self._producer.produce(topic, value, on_delivery=delivered)
        except BufferError as exc:
            raise kafka_errors.KafkaTimeoutError(f"the producer's queue is full: {exc}") from exc
        except confluent_kafka.KafkaException as exc:
            raise _error(exc) from exc

    def _hand_over(self) -> None:
        with self._lock:
            reports, self._reports = self._reports, []
        if reports:
            self._on_reports(reports)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                self._producer.poll(POLL_S)
            except Exception:  # an exception out of a callback; the loop must go on serving reports
                logger.exception("serving the Kafka producer's delivery reports failed")
            self._hand_over()

    def connect(self, timeout_s: float) -> None:
        """Ask a broker for the cluster's metadata, so that a broker that cannot be reached or
        refuses the credentials shows now.

        Raises:
            KafkaError: no broker answered within *timeout_s*.
        """
        try:
            self._producer.list_topics(timeout=timeout_s)
        except confluent_kafka.KafkaException as exc:
            raise _error(exc) from exc

    def flush(self, timeout: float) -> int:
        """Wait up to *timeout* seconds for every queued record's report (handed over before
        returning); returns how many are still queued."""
        left = int(self._producer.flush(timeout))
        self._hand_over()
        return left

    def close(self, timeout: float = 5.0) -> int:
        """:meth:`flush`, then stop the delivery thread; returns how many records were never
        reported (their tokens get no report)."""
        left = self.flush(timeout)
        self._stop.set()
        self._thread.join(POLL_S * 5)
        self._hand_over()
        return left


def make_rdkafka_producer(settings: Settings, on_reports: Callable[[list[Report]], None]) -> RdKafkaProducer:
    """:func:`~crawlhive.utils.backends.kafka_clients.make_producer`'s producer, on librdkafka, connected.

    Raises:
        BackendUnavailable: no broker answers, or it refuses the credentials (names
            KAFKA_BOOTSTRAP_SERVERS).
        SettingsError: see :func:`~crawlhive.utils.backends.kafka_clients.kafka_common_config`.
    """
    from crawlhive.utils.backends.kafka_clients import (
        KAFKA_BOOTSTRAP_TIMEOUT_MS,
        kafka_unavailable,
        probe_kafka,
        producer_config,
    )

    probe_kafka(settings)
    config = producer_config(settings)
    producer = RdKafkaProducer(config, on_reports)
    try:
        producer.connect(KAFKA_BOOTSTRAP_TIMEOUT_MS / 1000)
    except kafka_errors.KafkaError as exc:
        producer.close(0)
        raise kafka_unavailable(config["bootstrap_servers"], str(exc)) from exc
    return producer
