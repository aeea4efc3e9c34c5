"""The kafka-monitor process: ``<prefix>.incoming`` -> validation -> RedisClient, at least once.

One loop iteration handles one poll's batch:

1. validate every record (:class:`RequestValidator`): accepted ones are grouped by plugin, the
   rest become dead letters with their reason;
2. each plugin queues its Redis writes for its group on one pipeline, executed in one round trip
   (MULTI/EXEC). A plugin that raises (or whose writes Redis refuses for a reason retrying cannot
   fix) is retried one request at a time, so only the requests it really fails on become dead
   letters (``Invalid request: internal error``) and their valid neighbours still go through;
3. dead letters are produced and the broker's acknowledgement awaited;
4. the batch is counted in the stats (docs/contract.md §4.7) and only then are the offsets committed.

If Redis or Kafka is unreachable in steps 2-4, the consumer seeks back to the batch's first offsets
and the batch is processed again after a back-off that logs the setting to check; plugin writes are
idempotent per record (see :class:`~crawlhive.kafka_monitor.plugins.Incoming`), so nothing is lost
and nothing is queued twice. If a back-off outlasts KAFKA_MAX_POLL_INTERVAL_MS the group takes the
partitions away and gives them back from the last committed offsets, which has the same effect. A
SIGKILL at any point has that effect too. Start-up (Redis ping, topics, consumer group) is retried
the same way, so the process can be started before its backends.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from crawlhive.kafka_monitor.plugins import BUILTIN_PLUGINS, Incoming, IncomingPlugin
from crawlhive.utils.backends import tracing
from crawlhive.utils.backends.kafka_clients import record_origin
from crawlhive.utils.backends.redis_clients import check_redis, redis_from_settings, write_pipeline
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.backends.replication import ReplicaWait
from crawlhive.utils.backends.scripts import scripts
from crawlhive.utils.config.log import mask_url
from crawlhive.utils.contract.messages import MessageKind
from crawlhive.utils.contract.produce import send_and_wait
from crawlhive.utils.contract.records import validation_dead_letter
from crawlhive.utils.contract.validation import Accepted, RequestValidator
from crawlhive.utils.frontier.tails import TailLimits
from crawlhive.utils.process.intake import request_limits
from crawlhive.utils.process.loop import is_out_of_memory, is_transient
from crawlhive.utils.process.plugins import load_plugins
from crawlhive.utils.process.worker import BatchCounts, ConsumerWorker

if TYPE_CHECKING:
    from crawlhive.utils.backends.rdkafka import Record as ConsumerRecord
    from crawlhive.utils.backends.redis_types import RedisPipeline
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

COMPONENT = "kafka-monitor"
#: The dead-letter reason of a request a plugin failed on (docs/contract.md §6: ``Invalid request: <cause>``).
INTERNAL_ERROR = "Invalid request: internal error"
#: The dead-letter reason of a request Redis refused for lack of memory (``maxmemory``), twice.
OUT_OF_MEMORY = "Redis out of memory (maxmemory)"


@dataclass
class BatchResult(BatchCounts):
    """What one batch did, for tests and progress output."""

    accepted: int = 0
    rejected: int = 0


class KafkaMonitor(ConsumerWorker):
    """Consumes ``<prefix>.incoming`` in the consumer group KAFKA_GROUP and feeds Redis (the loop,
    back-off, signals and teardown are :class:`~crawlhive.utils.process.worker.Worker`'s).

    Args:
        settings: the process settings (connections, topics, plugins, stats, heartbeats).
        redis: a client on REDIS_URL (not yet checked; :meth:`setup` pings it).
        owns_redis: close *redis* in :meth:`teardown`.
    """

    component = COMPONENT

    def __init__(self, settings: Settings, redis: RedisClient, *, owns_redis: bool = False) -> None:
        super().__init__(settings, redis, owns_redis=owns_redis)
        self.incoming_topic = settings.topic("incoming")
        self.dead_letter_topic = settings.topic("dead_letter")
        self.max_record_bytes = settings.KAFKA_PRODUCER_MAX_REQUEST_SIZE
        self.validator: RequestValidator | None = None
        self.plugins: dict[type[MessageKind], IncomingPlugin] = {}
        self.totals: BatchResult = BatchResult()
        self.replicas = ReplicaWait.from_settings(redis, settings)
        self.tails_enabled = TailLimits.from_settings(settings).enabled
        self._tails_checked = 0.0
        self._tails_holding = False

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """A monitor on REDIS_URL (nothing is connected before :meth:`setup`)."""
        return cls(settings, redis_from_settings(settings), owns_redis=True)

    # --- lifecycle ---------------------------------------------------------------------------

    def setup(self) -> None:
        """Check Redis, create topics, build plugins, join the consumer group.

        Safe to call again after it failed: what was built is kept.

        Raises:
            BackendUnavailable: Redis or Kafka cannot be reached (the message names REDIS_URL or
                KAFKA_BOOTSTRAP_SERVERS).
            SettingsError, PluginLoadError: a setting or plugin path is wrong; retrying cannot help.
        """
        check_redis(self.redis, self.settings)
        if self.validator is None:
            built = load_plugins(
                COMPONENT,
                BUILTIN_PLUGINS,
                [self.settings.PLUGINS, self.settings.KAFKA_MONITOR_PLUGINS],
                lambda cls: cls.from_monitor(self),
            )
            self.plugins = {type(p): p for p in built}
            # Validate against the plugins that run: a disabled kind is rejected like any unknown one.
            kinds = list(self.plugins)
            self.validator = RequestValidator(kinds, request_limits(self.settings, kinds))
        self.open_kafka(self.incoming_topic, self.settings.kafka_group, [self.dead_letter_topic])

    # --- one iteration ---------------------------------------------------------------------

    def run_once(self) -> BatchResult:
        """One batch (:meth:`ConsumerWorker.consume_batch`), added to the totals.

        Raises:
            RedisError, KafkaError: a backend failed; the batch will be delivered again.
        """
        if self._hold_while_tails_full():
            return BatchResult()
        result: BatchResult | None = self.consume_batch()[0]
        if result is None:
            return BatchResult()
        self.totals.add(result)
        return result

    def _hold_while_tails_full(self) -> bool:
        """Read no new crawl requests while the frontier's tail store cannot take what waits in
        Redis beyond the heads (``tail_full``, FRONTIER_TAIL_BACKLOG_MAX, docs/contract.md §23.6):
        one WARNING names FRONTIER_TAIL_URL, the assigned partitions are paused (the consumer keeps
        polling, so it stays in its group and commits what it finished) and a consumer with no
        partition yet does not poll at all (a poll could fetch before a pause). The marker is read
        once a second at most. Returns True when this iteration must not poll."""
        if not self.tails_enabled or self.consumer is None:
            return False
        now = time.monotonic()
        if now >= self._tails_checked + 1.0:
            self._tails_checked = now
            full = self.redis.get(self.keys.tail_full())
            if full is not None and not self._tails_holding:
                self._tails_holding = True
                logger.warning(
                    "new crawl requests wait: the frontier's tail store cannot be written (%s) and more "
                    "than FRONTIER_TAIL_BACKLOG_MAX requests wait in Redis for it",
                    full.decode(errors="replace") if isinstance(full, bytes) else full,
                )
            elif full is None and self._tails_holding:
                self._tails_holding = False
                logger.info("the frontier's tail store takes requests again: reading crawl requests")
                if self.consumer.paused():
                    self.consumer.resume(*self.consumer.paused())
        if not self._tails_holding:
            return False
        assignment = list(self.consumer.assignment())
        if not assignment:
            time.sleep(0.5)  # a stop request is seen by the loop right after
            return True
        self.consumer.pause(*assignment)
        return False

    def process(self, records: list[ConsumerRecord]) -> BatchResult:
        """Validate, write to Redis, dead-letter the rest, count; raises if Redis or Kafka fails."""
        assert self.validator is not None, "setup() first"
        validate = self.validator.validate_raw
        groups: dict[type[MessageKind], list[tuple[ConsumerRecord, Incoming]]] = defaultdict(list)
        dead: list[tuple[ConsumerRecord, str]] = []
        spans: dict[int, Any] | None = {} if tracing.ON else None  # id(record) -> its span (§26.3)
        for record in records:
            trace = None
            if spans is not None:
                trace = self._trace(record, spans)
            try:
                outcome = validate(record.value)
            except Exception:  # a validator bug must not stop the loop or lose the neighbours
                logger.error("validation failed on %s@%d", record.topic, record.offset, exc_info=True)
                dead.append((record, "Invalid request: internal error while validating"))
                continue
            if isinstance(outcome, Accepted):
                origin = record_origin(record)
                sent_ms = record.timestamp if isinstance(record.timestamp, int) and record.timestamp > 0 else 0
                groups[outcome.plugin].append((record, Incoming(outcome.message, origin, sent_ms, trace)))
            else:
                dead.append((record, outcome.reason))

        handled: dict[str, int] = {}
        for plugin_cls, items in groups.items():
            count, failed = self._handle(self.plugins[plugin_cls], items)
            if count:
                handled[plugin_cls.name] = count
            dead.extend(failed)

        refused = sum(1 for _, reason in dead if reason == OUT_OF_MEMORY)
        if refused:
            logger.error(
                "Redis refused %d request(s) for lack of memory: dead-lettered (%s); raise maxmemory or free"
                " memory on REDIS_URL (%s)",
                refused,
                OUT_OF_MEMORY,
                mask_url(self.settings.REDIS_URL),
            )
        if handled:  # REDIS_WAIT_REPLICAS: replicated before the offsets are committed (§18.3)
            self.replicas.wait((), cluster_wide=True)  # a cluster's shards: Frontier.push waited
        self._send_dead_letters(dead)
        self._count(len(records), len(dead), handled)
        if spans:
            self._end_spans(spans, dead)
        return BatchResult(records=len(records), accepted=sum(handled.values()), rejected=len(dead))

    @staticmethod
    def _trace(record: ConsumerRecord, spans: dict[int, Any]) -> str | None:
        """Start the span of *record* (docs/contract.md §26.3): a child of its ``traceparent``
        header, else the root of a new trace; returns the frontier ``trace`` of its seed."""
        parent = tracing.context_of_headers(getattr(record, "headers", None))
        span = tracing.tracer().start_span(
            "crawlhive.kafka_monitor.accept",
            context=parent,
            kind=tracing.SpanKind.CONSUMER,
            attributes={
                "messaging.system": "kafka",
                "messaging.destination.name": record.topic,
                "messaging.destination.partition.id": str(record.partition),
                "messaging.kafka.offset": record.offset,
            },
        )
        spans[id(record)] = span
        return tracing.frontier_trace(span)

    @staticmethod
    def _end_spans(spans: dict[int, Any], dead: list[tuple[ConsumerRecord, str]]) -> None:
        """End the batch's spans: those of dead-lettered records as errors, with the reason."""
        for record, reason in dead:
            span = spans.get(id(record))
            if span is not None:
                tracing.fail(span, reason)
        end = tracing.now_ns()
        for span in spans.values():
            span.end(end)

    def _handle(
        self, plugin: IncomingPlugin, items: list[tuple[ConsumerRecord, Incoming]]
    ) -> tuple[int, list[tuple[ConsumerRecord, str]]]:
        """Write *items* through *plugin*: the whole group in one round trip, else one by one.

        Redis out of memory (``maxmemory`` reached, :func:`is_out_of_memory`) is not waited out:
        the group is tried once more, then one by one, and each record Redis still refuses becomes
        a dead letter (:data:`OUT_OF_MEMORY`), so one request too large for Redis cannot rewind the
        batch forever (the batch's caller logs one ERROR naming maxmemory).

        Returns:
            How many were written, and the dead letters of those the plugin failed on.

        Raises:
            Whatever :func:`is_transient` accepts: the batch must be retried.
        """
        requests = [incoming for _, incoming in items]
        for attempt in (1, 2):
            try:
                self._write(plugin, requests)
                return len(items), []
            except Exception as exc:
                if is_transient(exc):
                    raise
                if attempt == 2 or not is_out_of_memory(exc):
                    failure = exc
                    break
        if len(items) == 1:
            return 0, [(items[0][0], self._refusal(plugin, items[0][0], failure))]
        if not is_out_of_memory(failure):
            logger.warning("%s failed on a batch of %d (%r); retrying one by one", plugin.name, len(items), failure)
        written, dead = 0, []
        for record, incoming in items:
            try:
                self._write(plugin, [incoming])
                written += 1
            except Exception as exc:
                if is_transient(exc):
                    raise
                dead.append((record, self._refusal(plugin, record, exc)))
        return written, dead

    def _refusal(self, plugin: IncomingPlugin, record: ConsumerRecord, exc: BaseException) -> str:
        """The dead-letter reason of a record *plugin* could not write; logs a plugin failure."""
        if is_out_of_memory(exc):
            return OUT_OF_MEMORY
        logger.error("%s failed on %s@%d", plugin.name, record.topic, record.offset, exc_info=exc)
        return INTERNAL_ERROR

    def _write(self, plugin: IncomingPlugin, requests: list[Incoming]) -> None:
        """Run *plugin*'s writes for *requests* in one ``MULTI`` (again, whole, if Redis had lost
        the scripts: every plugin's writes are idempotent)."""

        def build() -> RedisPipeline:
            pipe = write_pipeline(self.redis)
            plugin.handle(requests, pipe)
            return pipe

        scripts(self.redis).execute(build)

    def _count(self, total: int, failed: int, handled: dict[str, int]) -> None:
        """Count the batch in the stats; not when Redis is out of memory (the dead letters are sent:
        rewinding for a count would send them again)."""
        counts = [(COMPONENT, "total", total), (COMPONENT, "fail", failed)]
        counts += [(COMPONENT, f"plugin:{name}", count) for name, count in handled.items()]
        pipe = self.redis.pipeline(transaction=False)
        self.stats.incr_many(counts, pipe=pipe)
        try:
            pipe.execute()
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            logger.warning("stats of a batch of %d not counted: %s", total, OUT_OF_MEMORY)

    # --- dead letters ------------------------------------------------------------------------

    def dead_letter(self, raw: bytes | None, reason: str) -> bytes:
        """The dead-letter record (docs/contract.md §6 a) of *raw* rejected for *reason*
        (:func:`validation_dead_letter`, within KAFKA_PRODUCER_MAX_REQUEST_SIZE)."""
        return validation_dead_letter(raw, reason, self.max_record_bytes)

    def _send_dead_letters(self, dead: list[tuple[ConsumerRecord, str]]) -> None:
        """Produce every dead letter and wait for the broker's acks (raises KafkaError if not)."""
        if not dead:
            return
        assert self.producer is not None
        for record, reason in dead:
            logger.info(
                "rejected %s@%d: %.300s", record.topic, record.offset, reason, extra={"kafka_offset": record.offset}
            )
        records = [(self.dead_letter_topic, self.dead_letter(record.value, reason), None) for record, reason in dead]
        send_and_wait(self.producer, records, self.ack_timeout_s)
