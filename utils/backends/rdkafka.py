"""Every Kafka producer and consumer of crawlhive, on librdkafka (``confluent-kafka``): one adapter
with kafka-python's calls (issue 50) and our own error classes
(:mod:`~crawlhive.utils.contract.kafka_errors`), built by
:func:`~crawlhive.utils.backends.kafka_clients.make_consumer` and
:func:`~crawlhive.utils.backends.kafka_clients.make_producer`, and the crawler's producer whose
delivery reports come in batches (:func:`make_rdkafka_producer`). Why librdkafka, measured:

**The consumer.** kafka-python reads and decodes in Python (``recv`` of 4 KiB at a time, each record's varints
and headers): 19.6 µs of CPU a 2.6 KB record on Tansu, as much as a whole bare PostgreSQL ``COPY``
loop spends on the record. confluent-kafka, the client Confluent maintains over librdkafka (C),
consumed the same records at 3.2 µs each (measured side by side, ``bench/sink.py``'s records); the
PostgreSQL sink went from 0.72 to 0.86 of the bare loop (median of 3 pairs) and the files sink from
30,000 to 50,000 records/s. On the kafka-monitor's records (``bench/ingest.py``, 150 bytes) a bare
poll-and-commit loop went from 6.8 to 3.0 µs of CPU a record.

:class:`RdKafkaConsumer` answers the calls of :class:`~crawlhive.utils.process.worker.ConsumerWorker`, the
sink and every reader (``poll``, ``commit``, ``seek``, ``pause``, ``resume``, ``paused``, ``assignment``,
``assign``, ``subscribe``, ``seek_to_end``, ``seek_to_beginning``, ``position``, ``partitions_for_topic``,
``topics``, ``beginning_offsets``, ``end_offsets``, ``highwater``, ``committed``, ``close``) with
kafka-python's shapes (:class:`~crawlhive.utils.contract.kafka_errors.TopicPartition`, records with
``topic``, ``partition``, ``offset``, ``value``, ``key``, ``headers`` and ``timestamp``), and raises
:mod:`~crawlhive.utils.contract.kafka_errors`' ``KafkaError`` classes (kafka-python's names and
hierarchy, without importing kafka-python) for librdkafka's errors, so the loop's rules (what is
transient, what rewinds a batch) hold unchanged. librdkafka subscribes only with a group: a consumer
made with ``group_id=None`` assigns itself every partition of its topics instead. Its log lines go
to this module's logger (librdkafka's own ``WARNING``/``ERROR`` when a broker goes away), never to
stderr.

**The producer.** kafka-python builds each record batch, its CRC and its request in Python on a
sender thread of its own that competes with the reactor for the GIL: py-spy put 12 % of a crawler's
samples there on the cluster bench (one full page item a page); on ``bench/ingest.py``'s records
it spent 17 µs of CPU a record where librdkafka spends 3.5. :class:`RdKafkaSendProducer` is
kafka-python's ``KafkaProducer`` for our callers: ``send`` returns a future (``get``, ``add_callback``,
``add_errback``) settled by the broker's acknowledgement, so "commit after every output is
acknowledged" (``send_and_wait``) holds as before; a record over KAFKA_PRODUCER_MAX_REQUEST_SIZE fails
its future with ``MessageSizeTooLargeError``. :class:`RdKafkaProducer`, the crawler's, hands the
delivery reports back in batches instead. Both have the options of
:func:`~crawlhive.utils.backends.kafka_clients.make_producer` (``acks=all``, no idempotence, 5 ms linger).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # what confluent_kafka.admin re-exports, typed (cimpl.pyi)

from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract import kafka_errors
from crawlhive.utils.contract.kafka_errors import OffsetAndMetadata, TopicPartition

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
    "client_id": "client.id",
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
    "compression_type": "compression.type",
}
#: kafka-python options with no librdkafka counterpart to map (the poll's own arguments carry
#: ``max_poll_records``; the factories' ``bootstrap_timeout_ms`` bounds their first request;
#: ``enable_auto_commit`` is set here for every consumer).
_UNMAPPED = frozenset({"bootstrap_timeout_ms", "max_poll_records", "enable_auto_commit"})
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
    #: The record's bytes; None for a record without a value (typed Any, as kafka-python's
    #: ``ConsumerRecord`` is, for the callers that read topics whose every record has one).
    value: Any
    key: bytes | None = None
    headers: list[tuple[str, bytes]] | None = None
    #: Milliseconds since the epoch: the producer's create time (the broker's with LogAppendTime).
    timestamp: int = -1


def _headers(message: Any) -> list[tuple[str, bytes]] | None:
    """A consumed message's headers as kafka-python gives them (name, bytes); None without any."""
    headers = message.headers()
    if not headers:
        return None
    return [(str(name), value if isinstance(value, bytes) else str(value or "").encode()) for name, value in headers]


