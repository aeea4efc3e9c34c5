"""What every crawlhive process builds once, and the loop both monitors run.

:class:`ProcessContext` is the per-process wiring: settings, the Redis client, the key formats, a
fresh node id, stats and the heartbeat. Both monitors, the REST service and the crawler runtime build
one and nothing of it themselves.

:class:`Worker` is the skeleton of a long-running loop (the monitors, the cleaner):

* :meth:`Worker.start`: :meth:`~Worker.setup`, retried with back-off while a backend is unreachable;
* :meth:`Worker.run`: :meth:`~Worker.run_once` until a stop, backing off (and logging the setting
  to check) on a transient failure; the heartbeat renewed every HEARTBEAT_INTERVAL;
* :meth:`Worker.teardown`: :meth:`~Worker.close`, then the heartbeat is removed and an owned Redis
  client closed; never raises;
* one rule for which errors are transient (:func:`~crawlhive.utils.process.loop.is_transient`): those are
  retried after a back-off, anything else ends the loop (after the teardown) so ``main`` can exit
  with its message;
* the first SIGINT/SIGTERM finishes the current iteration, the second stops at once.

:class:`ConsumerWorker` adds what a loop over a Kafka consumer group needs (the kafka-monitor, the
cleaner): poll, process, commit only then, rewind a failed batch.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, ClassVar, Self

from crawlhive.utils.backends.blobs import BlobStore
from crawlhive.utils.backends.kafka_clients import ensure_topics, make_consumer, make_producer, probe_kafka
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.config.errors import SettingsError
from crawlhive.utils.config.log import mask_url
from crawlhive.utils.contract.kafka_errors import KafkaError
from crawlhive.utils.process.loop import (
    Backoff,
    ClusterGone,
    cluster_gone,
    describe_failure,
    install_stop_handlers,
    is_out_of_memory,
    is_transient,
)
from crawlhive.utils.state.heartbeat import Heartbeat, new_node_id
from crawlhive.utils.state.stats import Stats

if TYPE_CHECKING:
    from crawlhive.utils.backends.rdkafka import RdKafkaConsumer, RdKafkaSendProducer
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)


def logger_of(worker: Worker) -> logging.Logger:
    """The logger of *worker*'s own module (its lines are named after the component's code)."""
    return logging.getLogger(type(worker).__module__)


@dataclass
class ProcessContext:
    """The wiring of one process (see the module docstring)."""

    settings: Settings
    redis: RedisClient
    component: str
    keys: Keys
    node_id: str
    stats: Stats
    heartbeat: Heartbeat
    owns_redis: bool = False
    heartbeat_interval_s: float = field(init=False)
    #: Set when the cluster is gone for good (:class:`~crawlhive.utils.process.loop.ClusterGone`): the
    #: close does not try to reach Redis again.
    backends_gone: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.heartbeat_interval_s = self.settings.HEARTBEAT_INTERVAL

    @classmethod
    def create(
        cls,
        settings: Settings,
        redis: RedisClient,
        component: str,
        *,
        owns_redis: bool = False,
        heartbeat_extra: dict[str, Any] | None = None,
    ) -> ProcessContext:
        """Build the context of a *component* process on *redis* (nothing is sent yet).

        Args:
            heartbeat_extra: more fields for the heartbeat payload (crawlers add their spider type).
        """
        keys = keys_from_settings(settings)
        node_id = new_node_id()
        return cls(
            settings=settings,
            redis=redis,
            component=component,
            keys=keys,
            node_id=node_id,
            stats=Stats(redis, keys, settings.STATS_TIMES),
            heartbeat=Heartbeat(
                redis,
                keys,
                component,
                node_id,
                settings.node_name,
                settings.HEARTBEAT_TIMEOUT,
                extra=heartbeat_extra,
                alive_file=settings.HEARTBEAT_FILE,
            ),
            owns_redis=owns_redis,
        )

    def close(self) -> None:
        """Remove the heartbeat and close the Redis client if this process owns it. Never raises."""
        try:
            if not self.backends_gone:
                self.heartbeat.stop()
        except Exception:  # noqa: BLE001 - shutting down: report and go on
            logger.warning("could not remove the %s heartbeat on shutdown (check REDIS_URL)", self.component)
        if self.owns_redis:
            try:
                self.redis.close()
            except Exception:  # noqa: BLE001 - shutting down
                logger.debug("closing the Redis client failed", exc_info=True)


class Worker:
    """A long-running loop of one component (see the module docstring).

    Subclasses set :attr:`component` and :attr:`iteration` and implement :meth:`setup`,
    :meth:`run_once` and :meth:`close`; they may override :meth:`after_iteration`.

    Args:
        settings: the process settings.
        redis: a client on REDIS_URL (not yet checked: :meth:`setup` pings it).
        owns_redis: close *redis* in :meth:`teardown`.
    """

    #: The component name (heartbeats, stats, log lines).
    component: ClassVar[str] = "worker"
    #: What one iteration is called in the stop message ("finish this batch, then stop").
    iteration: ClassVar[str] = "this iteration"
    #: The setting of this worker's poll interval (a consumer's), named when a batch outlasted it.
    poll_interval_setting: ClassVar[str | None] = None

    def __init__(self, settings: Settings, redis: RedisClient, *, owns_redis: bool = False) -> None:
        self.context = ProcessContext.create(settings, redis, self.component, owns_redis=owns_redis)
        self.settings = settings
        self.redis = redis
        self.keys = self.context.keys
        self.node_id = self.context.node_id
        self.stats = self.context.stats
        self.heartbeat = self.context.heartbeat
        self.stopping = False
        self.backoff = Backoff()
        self._last_beat = 0.0
        #: Large pages' blobs (docs/contract.md §20.5), swept by age from every worker loop.
        self.blob_sweep: BlobStore | None = None
        try:
            self.blob_sweep = BlobStore.from_settings(settings)
        except SettingsError as exc:  # the components that read blobs refuse to start on it
            logger.warning("%s does not remove expired blobs: %s", self.component, exc)

    # --- what a component provides ------------------------------------------------------------

    def setup(self) -> None:
        """Check the backends and build what the loop needs; safe to call again after a failure."""
        raise NotImplementedError

    def run_once(self) -> Any:
        """One iteration; raises on a backend failure (the loop backs off and calls it again)."""
        raise NotImplementedError

    def close(self) -> None:
        """Close this component's own clients (Kafka); may raise (teardown reports it)."""

    def after_iteration(self) -> None:
        """Called after every iteration, failed or not (progress lines)."""

    # --- the loop ----------------------------------------------------------------------------

    def beat(self, force: bool = False) -> None:
        """Renew the heartbeat when HEARTBEAT_INTERVAL has passed (or now, with *force*)."""
        now = time.monotonic()
        if force or now - self._last_beat >= self.context.heartbeat_interval_s:
            self.heartbeat.beat()
            self._last_beat = now

    def install_signal_handlers(self) -> None:
        """First SIGINT/SIGTERM: finish :attr:`iteration`, then stop. Second: stop at once."""
        install_stop_handlers(self, self.iteration)

    def start(self) -> bool:
        """:meth:`setup`, retried with back-off while a backend is unreachable.

        Returns:
            True once set up; False if a stop was requested first.

        Raises:
            Exception: a failure that retrying cannot fix (a wrong setting or plugin path).
        """
        while not self.stopping:
            self.heartbeat.touch()  # setting up, retried while a backend is down: alive
            try:
                self.setup()
                self.backoff.reset()
                return True
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self.give_up_if_gone()
                reason = f"{self.component} cannot start: {describe_failure(exc, self.settings)}"
                self._report_failure(reason)
                self.backoff.wait(reason, lambda: self.stopping)
        return False

    def run(self, max_iterations: int | None = None) -> None:
        """The worker loop; *max_iterations* (set-up attempts not included) bounds it for tests.

        Returns after a stop request (the current iteration finished first) or *max_iterations*;
        always tears down.
        """
        done = 0
        try:
            if not self.start():
                return
            while not self.stopping and (max_iterations is None or done < max_iterations):
                try:
                    self.run_once()
                    self.backoff.reset()
                    if self.failing is not None:
                        self._report_failure(None)
                except Exception as exc:
                    # out of memory escaping an iteration: no work to refuse, so wait, naming maxmemory
                    if not is_transient(exc) and not is_out_of_memory(exc):
                        raise
                    self.give_up_if_gone()
                    reason = describe_failure(exc, self.settings, self.poll_interval_setting)
                    self._report_failure(reason)
                    self.backoff.wait(reason, lambda: self.stopping)
                done += 1
                self.heartbeat.touch()  # the loop runs, whether its backends answer or not
                self.after_iteration()
                if self.blob_sweep is not None:
                    self.blob_sweep.expire_in_background()  # at start, then at most once an hour
        finally:
            self.teardown()

    #: Why the last set-up or iteration failed (a backend), until one succeeds; None while healthy.
    failing: str | None = None

    def _report_failure(self, reason: str | None) -> None:
        self.failing = reason
        try:
            self.failure_changed(reason)
        except Exception:  # noqa: BLE001 - reporting is best effort (the backend may be the one gone)
            logger.debug("could not report the failure of %s", self.component, exc_info=True)

    def failure_changed(self, reason: str | None) -> None:  # noqa: B027 - optional
        """Called with the reason of each failed set-up or iteration, and with None once one
        succeeds again (a kind that shows its failures elsewhere publishes them here)."""

    def give_up_if_gone(self) -> None:
        """After a transient failure: raise :class:`ClusterGone` if the ``crawlhive up`` whose
        addresses this process uses has exited (retrying could never succeed), else return.

        Raises:
            ClusterGone: its message says so and what to do; the teardown then skips the backends.
        """
        gone = cluster_gone(self.settings)
        if gone is not None:
            self.context.backends_gone = True
            raise ClusterGone(gone)

    def teardown(self) -> None:
        """:meth:`close`, remove the heartbeat, close an owned Redis client. Never raises."""
        try:
            self.close()
        except Exception:  # noqa: BLE001 - shutting down: report and go on closing the rest
            logger.warning("closing %s failed", self.component, exc_info=True)
        self.context.close()


