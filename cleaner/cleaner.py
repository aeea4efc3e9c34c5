"""``crawlhive cleaner``: one cleaner process (docs/contract.md §13).

A :class:`~crawlhive.utils.process.worker.Worker` (set-up with back-off, signals, heartbeat, teardown, as
every crawlhive loop) that consumes ``<prefix>.crawled_firehose`` in the consumer group
CLEANER_GROUP, runs each batch through the steps (:mod:`crawlhive.cleaner.plugins`), produces the
cleaned records to ``<prefix>.cleaned`` and the dead letters to ``<prefix>.dead_letter``, waits for
the broker's acknowledgement of all of them, and only then commits the batch's offsets: a cleaner
killed at any moment leaves every crawled page cleaned at least once by whoever owns its partition
next. A failure of Redis or Kafka rewinds the batch (it is processed again after the back-off);
a bug in a step on one record makes that record a dead letter, never stops the loop.

Cleaning is CPU work whose cost a page controls, so each page has a budget, CLEANER_MAX_SECONDS:
the extraction runs in a child process killed at the deadline, and a page over the budget after
any step is a dead letter. The cleaner's consumer has poll settings of its own
(CLEANER_MAX_POLL_RECORDS, CLEANER_MAX_POLL_INTERVAL_MS, checked to exceed budget × records), so a
batch of slow pages ends well before the group would evict the cleaner. Should a commit fail all
the same, the batch whose outputs were acknowledged is not rewound, and the offsets after it are
recorded in Redis (:meth:`Cleaner.remember_done`), so that whichever cleaner gets its records
again does not emit them twice.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from redis.exceptions import RedisError

from crawlhive.cleaner.page import Duplicate, NearDuplicate, NotAnItem, Page, Reject, Skip, too_long
from crawlhive.cleaner.plugins import BUILTIN_PLUGINS, CleanerPlugin
from crawlhive.utils.backends import tracing
from crawlhive.utils.backends.blobs import BlobError, BlobStore
from crawlhive.utils.backends.redis_clients import check_redis, redis_from_settings
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.config.errors import SettingsError
from crawlhive.utils.contract.encoding import encode
from crawlhive.utils.contract.produce import send_and_wait
from crawlhive.utils.contract.records import CleanDeadLetter, CleanedRecord, clean_dead_letter, cleaned_record
from crawlhive.utils.process.loop import is_transient
from crawlhive.utils.process.plugins import load_plugins
from crawlhive.utils.process.worker import BatchCounts, ConsumerWorker
from crawlhive.utils.state.stats import CLEANER, CLEANER_COUNTERS, cleaner_machine_counter_name

if TYPE_CHECKING:
    from crawlhive.utils.backends.rdkafka import Record as ConsumerRecord
    from crawlhive.utils.config.settings import Settings

#: What a cleaner emits: a cleaned record, or a dead letter (docs/contract.md §13).
Output = CleanedRecord | CleanDeadLetter

logger = logging.getLogger(__name__)

COMPONENT = CLEANER
#: The counters of a cleaner in the stats (``stats: cleaner``).
COUNTERS = CLEANER_COUNTERS


#: Bytes the producer adds to a record's value in its size check (record batch header, a margin).
RECORD_OVERHEAD = 1024
#: Most extraction child processes a cleaner may run (CLEANER_EXTRACT_PROCESSES).
MAX_EXTRACT_PROCESSES = 32


@dataclass
class CleanResult(BatchCounts):
    """What one batch did (the counters are COUNTERS, in their order)."""

    cleaned: int = 0
    skipped: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    near_duplicates: int = 0


class Cleaner(ConsumerWorker):
    """Consumes the crawled firehose and publishes cleaned records (see the module docstring)."""

    component = COMPONENT
    poll_interval_setting = "CLEANER_MAX_POLL_INTERVAL_MS"
    #: Pages take tens of milliseconds each: the first batches are small, so the first cleaned
    #: record leaves after one page (:meth:`ConsumerWorker.consume_batch`).
    slow_start = True

    def __init__(self, settings: Settings, redis: RedisClient, *, owns_redis: bool = False) -> None:
        super().__init__(settings, redis, owns_redis=owns_redis)
        self.source_topic = settings.topic("crawled_firehose")
        self.cleaned_topic = settings.topic("cleaned")
        self.dead_letter_topic = settings.topic("dead_letter")
        self.steps: list[CleanerPlugin] = []
        self.totals: CleanResult = CleanResult()
        self.max_seconds = settings.CLEANER_MAX_SECONDS
        self.max_poll_records = settings.CLEANER_MAX_POLL_RECORDS
        self.max_poll_interval_ms = settings.CLEANER_MAX_POLL_INTERVAL_MS
        self.max_request = settings.KAFKA_PRODUCER_MAX_REQUEST_SIZE
        #: Where the bodies of large pages are (docs/contract.md §20.5).
        self.blobs = BlobStore.from_settings(settings)
        self.emitted_key = self.keys.cleaner_emitted(settings.cleaner_group)
        #: Bytes of the largest record the producer accepts (its limit less a record's framing).
        self.max_record_bytes = self.max_request - RECORD_OVERHEAD
        self._check_budget()

    def _check_budget(self) -> None:
        """Raises SettingsError unless a batch of pages that all use their whole budget still ends
        within the poll interval (else the group evicts the cleaner and the batch is replayed)."""
        if not self.max_seconds > 0:
            raise SettingsError(f"CLEANER_MAX_SECONDS: expected a positive number, got {self.max_seconds!r}")
        if self.settings.CLEANER_MAX_TEXT_BYTES < 1 or self.max_poll_records < 1:
            raise SettingsError("CLEANER_MAX_TEXT_BYTES and CLEANER_MAX_POLL_RECORDS must be at least 1")
        if not 1 <= self.settings.CLEANER_EXTRACT_PROCESSES <= MAX_EXTRACT_PROCESSES:
            raise SettingsError(
                f"CLEANER_EXTRACT_PROCESSES: expected 1 to {MAX_EXTRACT_PROCESSES},"
                f" got {self.settings.CLEANER_EXTRACT_PROCESSES!r}"
            )
        batch_ms = self.max_seconds * 1000 * self.max_poll_records
        if self.max_poll_interval_ms <= batch_ms:
            raise SettingsError(
                f"CLEANER_MAX_POLL_INTERVAL_MS ({self.max_poll_interval_ms}) must exceed CLEANER_MAX_SECONDS × "
                f"CLEANER_MAX_POLL_RECORDS ({batch_ms:.0f} ms): a batch of slow pages would lose the group"
            )

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """A cleaner on REDIS_URL (nothing is connected before :meth:`setup`)."""
        return cls(settings, redis_from_settings(settings), owns_redis=True)

    # --- lifecycle ---------------------------------------------------------------------------

    def setup(self) -> None:
        """Check Redis, build the steps, create the topics, join the consumer group.

        Raises:
            BackendUnavailable: Redis or Kafka cannot be reached (names REDIS_URL or
                KAFKA_BOOTSTRAP_SERVERS).
            PluginLoadError: a CLEANER_PLUGINS path is wrong.
        """
        check_redis(self.redis, self.settings)
        # The consumer first: librdkafka joins the group on a thread of its own (a broker holds a
        # new group's first join: 1-3 s) while the steps start side by side (the extraction
        # processes import trafilatura, the language model loads on a thread: about half a second),
        # so the first batch is polled after the longer of the two.
        self.open_kafka(
            self.source_topic,
            self.settings.cleaner_group,
            [self.cleaned_topic, self.dead_letter_topic],
            max_poll_interval_ms=self.max_poll_interval_ms,
            max_poll_records=self.max_poll_records,
        )
        if not self.steps:
            self.steps = load_plugins(
                COMPONENT, BUILTIN_PLUGINS, [self.settings.CLEANER_PLUGINS], lambda cls: cls.from_cleaner(self)
            )
        try:  # they started side by side (the extraction processes, the language model)
            for step in self.steps:
                step.wait_ready()
        except BaseException:  # the next set-up builds them again
            self._close_steps()
            raise

    def _close_steps(self) -> None:
        """Close every step (the extraction processes) and forget them. Never raises."""
        steps, self.steps = self.steps, []
        for step in steps:
            try:
                step.close()
            except Exception:  # noqa: BLE001 - shutting down: report and go on closing the rest
                logger.warning("closing cleaner step %s failed", step.name, exc_info=True)

    def close(self) -> None:
        """Close the steps (the extraction process), then the Kafka clients."""
        self._close_steps()
        super().close()

    # --- one iteration -----------------------------------------------------------------------

    def run_once(self) -> CleanResult:
        """One batch (:meth:`ConsumerWorker.consume_batch`), added to the totals.

        Raises:
            RedisError, KafkaError: a backend failed; the batch will be processed again.
        """
        result: CleanResult | None = self.consume_batch()[0]
        if result is None:
            return CleanResult()
        self.totals.add(result)
        return result

    def remember_done(self, polled: dict[Any, list[ConsumerRecord]]) -> None:
        """Record in Redis, per partition, the offset after this batch whose commit failed, so that
        no cleaner of the group emits its records again when the broker delivers them again (the
        group evicted this cleaner: the next owner starts from the last committed offset). Kept
        for 2 x CLEANER_MAX_POLL_INTERVAL_MS + 60 s: the records come back at the next join, long
        before (it took 3.5 s in the test, after a 1.5 s poll interval).
        A Redis failure here is logged: the batch is then emitted again (at least once, §13)."""
        marks = {f"{p.topic}/{p.partition}": batch[-1].offset + 1 for p, batch in polled.items() if batch}
        if not marks:
            return
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.hset(self.emitted_key, mapping=marks)  # type: ignore[arg-type]
            pipe.pexpire(self.emitted_key, 2 * self.max_poll_interval_ms + 60_000)
            pipe.execute()
        except RedisError:
            logger.warning("could not record a batch whose commit failed; it will be cleaned again", exc_info=True)

    def _not_emitted(self, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        """*records* less those a batch whose commit failed emitted already (:meth:`remember_done`)."""
        marks = self.redis.hgetall(self.emitted_key)
        if not marks:
            return records
        done = {str(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in marks.items()}
        return [r for r in records if r.offset >= done.get(f"{r.topic}/{r.partition}", -1)]

    def process(self, records: list[ConsumerRecord]) -> CleanResult:
        """Clean *records*; every output acknowledged by the broker when this returns."""
        result = CleanResult(records=len(records))
        records = self._not_emitted(records)
        outputs: list[tuple[str, Output]] = []
        pages: list[Page] = []
        spans: dict[int, Any] | None = {} if tracing.ON else None  # id(page) -> its span (§26.3)
        for record in records:
            origin = f"{record.topic}/{record.partition}/{record.offset}"
            item: Any = None
            try:
                item = self.blobs.resolve(json.loads(record.value))  # a body by reference (§20.5)
                page = Page.from_item(item, origin)
                pages.append(page)
                if spans is not None:
                    self._start_span(record, page, spans)
            except Skip:
                result.skipped += 1
            except (ValueError, NotAnItem, BlobError) as exc:  # not JSON (ValueError), not an item, no blob
                reason = str(exc) if isinstance(exc, NotAnItem | BlobError) else f"not a crawled item: not JSON ({exc})"
                outputs.append((self.dead_letter_topic, self.dead_letter(item, reason)))
        traced = list(pages) if spans else []
        for step in self.steps:
            pages = self._run_step(step, pages, outputs, result)
        headers: dict[int, list[tuple[str, bytes]]] = {}
        emitted: set[int] = set()
        for page in pages:
            cleaned = self.cleaned_record(page)
            size = len(encode(cleaned))
            if size > self.max_record_bytes:  # the producer would refuse it, and the batch fail again
                error = (
                    f"cleaned record too large: {size} bytes (KAFKA_PRODUCER_MAX_REQUEST_SIZE is {self.max_request})"
                )
                outputs.append((self.dead_letter_topic, self.dead_letter(page.item, error)))
                if spans and id(page) in spans:
                    tracing.fail(spans[id(page)], error)
                continue
            if spans and id(page) in spans:  # the cleaned record carries the clean span (§26.3)
                headers[len(outputs)] = tracing.headers_of(spans[id(page)])
                spans[id(page)].set_attribute("crawlhive.outcome", "cleaned")
                emitted.add(id(page))
            outputs.append((self.cleaned_topic, cleaned))
            result.cleaned += 1
            if "near_duplicate_of" in page.record:
                result.near_duplicates += 1
        result.dead_letters = sum(1 for topic, _ in outputs if topic == self.dead_letter_topic)
        try:
            self._send(outputs, headers)
        except BaseException as exc:
            if spans:
                self._end_spans(traced, spans, emitted, f"not acknowledged: {exc!r}")
            raise
        self._count(result)
        if spans:
            self._end_spans(traced, spans, emitted, None)
        return result

    @staticmethod
    def _start_span(record: ConsumerRecord, page: Page, spans: dict[int, Any]) -> None:
        """The span of *page*, a child of its record's ``traceparent`` (none without one: the
        crawler traced neither it nor its links, §26.3)."""
        parent = tracing.context_of_headers(getattr(record, "headers", None))
        if parent is None:
            return
        spans[id(page)] = tracing.tracer().start_span(
            "crawlhive.cleaner.clean",
            context=parent,
            kind=tracing.SpanKind.CONSUMER,
            attributes={
                "url.full": str(page.item.get("url", ""))[:2000],
                "messaging.system": "kafka",
                "messaging.destination.name": record.topic,
                "messaging.kafka.offset": record.offset,
            },
        )

    @staticmethod
    def _end_spans(pages: list[Page], spans: dict[int, Any], emitted: set[int], error: str | None) -> None:
        """End the batch's page spans (*emitted*: the ids of the pages sent on); a page that was
        not sent on says so (skipped, a duplicate, a dead letter: the counters say which)."""
        for page in pages:
            span = spans.get(id(page))
            if span is None:
                continue
            if error is not None:
                tracing.fail(span, error)
            elif id(page) not in emitted:
                span.set_attribute("crawlhive.outcome", "not emitted")
            span.end()

    def _run_step(
        self, step: CleanerPlugin, pages: list[Page], outputs: list[tuple[str, Output]], result: CleanResult
    ) -> list[Page]:
        """*pages* through *step*; those it stops are counted or dead-lettered here."""
        try:
            kept = step.process_batch(pages)
        except Exception as exc:
            if is_transient(exc):
                raise
            logger.error("cleaner step %s failed on a batch; trying its pages one by one", step.name, exc_info=True)
            kept = []
            for page in pages:
                try:
                    kept += step.process_batch([page])
                except Exception as one:
                    if is_transient(one):
                        raise
                    page.extra["outcome"] = Reject(f"internal error in cleaner step {step.name}")
        for page in kept:
            if page.spent > self.max_seconds:  # the budget, between steps
                page.extra["outcome"] = too_long(self.max_seconds)
        kept = [p for p in kept if "outcome" not in p.extra]
        # By identity: Page is a dataclass, and `in` would compare whole items field by field.
        kept_ids = {id(p) for p in kept}
        stopped = [p for p in pages if id(p) not in kept_ids]
        for page in stopped:
            outcome = page.extra.pop("outcome", None)
            if isinstance(outcome, Skip):
                result.skipped += 1
            elif isinstance(outcome, NearDuplicate):
                result.near_duplicates += 1
            elif isinstance(outcome, Duplicate):
                result.duplicates += 1
            elif isinstance(outcome, Reject):
                outputs.append((self.dead_letter_topic, self.dead_letter(page.item, str(outcome))))
            else:
                if outcome is not None and is_transient(outcome):
                    raise outcome
                logger.error("cleaner step %s failed on %s: %r", step.name, page.item.get("url"), outcome)
                outputs.append(
                    (self.dead_letter_topic, self.dead_letter(page.item, f"internal error in cleaner step {step.name}"))
                )
        return kept

    def cleaned_record(self, page: Page) -> CleanedRecord:
        """The §13 record of a cleaned page (:func:`~crawlhive.utils.contract.records.cleaned_record`)."""
        return cleaned_record(page.item, page.record)

    #: A ``stage: clean`` dead letter (:func:`~crawlhive.utils.contract.records.clean_dead_letter`).
    dead_letter = staticmethod(clean_dead_letter)

    def _send(
        self, outputs: list[tuple[str, Output]], headers: dict[int, list[tuple[str, bytes]]] | None = None
    ) -> None:
        """Produce *outputs* (the one at index i with ``headers[i]``) and wait for every
        acknowledgement (raises KafkaError if one fails)."""
        if not outputs:
            return
        assert self.producer is not None
        send_and_wait(
            self.producer,
            [(topic, encode(value), None) for topic, value in outputs],
            self.ack_timeout_s,
            headers=headers,
        )

    def _count(self, result: CleanResult) -> None:
        """Add *result* to the cluster's counters and this host's (``stats: cleaner``)."""
        host = self.settings.node_name
        counts = []
        for name in COUNTERS:
            if n := getattr(result, name):
                counts += [(COMPONENT, name, n), (COMPONENT, cleaner_machine_counter_name(host, name), n)]
        if counts:
            self.stats.incr_many(counts)