#: librdkafka's first wait before it reconnects to a broker (doubled at each failure up to its
#: ``reconnect.backoff.max.ms``, 10 s). Its default, 100 ms, also sets how long a client waits before
#: it asks another broker for metadata (half of it): a new client whose first metadata answer names
#: the brokers drops its bootstrap connection with the application's request on it, and asks again
#: only 50 ms later. That happened to about half of the clients on the embedded broker: 50 ms for
#: each of the admin client, the producer and the consumer a process builds before it consumes (a
#: cleaner's first record 0.15 s later). At 20 ms: about 14 ms, for a few clients in three.
RECONNECT_BACKOFF_MS = 20


def _mapped(config: dict[str, Any], kind: str) -> dict[str, Any]:
    """librdkafka's names and values for *config*, a kafka-python *kind*'s keyword arguments.

    Raises:
        ValueError: an option this module does not map (a new one must be added to _OPTIONS).
    """
    out: dict[str, Any] = {
        "bootstrap.servers": ",".join(config["bootstrap_servers"]),
        "logger": rdkafka_logger,
        "reconnect.backoff.ms": RECONNECT_BACKOFF_MS,
    }
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
    """Our error class (:mod:`~crawlhive.utils.contract.kafka_errors`) for a librdkafka error, so
    callers' ``except`` clauses and the loop's rules hold: a broker's error code becomes the class of
    that code (:func:`~crawlhive.utils.contract.kafka_errors.for_code`: MessageSizeTooLargeError,
    InvalidRecordError, UnknownMemberIdError, TopicAlreadyExistsError, …); of librdkafka's own, a
    record too large for KAFKA_PRODUCER_MAX_REQUEST_SIZE a MessageSizeTooLargeError, a record not
    delivered in time a KafkaTimeoutError, a connection failure a KafkaConnectionError (which the
    worker loop retries like any KafkaError), credentials the broker refused a
    SaslAuthenticationFailedError, an invalid option a KafkaConfigurationError."""
    if isinstance(exc, confluent_kafka.KafkaError):
        said: confluent_kafka.KafkaError | None = exc
    else:
        said = exc.args[0] if exc.args and isinstance(exc.args[0], confluent_kafka.KafkaError) else None
    if said is None:
        return kafka_errors.KafkaError(str(exc))
    text = f"{said.name()}: {said.str()}"
    code = said.code()
    if code > 0:  # the broker's (and the protocol's) codes
        return kafka_errors.for_code(code, text)
    local = _LOCAL_ERRORS.get(code)
    return (local or kafka_errors.KafkaError)(text)


#: The class of each of librdkafka's own (negative) error codes that callers tell apart; any other
#: is a plain KafkaError.
_LOCAL_ERRORS: dict[int, type[kafka_errors.KafkaError]] = {
    confluent_kafka.KafkaError._MSG_TIMED_OUT: kafka_errors.KafkaTimeoutError,
    confluent_kafka.KafkaError._TRANSPORT: kafka_errors.KafkaConnectionError,
    confluent_kafka.KafkaError._ALL_BROKERS_DOWN: kafka_errors.KafkaConnectionError,
    confluent_kafka.KafkaError._TIMED_OUT: kafka_errors.KafkaConnectionError,
    confluent_kafka.KafkaError._UNKNOWN_TOPIC: kafka_errors.UnknownTopicOrPartitionError,
    confluent_kafka.KafkaError._AUTHENTICATION: kafka_errors.SaslAuthenticationFailedError,
    confluent_kafka.KafkaError._INVALID_ARG: kafka_errors.KafkaConfigurationError,
}


@contextlib.contextmanager
def _kafka_errors() -> Iterator[None]:
    """librdkafka's exceptions raised inside as our error classes (:func:`_error`)."""
    try:
        yield
    except confluent_kafka.KafkaException as exc:
        raise _error(exc) from exc


def _theirs(partition: TopicPartition, offset: int = confluent_kafka.OFFSET_INVALID) -> confluent_kafka.TopicPartition:
    return confluent_kafka.TopicPartition(partition.topic, partition.partition, offset)


def _connect(client: confluent_kafka.Consumer | confluent_kafka.Producer | AdminClient, timeout_s: float) -> None:
    """Ask a broker for the cluster's metadata, so that one that cannot be reached or refuses the
    credentials shows now.

    Raises:
        KafkaError: no broker answered within *timeout_s*.
    """
    with _kafka_errors():
        client.list_topics(timeout=timeout_s)