#: Seconds between two progress lines of a busy consumer worker (none while idle, §17.4).
PROGRESS_EVERY_S = 10.0


@dataclass
class BatchCounts:
    """What one batch of a :class:`ConsumerWorker` did, or its whole life: the records polled, then
    one counter per outcome, declared by a subclass (the cleaner's ``cleaned``, ``skipped``, …)
    and named in its progress line in declaration order (``dead_letters``: "dead letters")."""

    records: int = 0

    def add(self, other: Self) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def minus(self, mark: Self) -> Self:
        """The counts since *mark* (an earlier copy)."""
        return replace(self, **{f.name: getattr(self, f.name) - getattr(mark, f.name) for f in fields(self)})

    def outcomes(self) -> str:
        """``3 cleaned, 0 skipped, 1 dead letters``: every counter but ``records``."""
        return ", ".join(f"{getattr(self, f.name)} {f.name.replace('_', ' ')}" for f in fields(self)[1:])


class ConsumerWorker(Worker):
    """A :class:`Worker` whose iteration is one batch of a Kafka consumer group (the kafka-monitor
    and the cleaner): the Kafka clients, poll → :meth:`process` → commit, the rewind of a batch
    that failed (processed again after the back-off), and a heartbeat that also probes the broker
    while idle.

    Subclasses implement :meth:`process` and call :meth:`open_kafka` from :meth:`setup`.
    """

    iteration = "this batch"
    poll_interval_setting = "KAFKA_MAX_POLL_INTERVAL_MS"
    #: Start with small batches (:meth:`consume_batch`): for a worker whose records are slow to
    #: process (the cleaner's pages), so its first outputs leave after one record.
    slow_start: ClassVar[bool] = False

    def __init__(self, settings: Settings, redis: RedisClient, *, owns_redis: bool = False) -> None:
        super().__init__(settings, redis, owns_redis=owns_redis)
        self.poll_timeout_ms = settings.KAFKA_CONSUMER_POLL_TIMEOUT_MS
        self.max_poll_records = settings.KAFKA_CONSUMER_MAX_POLL_RECORDS
        self.ack_timeout_s = settings.KAFKA_FEED_TIMEOUT
        self.consumer: RdKafkaConsumer | None = None
        self.producer: RdKafkaSendProducer | None = None
        self._busy = False
        #: Processed records whose offsets are not committed yet (a commit failed).
        self._commit_pending = False
        #: When the last progress line was due, and the totals then (None: nothing counted yet).
        self._progress_at = time.monotonic()
        self._progress_mark: BatchCounts | None = None
        #: Records the next poll may return: with :attr:`slow_start`, 1 at start, doubled after
        #: each batch up to max_poll_records (:meth:`consume_batch`).
        self._batch_limit = 1 if self.slow_start else 2**31

    def process(self, records: list[Any]) -> Any:
        """Handle one polled batch; every output durable when it returns (raises if not)."""
        raise NotImplementedError

    def open_kafka(self, topic: str, group: str, outputs: list[str], **consumer_options: Any) -> None:
        """Create *topic* and the *outputs* topics if missing, build the consumer of *topic* in
        *group* (unless built already; *consumer_options* win over the KAFKA_* consumer settings),
        then the producer (the group's join goes on meanwhile), beat, and say so.

        Raises:
            BackendUnavailable: no broker answered (names KAFKA_BOOTSTRAP_SERVERS).
        """
        ensure_topics(self.settings, [topic, *outputs])
        if self.consumer is None:  # first: the group's join (a second on the embedded broker) goes on
            # while the producer connects and the caller sets up the rest
            self.consumer = make_consumer(self.settings, topic, group_id=group, **consumer_options)
        if self.producer is None:
            self.producer = make_producer(self.settings)
        self.beat(force=True)
        logger_of(self).info(
            "%s %s consuming %s as group %s (Redis %s)",
            self.component,
            self.node_id,
            topic,
            group,
            mask_url(self.settings.REDIS_URL),
        )

    #: The counts since the worker started (a :class:`BatchCounts` of the subclass's kind), which
    #: :meth:`log_progress` reports; None: no progress lines.
    totals: BatchCounts | None = None

    @property
    def progress_name(self) -> str:
        """How progress lines name this process (``cleaner``, ``sink pages``)."""
        return self.component

    def log_progress(self, force: bool = False) -> None:
        """A progress line every PROGRESS_EVERY_S while records flow (none while idle, §17.4):
        records in the period, their rate, each outcome, and the records since start."""
        if self.totals is None:
            return
        now = time.monotonic()
        if not force and now - self._progress_at < PROGRESS_EVERY_S:
            return
        period = self.totals if self._progress_mark is None else self.totals.minus(self._progress_mark)
        if period.records:
            elapsed = now - self._progress_at
            logger_of(self).info(
                "%s: %d records in %.0fs (%.0f/s): %s; since start %d records",
                self.progress_name,
                period.records,
                elapsed,
                period.records / elapsed if elapsed > 0 else 0.0,
                period.outcomes(),
                self.totals.records,
            )
        self._progress_at, self._progress_mark = now, replace(self.totals)

    def after_iteration(self) -> None:
        self.log_progress()

    def close(self) -> None:
        """Leave the group, close the Kafka clients, and give the last progress line."""
        self.close_kafka()
        self.log_progress(force=True)

    def close_kafka(self) -> None:
        """Leave the group and close the Kafka clients (each failure reported, the rest closed)."""
        consumer, self.consumer = self.consumer, None
        producer, self.producer = self.producer, None
        if consumer is not None:
            try:
                consumer.close(autocommit=False, timeout_ms=2000)
            except Exception:  # shutting down: report and go on closing the rest
                logger.warning("closing the Kafka consumer failed", exc_info=True)
        if producer is not None:
            try:
                producer.close(timeout=5)
            except Exception:  # shutting down: report and go on closing the rest
                logger.warning("closing the Kafka producer failed", exc_info=True)

    def consume_batch(self) -> tuple[Any, int]:
        """Poll one batch, :meth:`process` it, commit. A failure of :meth:`process` rewinds the
        batch (it is delivered again); a failure of the commit does not: the batch's outputs are
        durable already, so it is not processed again here, and its offsets are committed with the
        next batch (or the next idle poll). Either failure is re-raised.

        Returns:
            ``(what process returned or None, records polled)``.

        Raises:
            RedisError, KafkaError: a backend failed.
        """
        assert self.consumer is not None, "setup() first"
        # Slow start (slow_start): a batch's outputs leave when the whole batch is processed, so
        # the first batches are small (1, 2, 4, … records, up to max_poll_records): a cleaner's
        # first cleaned record leaves after one page, not after a batch of 50 (a second and more).
        limit = min(self._batch_limit, self.max_poll_records)
        polled = self.consumer.poll(timeout_ms=self.poll_timeout_ms, max_records=limit)
        records = [record for batch in polled.values() for record in batch]
        if records:
            self._batch_limit = min(2 * limit, self.max_poll_records)
        result = None
        if records:
            try:
                result = self.process(records)
            except BaseException:
                self.rewind(polled)
                raise
        if records or self._commit_pending:
            self._commit_pending = True
            try:
                self.consumer.commit(timeout_ms=int(self.ack_timeout_s * 1000))
            except BaseException:
                if records:
                    self.remember_done(polled)
                raise
            self._commit_pending = False
        self.beat_or_probe(busy=bool(records))
        return result, len(records)

    def remember_done(self, polled: dict[Any, list[Any]]) -> None:
        """Hook: the commit of a processed batch failed (its outputs are durable); a subclass that
        must not emit them twice records it here, where whoever gets the records again looks."""

    def rewind(self, polled: dict[Any, list[Any]]) -> None:
        """Seek every partition of a polled batch back to its first record, so it is processed
        again (the consumer drops fetched data that does not start at the new position)."""
        consumer = self.consumer
        if consumer is None:
            return
        for partition, batch in polled.items():
            if batch:
                try:
                    consumer.seek(partition, batch[0].offset)
                except (KafkaError, ValueError):
                    # Partition no longer assigned: its next owner resumes from the committed offset.
                    logger.info("could not rewind %s (no longer assigned)", partition)

    def beat_or_probe(self, busy: bool) -> None:
        """For a consumer loop, every HEARTBEAT_INTERVAL: renew the heartbeat; if no record arrived
        meanwhile, also check that the broker still accepts connections (an idle consumer does not
        notice it is gone).

        Raises:
            RedisError: the heartbeat failed (REDIS_URL).
            BackendUnavailable: the broker is unreachable (KAFKA_BOOTSTRAP_SERVERS).
        """
        self._busy = self._busy or busy
        if time.monotonic() - self._last_beat < self.context.heartbeat_interval_s:
            return
        idle, self._busy = not self._busy, False
        self.beat(force=True)
        if idle:
            probe_kafka(self.settings)


def run_until_stopped(worker: Worker, command: str) -> int:
    """Run *worker*'s loop until SIGINT/SIGTERM: 0 after a graceful stop, 1 when forced (a second
    signal), saying so on stderr as ``crawlhive <command>: …``. The entry of a worker kind."""
    import sys

    from crawlhive.utils.process.loop import ForcedShutdown

    worker.install_signal_handlers()
    try:
        worker.run()
    except ForcedShutdown as exc:
        print(f"crawlhive {command}: {exc}", file=sys.stderr)
        return 1
    return 0
