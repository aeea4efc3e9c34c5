"""``crawlhive sink``: one sink process (docs/contract.md §20.1).

A :class:`~crawlhive.utils.worker.ConsumerWorker` (set-up with back-off, signals, heartbeat,
teardown) that consumes ``<prefix>.cleaned`` (or the topic of SINK_FROM) in the sink's own consumer
group and hands each batch's JSON objects to its :class:`~crawlhive.sink.store.Store`. The at-least-
once rule is the cleaner's: a partition's offset is committed only once everything before it is
durable in the store (:meth:`Store.held_back` keeps back what a file sink has not completed yet) and
the batch's dead letters are acknowledged by the broker. While the store is unreachable the batch is
rewound and the loop backs off (up to 10 s), logging the URL to check (password masked): nothing is
lost, nothing committed. A record the store cannot hold (not JSON, not an object, refused by
PostgreSQL) becomes a dead letter ``{"stage": "sink", ...}`` and the sink goes on.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from crawlhive.sink.store import SinkRecord, Store, WriteResult, sink_group, sink_name, source_topic, store_for
from crawlhive.utils.blobs import BlobError, BlobStore
from crawlhive.utils.contract.encoding import encode
from crawlhive.utils.contract.produce import send_and_wait
from crawlhive.utils.contract.records import sink_dead_letter
from crawlhive.utils.log import mask_url
from crawlhive.utils.redis_clients import check_redis, redis_from_settings
from crawlhive.utils.sink_state import COMPONENT, COUNTERS, publish, sink_counter_name, withdraw
from crawlhive.utils.worker import ConsumerWorker

if TYPE_CHECKING:
    from kafka import TopicPartition
    from kafka.consumer.fetcher import ConsumerRecord
    from redis import Redis

    from crawlhive.utils.settings import Settings

logger = logging.getLogger(__name__)

#: Seconds between two progress lines of a busy sink (none while idle).
PROGRESS_EVERY_S = 10.0


@dataclass
class SinkResult:
    """What one batch (or a sink's life) did."""

    records: int = 0
    written: int = 0
    duplicates: int = 0
    dead_letters: int = 0

    def add(self, other: SinkResult) -> None:
        for name in ("records", *COUNTERS):
            setattr(self, name, getattr(self, name) + getattr(other, name))


class Sink(ConsumerWorker):
    """Consumes a topic into a store (see the module docstring)."""

    component = COMPONENT

    def __init__(self, settings: Settings, redis: Redis, store: Store, url: str, *, owns_redis: bool = False) -> None:
        super().__init__(settings, redis, owns_redis=owns_redis)
        self.store = store
        self.url = url
        self.name = sink_name(url)
        self.group = sink_group(settings, url)
        # A WARC sink archives crawled pages, the others cleaned records, unless SINK_FROM says.
        default = "crawled_firehose" if store.kind == "warc" and not settings.is_set("SINK_FROM") else None
        self.source_topic = source_topic(settings, default or str(settings["SINK_FROM"]))
        self.dead_letter_topic = settings.topic("dead_letter")
        self.max_poll_records = settings.getint("SINK_MAX_POLL_RECORDS")
        self.blobs = BlobStore.from_settings(settings)
        self.totals = SinkResult()
        self._progress = (time.monotonic(), SinkResult())
        #: Per partition: the offset after the last record processed, and the offset committed.
        self._positions: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """A sink to SINK_URL on REDIS_URL (nothing is connected before :meth:`setup`).

        Raises:
            SettingsError: SINK_URL is missing or names no known store.
        """
        url = str(settings["SINK_URL"])
        return cls(settings, redis_from_settings(settings), store_for(settings, url), url, owns_redis=True)

    # --- lifecycle ---------------------------------------------------------------------------

    def setup(self) -> None:
        """Check Redis, open the store (create its table or folder), join the consumer group.

        Raises:
            BackendUnavailable: Redis, Kafka or the store cannot be reached (each names its setting).
        """
        check_redis(self.redis, self.settings)
        self.store.open()
        self.open_kafka(self.source_topic, self.group, [self.dead_letter_topic], max_poll_records=self.max_poll_records)
        logger.info("sink %s writes %s to %s", self.name, self.source_topic, mask_url(self.url))

    def close(self) -> None:
        """Leave the group and close the Kafka clients, then the store (what it held back was
        not committed: the group delivers it again); withdraw this process's state."""
        try:
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
            state = {
                "sink": self.name,
                "kind": self.store.kind,
                "topic": self.source_topic,
                "group": self.group,
                "lag": self.lag(),
            }
            publish(self.redis, self.keys, self.node_id, state, 2 * self.settings.getfloat("HEARTBEAT_TIMEOUT"))

    def lag(self) -> int | None:
        """Records of this process's partitions not committed yet (None when the broker cannot say)."""
        from kafka.errors import KafkaError

        assert self.consumer is not None
        try:
            assigned = list(self.consumer.assignment())
            if not assigned:
                return 0
            ends = self.consumer.end_offsets(assigned)
            total = 0
            for partition in assigned:
                done = self._committed.get(partition)
                if done is None:
                    done = self.consumer.committed(partition) or 0
                total += max(0, int(ends[partition]) - done)
            return total
        except (KafkaError, ValueError, AssertionError):
            return None

    def log_progress(self, force: bool = False) -> None:
        now = time.monotonic()
        at, mark = self._progress
        if not force and now - at < PROGRESS_EVERY_S:
            return
        totals = self.totals
        if records := totals.records - mark.records:
            logger.info(
                "sink %s: %d records in %.0fs: %d written, %d duplicates, %d dead letters",
                self.name,
                records,
                now - at,
                totals.written - mark.written,
                totals.duplicates - mark.duplicates,
                totals.dead_letters - mark.dead_letters,
            )
        snapshot = SinkResult()
        snapshot.add(totals)
        self._progress = (now, snapshot)

    # --- one iteration -----------------------------------------------------------------------

    def run_once(self) -> SinkResult:
        """Poll one batch, write it, commit what is durable.

        A failure of the write rewinds the batch (it is written again after the back-off); a
        failure of the commit does not (the batch is durable; its offsets go with the next commit).

        Raises:
            BackendUnavailable, RedisError, KafkaError: a backend failed.
        """
        assert self.consumer is not None, "setup() first"
        polled = self.consumer.poll(timeout_ms=self.poll_timeout_ms, max_records=self.max_poll_records)
        records = [record for batch in polled.values() for record in batch]
        result = SinkResult()
        try:
            if records:
                result = self.process(records)
                for partition, batch in polled.items():
                    if batch:
                        self._positions[partition] = batch[-1].offset + 1
                self.totals.add(result)
            assigned = self.consumer.assignment()
            for partition in [p for p in self._positions if p not in assigned]:
                del self._positions[partition]  # its next owner starts from the committed offset
                self._committed.pop(partition, None)
            self.store.tick({(p.topic, p.partition) for p in assigned})
        except BaseException:
            self.rewind(polled)
            self._rewind_held()
            raise
        self.commit_durable()
        self.beat_or_probe(busy=bool(records))
        return result

    def _rewind_held(self) -> None:
        """After a failed write: read again from the first record the store held back and forgot
        (a file not completed), so that nothing it held is skipped."""
        from kafka import TopicPartition
        from kafka.errors import KafkaError

        assert self.consumer is not None
        for (topic, partition), offset in self.store.abandon().items():
            where = TopicPartition(topic, partition)
            try:
                self.consumer.seek(where, offset)
            except (KafkaError, ValueError, AssertionError):
                logger.info("could not rewind %s (no longer assigned)", where)

    def commit_durable(self) -> None:
        """Commit, per partition, the offset before which every record is durable in the store."""
        from kafka.structs import OffsetAndMetadata

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
        """Write *records* to the store; dead letters acknowledged by the broker when this returns.

        Raises:
            BackendUnavailable: the store is unreachable (nothing of the batch counts as written).
        """
        result = SinkResult(records=len(records))
        good: list[SinkRecord] = []
        letters: list[dict[str, Any]] = []
        for record in records:
            try:
                value = json.loads(record.value)
            except ValueError as exc:
                letters.append(self.dead_letter(None, record, f"not JSON ({str(exc)[:200]})"))
                continue
            if not isinstance(value, dict):
                letters.append(self.dead_letter(value, record, f"not a JSON object but {type(value).__name__}"))
                continue
            try:
                resolved = self.blobs.resolve(value)  # a body by reference: the record holds it (§20.5)
            except BlobError as exc:
                letters.append(self.dead_letter(value, record, str(exc)))
                continue
            raw = record.value if resolved is value else None
            good.append(SinkRecord(record.topic, record.partition, record.offset, resolved, len(record.value), raw))
        written: WriteResult = self.store.write(good) if good else WriteResult()
        for sink_record, reason in written.rejected:
            origin = sink_record
            letters.append(self.dead_letter(sink_record.value, origin, reason))
        result.written, result.duplicates, result.dead_letters = written.written, written.duplicates, len(letters)
        self._send(letters)
        self._count(result)
        return result

    def dead_letter(self, value: Any, record: Any, error: str) -> dict[str, Any]:
        """The ``stage: sink`` dead letter of *record* (:func:`~crawlhive.utils.contract.records.sink_dead_letter`)."""
        return sink_dead_letter(self.name, error, value, record.topic, record.partition, record.offset)

    def _send(self, letters: list[dict[str, Any]]) -> None:
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