def _metadata(client: confluent_kafka.Consumer | AdminClient, topic: str | None = None) -> Any:
    """The cluster's metadata (of *topic* only, if given) as a broker answers it now.

    Raises:
        KafkaError: the broker did not answer within METADATA_TIMEOUT_S.
    """
    with _kafka_errors():
        if topic is None:
            return client.list_topics(timeout=METADATA_TIMEOUT_S)
        return client.list_topics(topic, timeout=METADATA_TIMEOUT_S)


def _topic_names(metadata: Any) -> set[str]:
    """The topics *metadata* lists without an error."""
    return {name for name, topic in metadata.topics.items() if topic.error is None}


def _partitions(metadata: Any, topic: str) -> set[int] | None:
    """The partition numbers of *topic* in *metadata*; None if it does not exist (or has none yet)."""
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        return None
    return set(found.partitions)


#: The group id given to librdkafka for a consumer without a group (``group_id=None``): librdkafka
#: will not build a consumer without one, but it is never used, since such a consumer assigns itself
#: every partition of its topics and commits nothing.
NO_GROUP_PREFIX = "crawlhive-nogroup"
#: Seconds between two metadata requests of a group-less consumer while one of its topics has no
#: partitions yet (a per-appid topic is created by its first record; kafka-python waits for it too).
TOPIC_REFRESH_S = 0.5
#: Where a partition no offset names starts, by ``auto_offset_reset``.
_RESETS = {"earliest": confluent_kafka.OFFSET_BEGINNING, "latest": confluent_kafka.OFFSET_END}
#: Seconds a group member waits for its new partitions' committed offsets (one round trip to the
#: group's coordinator; past it librdkafka reads them itself).
COMMITTED_TIMEOUT_S = 5.0


