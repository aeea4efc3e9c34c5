"""``crawlhive sink``: one sink process (docs/contract.md §20.1).

A :class:`~crawlhive.utils.process.worker.ConsumerWorker` (set-up with back-off, signals, heartbeat,
teardown) that consumes ``<prefix>.cleaned`` (or the topic of SINK_FROM) in the sink's own consumer
group and hands each batch's JSON objects to its :class:`~crawlhive.sink.store.Store`. The at-least-
once rule is the cleaner's: a partition's offset is committed only once everything before it is
durable in the store (:meth:`Store.held_back` keeps back what a file sink has not completed yet) and
the batch's dead letters are acknowledged by the broker. A file store rolls its files on a thread of
its own and the sink polls on meanwhile, within its own SINK_MAX_POLL_INTERVAL_MS; while the store
holds SINK_MAX_HELD_BYTES the sink pauses its partitions (it still polls: it stays in the group).
A graceful stop writes and commits what the store holds. While the store is unreachable the batch is
rewound and the loop backs off (up to 10 s), logging the URL to check (password masked): nothing is
lost, nothing committed. A record the store cannot hold (not JSON, not an object, refused by
PostgreSQL) becomes a dead letter ``{"stage": "sink", ...}`` and the sink goes on.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

from crawlhive.sink.store import SinkRecord, Store, WriteResult, sink_group, sink_name, source_topic, store_for
from crawlhive.utils.backends import tracing
from crawlhive.utils.backends.blobs import BlobError, BlobStore
from crawlhive.utils.backends.redis_clients import check_redis, redis_from_settings
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.config.errors import SettingsError
from crawlhive.utils.config.log import mask_url
from crawlhive.utils.contract.encoding import encode
from crawlhive.utils.contract.kafka_errors import KafkaError, OffsetAndMetadata, TopicPartition
from crawlhive.utils.contract.produce import send_and_wait
from crawlhive.utils.contract.records import SinkDeadLetter, sink_dead_letter
from crawlhive.utils.process.worker import BatchCounts, ConsumerWorker
from crawlhive.utils.state.sinks import COMPONENT, COUNTERS, publish, sink_counter_name, withdraw

if TYPE_CHECKING:
    from crawlhive.utils.backends.rdkafka import Record as ConsumerRecord
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)


@dataclass
class SinkResult(BatchCounts):
    """What one batch (or a sink's life) did (the counters are COUNTERS, in their order)."""

    #: Records in a complete file or a committed row.
    written: int = 0
    #: Records a file store gathered for a file not written yet (counted again as written then).
    buffered: int = 0
    duplicates: int = 0
    dead_letters: int = 0


@dataclass
class Batch:
    """One polled batch between its decoding and its completion."""

    #: The records polled, per partition (empty for :meth:`Sink.process`): their offsets are
    #: committed once the batch is complete.
    polled: dict[TopicPartition, list[ConsumerRecord]]
    records: int
    good: list[SinkRecord] = field(default_factory=list)
    letters: list[SinkDeadLetter] = field(default_factory=list)
    #: Near-duplicates left out (SINK_SKIP_NEAR_DUPLICATES), counted with the duplicates.
    skipped: int = 0
    #: What the store sends for :attr:`good` (:meth:`Store.prepare`), made before the batch in
    #: flight is waited for, so that the writer thread starts on this one as soon as it is free.
    prepared: Any = None
    future: Future[WriteResult] | None = None
    #: The spans of :attr:`good`'s traced records, by position (tracing on, §26.3), ended by the completion.
    spans: dict[int, Any] = field(default_factory=dict)

    def submit(self, executor: ThreadPoolExecutor, store: Store) -> Batch:
        """Start writing the batch's :attr:`prepared` records to *store* on *executor*'s thread."""
        self.future = executor.submit(store.write_prepared, self.prepared)
        return self

    def wait(self) -> WriteResult:
        """What the write did, once it is done (raises what it raised)."""
        assert self.future is not None
        return self.future.result()

    def done(self) -> bool:
        """The write has ended (:meth:`wait` does not block)."""
        return self.future is not None and self.future.done()

    def wait_quietly(self) -> None:
        """Wait for the write to end, whatever it did (the batch is being rewound)."""
        try:
            self.wait()
        except Exception:  # noqa: BLE001 - the batch is read and written again
            logger.debug("the write of a rewound batch failed", exc_info=True)


class Sink(ConsumerWorker):
    """Consumes a topic into a store (see the module docstring)."""

    component = COMPONENT
    poll_interval_setting = "SINK_MAX_POLL_INTERVAL_MS"

    def __init__(
        self, settings: Settings, redis: RedisClient, store: Store, url: str, *, owns_redis: bool = False
    ) -> None:
        super().__init__(settings, redis, owns_redis=owns_redis)
        self.store = store
        self.url = url
        self.name = sink_name(url)
        self.group = sink_group(settings, url)
        # A WARC sink archives crawled pages, the others cleaned records, unless SINK_FROM says.
        default = "crawled_firehose" if store.kind == "warc" and not settings.is_set("SINK_FROM") else None
        self.source_topic = source_topic(settings, default or str(settings.SINK_FROM))
        self.dead_letter_topic = settings.topic("dead_letter")
        self.max_poll_records = settings.SINK_MAX_POLL_RECORDS
        self.max_poll_interval_ms = settings.SINK_MAX_POLL_INTERVAL_MS
        if self.max_poll_interval_ms < 1000:
            raise SettingsError(f"SINK_MAX_POLL_INTERVAL_MS ({self.max_poll_interval_ms}) must be at least 1000")
        #: The partitions paused while the store is full.
        self._paused: set[TopicPartition] = set()
        self.blobs = BlobStore.from_settings(settings)
        self.skip_near_duplicates = settings.SINK_SKIP_NEAR_DUPLICATES
        self.totals: SinkResult = SinkResult()
        #: Per partition: the offset after the last record processed, and the offset committed.
        self._positions: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        #: The batches the store is writing on its writer threads, oldest first (stores that
        #: overlap only; at most Store.writers).
        self._inflight: list[Batch] = []
        self._executor: ThreadPoolExecutor | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """A sink to SINK_URL on REDIS_URL (nothing is connected before :meth:`setup`).

        Raises:
            SettingsError: SINK_URL is missing or names no known store.
        """
        url = str(settings.SINK_URL)
        return cls(settings, redis_from_settings(settings), store_for(settings, url), url, owns_redis=True)

    # --- lifecycle ---------------------------------------------------------------------------

    def setup(self) -> None:
        """Check Redis, open the store (create its table or folder), join the consumer group.

        Raises:
            BackendUnavailable: RedisClient, Kafka or the store cannot be reached (each names its setting).
        """
        check_redis(self.redis, self.settings)
        self.store.open()
        self.open_kafka(
            self.source_topic,
            self.group,
            [self.dead_letter_topic],
            max_poll_records=self.max_poll_records,
            max_poll_interval_ms=self.max_poll_interval_ms,
        )
        logger.info("sink %s writes %s to %s", self.name, self.source_topic, mask_url(self.url))

    def close(self) -> None:
        """Write and commit what the store holds (a batch in flight, the records a file store
        gathered), unless a write or the commit fails (then it comes again: it was not committed);
        leave the group and close the Kafka clients, then the store; withdraw this process's state."""
        try:
            if self.consumer is not None and not self.context.backends_gone:
                try:
                    self.finish_inflight()
                    self.store.flush()
                    self._files_written()
                    self.commit_durable()
                except Exception as exc:  # noqa: BLE001 - not committed: the group delivers it again
                    logger.info("sink %s: the last records were not committed (%s); they come again", self.name, exc)
            for unfinished in self._inflight:
                unfinished.wait_quietly()
            self._inflight = []
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None
            super().close()
        finally:
            self.store.close()
            try:
                if not self.context.backends_gone:
                    withdraw(self.redis, self.keys, self.node_id)
            except Exception:  # noqa: BLE001 - shutting down; the entry goes stale
                logger.debug("could not withdraw the sink's state", exc_info=True)

    def beat(self, force: bool = False) -> None:
        """The heartbeat, and with it this process's state for ``stats: sink`` (§20.7)."""
        before = self._last_beat
        super().beat(force)
        if self._last_beat != before and self.consumer is not None:
            self._publish(self.lag())

    def _publish(self, lag: int | None) -> None:
        state: dict[str, Any] = {
            "sink": self.name,
            "kind": self.store.kind,
            "topic": self.source_topic,
            "group": self.group,
            "lag": lag,
            "buffered": self.store.held_records(),
        }
        if self.failing is not None:
            state["error"] = self.failing
        publish(self.redis, self.keys, self.node_id, state, 2 * self.settings.HEARTBEAT_TIMEOUT)

    def failure_changed(self, reason: str | None) -> None:
        """Publish at once that this sink fails, and why (its store or Kafka; ``stats: sink``,
        REST's health, ``up``'s status line), or that it works again."""
        self._publish(None)

    def lag(self) -> int | None:
        """Records of this process's partitions not committed yet (None when the broker cannot say).

        A partition's end is the higher of ListOffsets' answer and the high watermark of the last
        fetch answer: Tansu's ListOffsets counts a partition's last record batch as one record
        (:func:`~crawlhive.utils.backends.kafka_clients.end_offsets`), its fetch answers do not."""
        assert self.consumer is not None
        try:
            assigned = list(self.consumer.assignment())
            if not assigned:
                return 0
            ends = self.consumer.end_offsets(assigned)
            total = 0
            for partition in assigned:
                end = max(int(ends[partition]), int(self.consumer.highwater(partition) or 0))
                done = self._committed.get(partition)
                if done is None:
                    done = self.consumer.committed(partition) or 0
                total += max(0, end - done)
            return total
        except (KafkaError, ValueError, AssertionError):
            return None

    @property
    def progress_name(self) -> str:
        return f"sink {self.name}"

    # --- one iteration -----------------------------------------------------------------------

    def run_once(self) -> SinkResult:
        """Poll one batch, write it, commit what is durable; returns what the batches completed in
        this call did.

        A store that writes on a thread of its own (:attr:`Store.overlaps`, PostgreSQL) writes a
        batch while the sink polls and decodes the next one: the batch is completed (its dead
        letters sent, its offsets committed) by the next call, which polls without waiting while
        it is in flight. A failure of the write rewinds the batch (and the one polled meanwhile:
        both are written again after the back-off); a failure of the commit does not (the batch is
        durable; its offsets go with the next commit).

        Raises:
            BackendUnavailable, RedisError, KafkaError: a backend failed.
        """
        assert self.consumer is not None, "setup() first"
        self._pause_while_full()
        inflight, self._inflight = self._inflight, []
        timeout = 0 if inflight else self.poll_timeout_ms
        polled = self.consumer.poll(timeout_ms=timeout, max_records=self.max_poll_records)
        result = SinkResult()
        try:
            polled = self._within_room(polled)
            records = [record for records in polled.values() for record in records]
            batch = self._prepare(polled, records) if records else None
            if batch is not None and batch.good and self.store.overlaps:
                batch.prepared = self.store.prepare(batch.good)  # while the writers are busy
            # complete the batches in flight in the order they were polled: those done; the oldest
            # when nothing was polled (nothing else to do); all before a batch written here (it is
            # completed at once: its offsets must not be committed before theirs); the oldest while
            # every writer is busy
            while inflight and (
                inflight[0].done() or batch is None or batch.prepared is None or len(inflight) >= self.store.writers
            ):
                result.add(self._complete(inflight[0], inflight[0].wait()))
                inflight.pop(0)  # (only once completed: a failed one is rewound below)
                if batch is None:
                    break
            if batch is not None:
                if batch.prepared is not None:
                    inflight.append(batch.submit(self._writer(), self.store))
                else:
                    result.add(self._complete(batch, self.store.write(batch.good) if batch.good else WriteResult()))
            self._inflight, inflight = inflight, []
            assigned = self.consumer.assignment()
            for partition in [p for p in self._positions if p not in assigned]:
                del self._positions[partition]  # its next owner starts from the committed offset
                self._committed.pop(partition, None)
            self.store.tick({(p.topic, p.partition) for p in assigned})
            result.add(self._files_written())
        except BaseException:
            unfinished = [*self._inflight, *inflight]  # not completed: read again from their first offsets
            for left in unfinished:
                left.wait_quietly()
            self._inflight = []
            self.rewind(polled)  # newest first: each rewind seeks back, so the oldest's comes last
            for left in reversed(unfinished):
                self.rewind(left.polled)
            self._rewind_held()
            raise
        self.commit_durable()
        self.beat_or_probe(busy=bool(polled))
        return result

    def _files_written(self) -> SinkResult:
        """The records of the files a file store completed since the last call, counted written."""
        done = self.store.take_written()
        result = SinkResult(written=done)
        if done:
            self._count(result)
            self.totals.add(result)
        return result

    def _pause_while_full(self) -> None:
        """Pause every assigned partition while the store holds SINK_MAX_HELD_BYTES, resume them
        once it holds less (a paused consumer still polls, so it keeps its place in the group)."""
        assert self.consumer is not None
        if self.store.room() == 0:
            assigned = self.consumer.assignment()
            more = assigned - self._paused
            if more:
                self.consumer.pause(*more)
                if not self._paused:
                    logger.debug("sink %s holds SINK_MAX_HELD_BYTES: partitions paused", self.name)
                self._paused |= more
        elif self._paused:
            still = self._paused & self.consumer.assignment()
            if still:
                self.consumer.resume(*still)
            self._paused.clear()

    def _within_room(
        self, polled: dict[TopicPartition, list[ConsumerRecord]]
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """The records of *polled* the store has room for (:meth:`Store.room`, a record by
        reference counting its body); each partition's first record left out is read again later
        (seeked back to). A store that holds nothing takes the first record whatever its size, so
        that the sink makes progress."""
        room = self.store.room()
        if room is None:
            return polled
        assert self.consumer is not None
        kept: dict[TopicPartition, list[ConsumerRecord]] = {}
        taken = 0 if self.store.held_records() == 0 else 1
        for partition, records in polled.items():
            for index, record in enumerate(records):
                size = len(record.value or b"") + _ref_size_of_message(record.value)
                if taken and size > room:
                    kept[partition] = records[:index]
                    self.consumer.seek(partition, record.offset)
                    break
                room -= size
                taken += 1
            else:
                kept[partition] = records
        return kept

    def _writer(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=max(1, self.store.writers), thread_name_prefix="crawlhive-sink-write"
            )
        return self._executor

    def finish_inflight(self) -> None:
        """Complete the batches in flight, in order, and commit them (on close, after a stop request).

        Raises:
            BackendUnavailable: a write failed (it and those after it were not committed: they come again).
        """
        inflight, self._inflight = self._inflight, []
        while inflight:
            head = inflight[0]
            try:
                self._complete(head, head.wait())
            except BaseException:
                for left in inflight:
                    left.wait_quietly()
                for left in reversed(inflight):  # newest first: the oldest's seek comes last
                    self.rewind(left.polled)
                raise
            inflight.pop(0)
        self.commit_durable()

    def _rewind_held(self) -> None:
        """After a failed write: read again from the first record the store held back and forgot
        (a file not completed), so that nothing it held is skipped."""
        assert self.consumer is not None
        for (topic, partition), offset in self.store.abandon().items():
            where = TopicPartition(topic, partition)
            if where in self._positions:  # nothing past *offset* is durable: never commit past it
                self._positions[where] = min(self._positions[where], offset)
            try:
                self.consumer.seek(where, offset)
            except (KafkaError, ValueError, AssertionError):
                logger.info("could not rewind %s (no longer assigned)", where)

    def commit_durable(self) -> None:
        """Commit, per partition, the offset before which every record is durable in the store."""
        assert self.consumer is not None
        offsets = {}
        for partition, position in self._positions.items():
            held = self.store.held_back(partition.topic, partition.partition)
            offset = position if held is None else min(position, held)
            if self._committed.get(partition) != offset:
                offsets[partition] = OffsetAndMetadata(offset, "", -1)
        if not offsets:
            return
        self.consumer.commit(offsets=offsets)
        for partition, meta in offsets.items():
            self._committed[partition] = meta.offset

    def process(self, records: list[ConsumerRecord]) -> SinkResult:
        """Write *records* to the store; dead letters acknowledged by the broker when this returns
        (the offsets of *records* are not recorded: :meth:`run_once` does that for what it polls).

        Raises:
            BackendUnavailable: the store is unreachable (nothing of the batch counts as written).
        """
        batch = self._prepare({}, records)
        return self._complete(batch, self.store.write(batch.good) if batch.good else WriteResult())

    def _prepare(self, polled: dict[TopicPartition, list[ConsumerRecord]], records: list[ConsumerRecord]) -> Batch:
        """Decode *records* (polled: *polled*): the JSON objects for the store (bodies by
        reference resolved), the dead letters of the rest."""
        batch = Batch(polled, len(records))
        good, letters, blobs = batch.good, batch.letters, self.blobs
        for record in records:
            data = record.value
            try:
                # json, not ujson: ujson is 1.3 us faster on a 2.6 KB record (of 5-6), but accepts
                # control characters in strings (a newline would split a line of a JSON Lines file).
                value = json.loads(data)
            except ValueError as exc:
                letters.append(self.dead_letter(None, record, f"not JSON ({str(exc)[:200]})"))
                continue
            if type(value) is not dict:
                letters.append(self.dead_letter(value, record, f"not a JSON object but {type(value).__name__}"))
                continue
            if self.skip_near_duplicates and value.get("near_duplicate_of"):  # §26.1: not stored
                batch.skipped += 1
                continue
            try:
                resolved = blobs.resolve(value)  # a body by reference: the record holds it (§20.5)
            except BlobError as exc:
                letters.append(self.dead_letter(value, record, str(exc)))
                continue
            if tracing.ON:
                self._start_span(record, value, len(good), batch)
            if resolved is value:
                good.append(SinkRecord(record.topic, record.partition, record.offset, value, len(data), data))
            else:  # what the record holds is the body its reference named, not its small message
                size = len(data) + _ref_size(value)
                good.append(SinkRecord(record.topic, record.partition, record.offset, resolved, size, None))
        return batch

    def _start_span(self, record: Any, value: dict[str, Any], index: int, batch: Batch) -> None:
        """The span of the store's write of *record* (:attr:`Batch.good`'s *index*-th), a child of
        its ``traceparent`` header; none without one (§26.3)."""
        parent = tracing.context_of_headers(getattr(record, "headers", None))
        if parent is None:
            return
        batch.spans[index] = tracing.tracer().start_span(
            "crawlhive.sink.write",
            context=parent,
            kind=tracing.SpanKind.CONSUMER,
            attributes={
                "url.full": str(value.get("url", ""))[:2000],
                "crawlhive.sink": self.name,
                "crawlhive.sink.store": self.store.kind,
                "messaging.system": "kafka",
                "messaging.destination.name": record.topic,
                "messaging.kafka.offset": record.offset,
            },
        )

    @staticmethod
    def _end_spans(batch: Batch, written: WriteResult) -> None:
        """End *batch*'s spans with what the store did: ``stored`` (a row, or a record of a file
        complete or still being gathered: ``crawlhive.sink.store`` says which store), or the
        reason it became a dead letter (an error)."""
        rejected = {id(record): reason for record, reason in written.rejected}
        outcome = "buffered" if written.buffered else "stored"
        for index, span in batch.spans.items():
            reason = rejected.get(id(batch.good[index]))
            if reason is not None:
                tracing.fail(span, reason)
            else:
                span.set_attribute("crawlhive.outcome", outcome)
            span.end()

    def _complete(self, batch: Batch, written: WriteResult) -> SinkResult:
        """After *batch*'s write: send its dead letters (acknowledged when this returns), count it,
        and advance the positions the next commit covers.

        Raises:
            KafkaError: a dead letter was not acknowledged (the batch is written again).
        """
        if batch.spans:
            self._end_spans(batch, written)
        letters = batch.letters
        for sink_record, reason in written.rejected:
            letters.append(self.dead_letter(sink_record.value, sink_record, reason))
        result = SinkResult(
            records=batch.records,
            written=written.written,
            buffered=written.buffered,
            duplicates=written.duplicates + batch.skipped,
            dead_letters=len(letters),
        )
        self._send(letters)
        self._count(result)
        for partition, records in batch.polled.items():
            if records:
                self._positions[partition] = records[-1].offset + 1
        self.totals.add(result)
        return result

    def dead_letter(self, value: Any, record: Any, error: str) -> SinkDeadLetter:
        """The ``stage: sink`` dead letter of *record* (:func:`~crawlhive.utils.contract.records.sink_dead_letter`)."""
        return sink_dead_letter(self.name, error, value, record.topic, record.partition, record.offset)

    def _send(self, letters: list[SinkDeadLetter]) -> None:
        """Produce *letters* and wait for every acknowledgement (raises KafkaError if one fails)."""
        if letters:
            assert self.producer is not None
            records = [(self.dead_letter_topic, encode(letter), None) for letter in letters]
            send_and_wait(self.producer, records, self.ack_timeout_s)

    def _count(self, result: SinkResult) -> None:
        """Add *result* to this sink's counters (``stats: sink``)."""
        counts = [
            (COMPONENT, sink_counter_name(self.name, name), n) for name in COUNTERS if (n := getattr(result, name))
        ]
        if counts:
            self.stats.incr_many(counts)


def _ref_size_of_message(data: bytes | None) -> int:
    """:func:`_ref_size` of a record's value before it is decoded (the value is parsed only when it
    names a reference: such a message is small)."""
    if not data or (b'"body_ref"' not in data and b'"item_ref"' not in data):
        return 0
    try:
        value = json.loads(data)
    except ValueError:
        return 0
    return _ref_size(value) if isinstance(value, dict) else 0


def _ref_size(value: dict[str, Any]) -> int:
    """Bytes of the blob a record's ``body_ref`` or ``item_ref`` names (its ``size``, checked by
    :meth:`~crawlhive.utils.backends.blobs.BlobStore.resolve`)."""
    if value.get("body") is None and "body_ref" in value:
        ref = value["body_ref"]
    elif value.get("item") is None and "item_ref" in value:
        ref = value["item_ref"]
    else:
        return 0
    size = ref.get("size") if isinstance(ref, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else 0