class RdKafkaConsumer:
    """A consumer on librdkafka with kafka-python's ``KafkaConsumer`` calls (see the module docstring).

    With a ``group_id`` it is a group member: :meth:`subscribe` joins the group, offsets are committed
    only by :meth:`commit`. Without one (``group_id=None``) :meth:`subscribe` assigns it every
    partition of the topics (and of topics that appear later, checked every TOPIC_REFRESH_S while
    one is missing), starting where ``auto_offset_reset`` says; :meth:`commit` is refused.
    :meth:`assign` starts a partition at the group's committed offset (with a group) or where
    ``auto_offset_reset`` says.

    Args:
        config: kafka-python consumer options (:func:`~crawlhive.utils.backends.kafka_clients.consumer_config`).
        topics: topics to :meth:`subscribe` to now; none to subscribe or assign later.
    """

    def __init__(self, config: dict[str, Any], topics: list[str]) -> None:
        self._group: str | None = config.get("group_id")
        if self._group is None:
            config = {**config, "group_id": f"{NO_GROUP_PREFIX}-{secrets.token_hex(6)}"}
        #: Where a partition with no committed offset starts (librdkafka's logical offset of
        #: ``auto_offset_reset``'s end).
        self._reset_start = _RESETS.get(
            str(config.get("auto_offset_reset") or "latest").lower(), confluent_kafka.OFFSET_END
        )
        self._max_records = int(config.get("max_poll_records") or 500)
        self._consumer = confluent_kafka.Consumer(rdkafka_config(config))
        #: True once :meth:`assign` (or a group-less :meth:`subscribe`) chose the partitions.
        self._manual = False
        #: Manual assignment: where each partition started (an offset or librdkafka's logical one),
        #: and the next offset of those read or sought since.
        self._starts: dict[TopicPartition, int] = {}
        self._positions: dict[TopicPartition, int] = {}
        #: A group-less subscription's topics, and when to look for missing ones again (None: all found).
        self._wanted: list[str] = []
        self._refresh_at: float | None = None
        self._paused: set[TopicPartition] = set()
        if topics:
            self.subscribe(topics)

    # --- partitions --------------------------------------------------------------------------

    def connect(self, timeout_s: float) -> None:
        """:func:`_connect` this consumer (raises KafkaError when no broker answered in time)."""
        _connect(self._consumer, timeout_s)

    def _metadata(self, topic: str | None = None) -> Any:
        return _metadata(self._consumer, topic)

    def topics(self) -> set[str]:
        """The names of the cluster's topics.

        Raises:
            KafkaError: the broker did not answer within METADATA_TIMEOUT_S.
        """
        return _topic_names(self._metadata())

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partition numbers of *topic*; None if it does not exist.

        Raises:
            KafkaError: the broker did not answer within METADATA_TIMEOUT_S.
        """
        return _partitions(self._metadata(topic), topic)

    def subscribe(self, topics: list[str]) -> None:
        """Read *topics*: as a member of the group, or, without a group, from every partition.

        Raises:
            KafkaError: (without a group) the broker did not answer within METADATA_TIMEOUT_S.
        """
        if self._group is not None:
            self._manual = False
            self._consumer.subscribe(list(topics), on_assign=self._on_assign)
            return
        self._wanted = list(dict.fromkeys(topics))
        self._assign_wanted()

    def _on_assign(self, consumer: confluent_kafka.Consumer, partitions: list[confluent_kafka.TopicPartition]) -> None:
        """The group gave this member *partitions* (librdkafka calls this from :meth:`poll`): each
        starts at the group's committed offset and, where the group committed none, at
        ``auto_offset_reset``'s end named outright. Left to itself, librdkafka resets such a
        partition after a fixed 100 ms back-off: a new group's first record came that much later
        (a cleaner's first cleaned record, issue 50). If the committed offsets cannot be read, the
        partitions are assigned as given (librdkafka reads and resets them itself)."""
        try:
            starts = consumer.committed(partitions, timeout=COMMITTED_TIMEOUT_S)
        except confluent_kafka.KafkaException:
            starts = partitions
        else:
            for partition in starts:
                if partition.offset < 0 and partition.error is None:
                    partition.offset = self._reset_start
        consumer.assign(starts)

    def _assign_wanted(self) -> None:
        """Add the partitions of the group-less subscription not assigned yet (new topics)."""
        metadata = self._metadata()
        found: list[TopicPartition] = []
        missing = False
        for name in self._wanted:
            topic = metadata.topics.get(name)
            if topic is None or topic.error is not None or not topic.partitions:
                missing = True
                continue
            found += [TopicPartition(name, number) for number in sorted(topic.partitions)]
        self._refresh_at = time.monotonic() + TOPIC_REFRESH_S if missing else None
        new = [partition for partition in found if partition not in self._starts]
        if new or not self._manual:
            start = self._default_start()
            self._apply({**self._current(), **dict.fromkeys(new, start)})

    def _default_start(self) -> int:
        """Where an assigned partition starts: the group's committed offset, else auto_offset_reset."""
        if self._group is not None:
            return confluent_kafka.OFFSET_STORED
        return self._reset_start

    def _current(self) -> dict[TopicPartition, int]:
        """The manual assignment, each partition at its next offset (where it started if none read)."""
        return {partition: self._positions.get(partition, start) for partition, start in self._starts.items()}

    def _apply(self, starts: dict[TopicPartition, int]) -> None:
        """Make *starts* the manual assignment (librdkafka refuses to seek a partition it has not
        started fetching, so a seek is a new assignment; records fetched ahead are dropped)."""
        self._manual = True
        self._starts = dict(starts)
        self._positions = {p: offset for p, offset in starts.items() if offset >= 0}
        with _kafka_errors():
            self._consumer.assign([_theirs(p, offset) for p, offset in starts.items()])
            paused = [_theirs(p) for p in self._paused if p in starts]
            if paused:
                self._consumer.pause(paused)
        self._paused &= set(starts)

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Read exactly *partitions* (no group membership), each from the group's committed offset
        (with a group) or where ``auto_offset_reset`` says."""
        start = self._default_start()
        self._wanted, self._refresh_at = [], None
        self._apply(dict.fromkeys(partitions, start))

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned to this consumer now."""
        return {TopicPartition(p.topic, p.partition) for p in self._consumer.assignment()}

    # --- positions ---------------------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read *partition* again from *offset* (records fetched beyond it are dropped).

        Raises:
            KafkaError: the partition is not assigned to this consumer.
        """
        self._seek({partition: offset})

    def _seek(self, offsets: dict[TopicPartition, int]) -> None:
        if self._manual:
            unknown = [p for p in offsets if p not in self._starts]
            if unknown:
                raise kafka_errors.IllegalStateError(f"cannot seek {unknown}: not assigned to this consumer")
            self._apply({**self._current(), **offsets})
            return
        with _kafka_errors():
            for partition, offset in offsets.items():
                self._consumer.seek(_theirs(partition, offset))

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Read *partitions* (all assigned if none) from their first record.

        Raises:
            KafkaError: the broker did not answer within METADATA_TIMEOUT_S.
        """
        chosen = list(partitions) or sorted(self.assignment())
        self._seek(self.beginning_offsets(chosen))

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Read *partitions* (all assigned if none) from their end as the broker says now (what is
        sent later is read; nothing before).

        Raises:
            KafkaError: the broker did not answer within METADATA_TIMEOUT_S.
        """
        chosen = list(partitions) or sorted(self.assignment())
        self._seek(self.end_offsets(chosen))

    def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int:
        """The offset of the next record of *partition* this consumer reads, resolved now when it
        was still "the beginning", "the end" or "the committed offset".

        Raises:
            KafkaError: the broker did not answer within METADATA_TIMEOUT_S.
        """
        del timeout_ms  # each request is bounded by METADATA_TIMEOUT_S
        if self._manual:
            known = self._positions.get(partition)
            if known is not None:
                return known
        with _kafka_errors():
            theirs = self._consumer.position([_theirs(partition)])
        if theirs and theirs[0].offset >= 0:
            return int(theirs[0].offset)
        start = self._starts.get(partition, self._default_start())
        if start == confluent_kafka.OFFSET_STORED:
            committed = self.committed(partition)
            if committed is not None:
                start = committed
            else:
                start = self._reset_start
        if start == confluent_kafka.OFFSET_BEGINNING:
            start = self.beginning_offsets([partition])[partition]
        elif start < 0:
            start = self.end_offsets([partition])[partition]
        if self._manual:
            self._seek({partition: start})
        return start

    def beginning_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The offset of each partition's first record, as the broker says now.

        Raises:
            KafkaError: the broker did not answer within METADATA_TIMEOUT_S.
        """
        return {p: self._watermarks(p)[0] for p in partitions}

    def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The offset after each partition's last record, as the broker says now.

        Raises:
            KafkaError: the broker did not answer within METADATA_TIMEOUT_S.
        """
        return {p: self._watermarks(p)[1] for p in partitions}

    def _watermarks(self, partition: TopicPartition) -> tuple[int, int]:
        with _kafka_errors():
            low, high = self._consumer.get_watermark_offsets(_theirs(partition), timeout=METADATA_TIMEOUT_S)
        return int(low), int(high)

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's end as the last fetch answer said (None before any)."""
        low, high = self._consumer.get_watermark_offsets(_theirs(partition), cached=True)
        return int(high) if high >= 0 else None

    # --- reading -----------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[TopicPartition, list[Record]]:
        """Up to *max_records* records (``max_poll_records`` if None), waiting up to *timeout_ms*
        for the first, by partition in offset order.

        Raises:
            KafkaError: librdkafka reported an error for the consumer (not for one partition's end).
        """
        if self._refresh_at is not None and time.monotonic() >= self._refresh_at:
            try:
                self._assign_wanted()
            except kafka_errors.KafkaError as exc:  # the broker away: look again later, as kafka-python does
                logger.debug("looking for the topics %s failed: %s", self._wanted, exc)
                self._refresh_at = time.monotonic() + TOPIC_REFRESH_S
        limit = self._max_records if max_records is None else max_records
        try:
            # kafka-python's poll returns as soon as records are there; consume() would wait for
            # max_records until the timeout: take what is queued, and wait only for the first.
            messages = self._consumer.consume(limit, 0)
            if not messages and timeout_ms > 0:
                messages = self._consumer.consume(1, timeout_ms / 1000)
                if messages and limit > 1:
                    messages += self._consumer.consume(limit - 1, 0)
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
                topic,
                partition,
                int(message.offset() or 0),
                message.value(),
                message.key(),
                _headers(message),
                message.timestamp()[1],
            )
            where = TopicPartition(topic, partition)
            batch = out.get(where)
            if batch is None:
                out[where] = [record]
            else:
                batch.append(record)
        if self._manual:
            for where, batch in out.items():
                self._positions[where] = batch[-1].offset + 1
        return out

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching *partitions* (polls go on, returning none of their records; the consumer
        stays in its group) until :meth:`resume`."""
        with _kafka_errors():
            self._consumer.pause([_theirs(p) for p in partitions])
        self._paused.update(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch *partitions* again after :meth:`pause`."""
        with _kafka_errors():
            self._consumer.resume([_theirs(p) for p in partitions])
        self._paused.difference_update(partitions)

    def paused(self) -> set[TopicPartition]:
        """The assigned partitions :meth:`pause` stopped and :meth:`resume` did not restart
        (librdkafka keeps no list to ask; a partition that left the assignment is not listed)."""
        return self._paused & self.assignment()

    # --- offsets -----------------------------------------------------------------------------

    def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata] | None = None, timeout_ms: int = 0) -> None:
        """Commit *offsets* (the next offset to read, per partition), or the position of every
        partition after the records polled so far; returns once the broker acknowledged them.

        Raises:
            KafkaError: the commit failed (not a member any more, the broker gone);
                IllegalStateError for a consumer without a group.
        """
        if self._group is None:
            raise kafka_errors.IllegalStateError("a consumer without a group (group_id=None) commits nothing")
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

    def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset of *partition* (None if it has none, or without a group).

        Raises:
            KafkaError: the broker did not answer within METADATA_TIMEOUT_S.
        """
        if self._group is None:
            return None
        with _kafka_errors():
            found = self._consumer.committed([_theirs(partition)], timeout=METADATA_TIMEOUT_S)
        offset = found[0].offset if found else -1
        return int(offset) if offset >= 0 else None

    def close(self, autocommit: bool = False, timeout_ms: int = 0) -> None:
        """Leave the group (committing nothing: offsets are committed only after durable writes)."""
        del autocommit, timeout_ms  # librdkafka's close commits nothing without enable.auto.commit
        self._consumer.close()


#: Seconds a topic creation may take (the request, and the broker's creating it).
CREATE_TIMEOUT_S = 10.0


class RdKafkaAdmin:
    """The admin calls crawlhive makes (list topics, a topic's partitions, create a topic), on
    librdkafka's ``AdminClient``, raising :mod:`~crawlhive.utils.contract.kafka_errors`' classes.
    Built by :func:`~crawlhive.utils.backends.kafka_clients.make_admin`.

    Args:
        config: kafka-python admin options (:func:`~crawlhive.utils.backends.kafka_clients.kafka_common_config`
            and ``bootstrap_timeout_ms``), mapped as a consumer's are.

    Raises:
        KafkaConfigurationError: librdkafka refused the options.
        ValueError: an option this module does not map.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        with _kafka_errors():
            self._admin: AdminClient | None = AdminClient(_mapped(config, "admin client"))

    def _client(self) -> AdminClient:
        if self._admin is None:
            raise kafka_errors.IllegalStateError("the admin client is closed")
        return self._admin

    def connect(self, timeout_s: float) -> None:
        """:func:`_connect` this client (raises KafkaError when no broker answered in time)."""
        _connect(self._client(), timeout_s)

    def list_topics(self) -> list[str]:
        """The names of the cluster's topics, as a broker lists them now.

        Raises:
            KafkaError: the broker did not answer within METADATA_TIMEOUT_S.
        """
        return sorted(_topic_names(_metadata(self._client())))

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partition numbers of *topic*; None if it does not exist.

        Raises:
            KafkaError: the broker did not answer within METADATA_TIMEOUT_S.
        """
        return _partitions(_metadata(self._client(), topic), topic)

    def create_topic(self, name: str, partitions: int, replication: int, timeout_s: float = CREATE_TIMEOUT_S) -> None:
        """Create topic *name* with *partitions* partitions of *replication* replicas; returns once
        the broker created it.

        Raises:
            TopicAlreadyExistsError: it exists already.
            InvalidPartitionsError, InvalidReplicationFactorError: the broker (or librdkafka, for a
                count below 1) refused that many.
            KafkaError: the broker failed the request or did not answer within *timeout_s*.
        """
        if partitions < 1:
            raise kafka_errors.InvalidPartitionsError(f"{partitions} partitions: at least 1 is needed")
        if replication < 1:
            raise kafka_errors.InvalidReplicationFactorError(f"replication {replication}: at least 1 is needed")
        topic = NewTopic(name, num_partitions=partitions, replication_factor=replication)
        with _kafka_errors():
            futures = self._client().create_topics([topic], request_timeout=timeout_s, operation_timeout=timeout_s)
            futures[name].result()

    def close(self) -> None:
        """Serve the log lines librdkafka still holds, then destroy the client (librdkafka's
        ``AdminClient`` has no close: the handle is destroyed, its connections closed, when the
        last reference goes, here at once)."""
        admin, self._admin = self._admin, None
        if admin is not None:
            admin.poll(0)
            del admin


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
        # kafka-python's (and Java's) partitioner: a keyed record goes where their producers send it
        "partitioner": "murmur2_random",
        **out,
    }


class _ServedProducer:
    """What both producers share: a librdkafka producer whose delivery reports a thread of its own
    serves (``poll``) until :attr:`_stop` is set, calling :meth:`_served` after each poll, and the
    start-up check of :meth:`connect`."""

    def __init__(self, config: dict[str, Any], thread_name: str) -> None:
        self._producer = confluent_kafka.Producer(rdkafka_producer_config(config))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=thread_name, daemon=True)

    def _served(self, reports: int) -> None:
        """After each poll of the delivery thread, with the number of reports it served."""

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                served = int(self._producer.poll(POLL_S))
            except Exception:  # an exception out of a callback; the loop must go on serving reports
                logger.exception("serving the Kafka producer's delivery reports failed")
                served = 1
            self._served(served)

    def connect(self, timeout_s: float) -> None:
        """:func:`_connect` this producer (raises KafkaError when no broker answered in time)."""
        _connect(self._producer, timeout_s)


class RdKafkaProducer(_ServedProducer):
    """A producer on librdkafka whose delivery reports come in batches (see the module docstring).

    A thread of its own serves librdkafka's delivery reports (and its log lines) and hands each
    batch to *on_reports* in that thread, once per ``poll``, rather than one call per record.

    Args:
        config: kafka-python producer options (:func:`~crawlhive.utils.backends.kafka_clients.producer_config`).
        on_reports: called in the delivery thread with the reports of a ``poll``, in order.
    """

    def __init__(self, config: dict[str, Any], on_reports: Callable[[list[Report]], None]) -> None:
        super().__init__(config, "crawlhive-rdkafka-producer")
        self._on_reports = on_reports
        self._reports: list[Report] = []
        self._lock = threading.Lock()
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

    def _served(self, reports: int) -> None:
        self._hand_over()

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


#: Seconds :meth:`RdKafkaSendProducer.send` waits for room while librdkafka's queue is full before it
#: raises KafkaTimeoutError (kafka-python's ``max_block_ms``, 60 s).
MAX_BLOCK_S = 60.0


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where the broker stored an acknowledged record (the fields of kafka-python's
    ``RecordMetadata`` our code reads)."""

    topic: str
    partition: int
    offset: int
    #: Milliseconds since the epoch, as a consumer of the record sees it.
    timestamp: int


class SendFuture:
    """The outcome of one :meth:`RdKafkaSendProducer.send`, as kafka-python's future gives it:
    :meth:`get` waits for it; callbacks added with :meth:`add_callback` / :meth:`add_errback` run
    in the producer's delivery thread (at once if it is done already).

    Hand-written rather than a ``concurrent.futures.Future``: that one costs a Condition per record,
    and kafka-python's callback names (``add_callback``, ``add_errback``) are what the callers use;
    these share their producer's Condition, notified once per batch of delivery reports.
    """

    __slots__ = ("_callbacks", "_cond", "_errbacks", "exception", "is_done", "value")

    def __init__(self, cond: threading.Condition) -> None:
        self._cond = cond
        self.is_done = False
        self.value: RecordMetadata | None = None
        self.exception: kafka_errors.KafkaError | None = None
        self._callbacks: list[Callable[[RecordMetadata], Any]] | None = None
        self._errbacks: list[Callable[[kafka_errors.KafkaError], Any]] | None = None

    def __call__(self, error: confluent_kafka.KafkaError | None, message: Any) -> None:
        """librdkafka's delivery report of the record (in the thread that polls the producer)."""
        if error is None:
            self._settle(
                RecordMetadata(message.topic(), message.partition(), message.offset(), message.timestamp()[1]), None
            )
        else:
            self._settle(None, _error(error))

    def _settle(self, value: RecordMetadata | None, exception: kafka_errors.KafkaError | None) -> None:
        with self._cond:
            self.value, self.exception, self.is_done = value, exception, True
            callbacks, errbacks = self._callbacks, self._errbacks
            self._callbacks = self._errbacks = None
        if exception is None and callbacks:
            for callback in callbacks:
                _run(callback, value)
        elif exception is not None and errbacks:
            for errback in errbacks:
                _run(errback, exception)

    def succeeded(self) -> bool:
        return self.is_done and self.exception is None

    def failed(self) -> bool:
        return self.is_done and self.exception is not None

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata once the broker acknowledged it.

        Raises:
            KafkaTimeoutError: no report within *timeout* seconds (None: wait for it).
            KafkaError: the record was refused or not delivered (the class of the error's code).
        """
        if not self.is_done:
            deadline = None if timeout is None else time.monotonic() + timeout
            with self._cond:
                while not self.is_done:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise kafka_errors.KafkaTimeoutError(f"Timeout after waiting for {timeout} secs.")
                    self._cond.wait(left)
        if self.exception is not None:
            raise self.exception
        assert self.value is not None
        return self.value

    def add_callback(self, callback: Callable[[RecordMetadata], Any]) -> SendFuture:
        """Call *callback* with the metadata once the record is acknowledged."""
        with self._cond:
            if not self.is_done:
                self._callbacks = [*(self._callbacks or ()), callback]
                return self
        if self.exception is None:
            _run(callback, self.value)
        return self

    def add_errback(self, errback: Callable[[kafka_errors.KafkaError], Any]) -> SendFuture:
        """Call *errback* with the error once the record failed."""
        with self._cond:
            if not self.is_done:
                self._errbacks = [*(self._errbacks or ()), errback]
                return self
        if self.exception is not None:
            _run(errback, self.exception)
        return self


def _run(callback: Callable[[Any], Any], argument: Any) -> None:
    try:
        callback(argument)
    except Exception:  # a caller's callback: librdkafka's poll must go on serving the others
        logger.exception("a Kafka send callback failed")


class RdKafkaSendProducer(_ServedProducer):
    """A producer on librdkafka with kafka-python's ``KafkaProducer`` calls: :meth:`send` returns
    a :class:`SendFuture`; :meth:`flush` and :meth:`close` as there. Every component's producer
    but the crawler's (:class:`RdKafkaProducer`, whose reports come in batches).

    A thread of its own serves librdkafka's delivery reports (settling the futures, running their
    callbacks, as kafka-python's sender thread does); :meth:`flush` serves them too.

    Args:
        config: kafka-python producer options (:func:`~crawlhive.utils.backends.kafka_clients.producer_config`).
    """

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config, "crawlhive-rdkafka-sender")
        self._cond = threading.Condition(threading.Lock())
        self._thread.start()

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> SendFuture:
        """Queue a record of *topic*; the future settles when the broker acknowledged it (or not).

        A record the broker's rules refuse at once (over KAFKA_PRODUCER_MAX_REQUEST_SIZE:
        MessageSizeTooLargeError) gives a failed future, as kafka-python's ``send`` does.

        Raises:
            KafkaTimeoutError: librdkafka's queue stayed full for MAX_BLOCK_S.
            KafkaError: librdkafka refused the record for another reason.
        """
        future = SendFuture(self._cond)
        extra: dict[str, Any] = {}
        if headers:
            extra["headers"] = list(headers)
        if partition is not None:
            extra["partition"] = partition
        if timestamp_ms is not None:
            extra["timestamp"] = timestamp_ms
        deadline = 0.0
        while True:
            try:
                self._producer.produce(topic, value, key, on_delivery=future, **extra)
                return future
            except BufferError as exc:  # librdkafka's queue is full: wait for deliveries, as kafka-python does
                now = time.monotonic()
                deadline = deadline or now + MAX_BLOCK_S
                if now >= deadline:
                    raise kafka_errors.KafkaTimeoutError(
                        f"the producer's queue stayed full for {MAX_BLOCK_S:g} s: {exc}"
                    ) from exc
                self._producer.flush(min(POLL_S, deadline - now))
                self._notify()
            except confluent_kafka.KafkaException as exc:
                error = _error(exc)
                if isinstance(error, kafka_errors.BrokerResponseError):
                    future._settle(None, error)
                    return future
                raise error from exc

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _served(self, reports: int) -> None:
        if reports:
            self._notify()

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every record sent so far is acknowledged or failed (its future settled).

        Raises:
            KafkaTimeoutError: records were still unsettled after *timeout* seconds.
        """
        left = int(self._producer.flush(-1 if timeout is None else timeout))
        self._notify()
        if left:
            raise kafka_errors.KafkaTimeoutError(f"{left} record(s) not acknowledged within {timeout} s")

    def close(self, timeout: float | None = None) -> None:
        """Flush for up to *timeout* seconds (records still unsettled then are reported in a
        warning, their futures never settle), then stop the delivery thread."""
        if self._stop.is_set():
            return
        left = int(self._producer.flush(-1 if timeout is None else timeout))
        self._stop.set()
        self._thread.join(POLL_S * 5)
        self._notify()
        if left:
            logger.warning("the Kafka producer closed with %d record(s) not acknowledged", left)


def make_rdkafka_producer(settings: Settings, on_reports: Callable[[list[Report]], None]) -> RdKafkaProducer:
    """:func:`~crawlhive.utils.backends.kafka_clients.make_producer`'s producer, on librdkafka, connected.

    Raises:
        BackendUnavailable: no broker answers, or it refuses the credentials (names
            KAFKA_BOOTSTRAP_SERVERS).
        SettingsError: see :func:`~crawlhive.utils.backends.kafka_clients.kafka_common_config`.
    """
    from crawlhive.utils.backends.kafka_clients import connected, probe_kafka, producer_config

    probe_kafka(settings)
    config = producer_config(settings)
    return connected(RdKafkaProducer(config, on_reports), config["bootstrap_servers"])
