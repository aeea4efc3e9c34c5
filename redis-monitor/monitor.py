"""The redis-monitor process: control stream -> plugins -> ``<prefix>.outbound_firehose``.

Requests (info, stop, stats, domain-config) arrive as entries of the control stream
(:mod:`crawlhive.utils.state.control`), and so do the notifications that timer-driven plugins cause
(``expire``, ``complete``, ``dead-letter``): every redis-monitor reads the stream through one
consumer group, so each entry is handled by one monitor, found without ``KEYS`` and without
polling an idle Redis (``XREADGROUP BLOCK``). One loop iteration:

1. renews the heartbeat and runs the timer-driven plugins that are due (expiry timers, crawl
   completion, lease reaper);
2. takes entries: its own entries due for a retry, entries another monitor left unanswered for
   REDIS_MONITOR_CLAIM_IDLE_S (``XAUTOCLAIM``), then new ones, blocking up to
   REDIS_MONITOR_BLOCK_MS (less when a timer is due sooner);
3. hands each entry to the first plugin that accepts it;
4. produces the answers, waits for Kafka's acknowledgement, and only then ``XACK`` + ``XDEL``\\ s
   the entries, and counts them in stats.

Failures: a plugin that raises counts one failed attempt; the entry is retried after
REDIS_MONITOR_RETRY_S and, once Redis has delivered it REDIS_MONITOR_MAX_ATTEMPTS times, reported
instead (the plugin's error answer, or a dead letter with stage ``control``: docs/contract.md §6 (a)'s shape
with the control request as ``payload``). When Redis or Kafka fails, the loop backs off (logging
the setting to check) and resumes with the entries it holds, answers already computed included,
so nothing is lost and a retry after a backend failure does not count as an attempt.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from crawlhive.redis_monitor.plugins import BUILTIN_PLUGINS, MonitorPlugin, Outbound
from crawlhive.utils.backends.kafka_clients import ensure_topics, make_producer
from crawlhive.utils.backends.redis_clients import check_redis, redis_from_settings
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.backends.replication import ReplicaWait
from crawlhive.utils.contract.encoding import encode
from crawlhive.utils.contract.fit import fit_message, value_limit
from crawlhive.utils.contract.produce import send_and_wait
from crawlhive.utils.contract.records import control_dead_letter
from crawlhive.utils.contract.topics import appid_topic
from crawlhive.utils.frontier import FrontierReader
from crawlhive.utils.process.loop import is_transient
from crawlhive.utils.process.plugins import load_plugins
from crawlhive.utils.process.worker import Worker
from crawlhive.utils.state.control import ControlConsumer, ControlEntry
from crawlhive.utils.state.stats import FAIL, REDIS_MONITOR, TOTAL, plugin_counter_name

if TYPE_CHECKING:
    from crawlhive.utils.backends.rdkafka import RdKafkaSendProducer
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

COMPONENT = REDIS_MONITOR


@dataclass
class Held:
    """A control entry this monitor has taken and not yet acknowledged.

    Attributes:
        entry: the entry as last delivered (its ``deliveries`` count attempts).
        outbound: what to produce, once computed; kept across backend failures so a retry resends
            it instead of acting twice (a second stop would purge nothing and report 0).
        plugin: name of the plugin that produced it ('' for a report).
        failed: True if *outbound* reports a failure (counted as ``fail``).
        retry_at: monotonic time of the next attempt after a plugin failure, else None.
    """

    entry: ControlEntry
    outbound: list[Outbound] | None = None
    plugin: str = ""
    failed: bool = False
    retry_at: float | None = None


class RedisMonitor(Worker):
    """Answers control requests, fires timers and emits notifications; see the module docstring
    (the loop, back-off, signals and teardown are :class:`~crawlhive.utils.process.worker.Worker`'s).

    Args:
        settings: the process settings.
        redis: a client on REDIS_URL (not yet checked: :meth:`setup` pings it).
        owns_redis: close *redis* in :meth:`teardown`.
    """

    component = COMPONENT
    iteration = "this iteration"

    def __init__(self, settings: Settings, redis: RedisClient, *, owns_redis: bool = False) -> None:
        super().__init__(settings, redis, owns_redis=owns_redis)
        self.frontier = FrontierReader.from_settings(redis, settings)
        self.control = ControlConsumer(redis, self.keys, self.node_id)
        self.replicas = ReplicaWait.from_settings(redis, settings)
        self.outbound_topic = settings.topic("outbound_firehose")
        self.dead_letter_topic = settings.topic("dead_letter")
        self.appid_topics = settings.KAFKA_APPID_TOPICS
        self.block_ms = settings.REDIS_MONITOR_BLOCK_MS
        self.batch = max(1, settings.REDIS_MONITOR_BATCH)
        self.claim_idle_s = settings.REDIS_MONITOR_CLAIM_IDLE_S
        self.max_attempts = max(1, settings.REDIS_MONITOR_MAX_ATTEMPTS)
        self.retry_s = settings.REDIS_MONITOR_RETRY_S
        self.tick_s = settings.REDIS_MONITOR_TICK_S
        self.kafka_timeout_s = settings.KAFKA_FEED_TIMEOUT
        self.max_request_size = settings.KAFKA_PRODUCER_MAX_REQUEST_SIZE
        self.value_limit = value_limit(self.max_request_size)
        self.plugins: list[MonitorPlugin] = []
        self.producer: RdKafkaSendProducer | None = None
        self._held: dict[str, Held] = {}
        self._ticks = 0
        self._next_tick = 0.0
        self._last_claim = 0.0
        self._last_renew = 0.0
        self._topics_ready: set[str] = set()
        self._bad_appids: set[str] = set()

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        return cls(settings, redis_from_settings(settings), owns_redis=True)

    # --- lifecycle -------------------------------------------------------------------------------

    def setup(self) -> None:
        """Check Redis, create topics and the consumer group, build plugins and the producer.

        Raises:
            BackendUnavailable: Redis or Kafka cannot be reached (the caller retries).
            PluginLoadError: a plugin path or factory is wrong (a configuration error).
        """
        check_redis(self.redis, self.settings)
        if not self.plugins:
            self.plugins = load_plugins(
                COMPONENT,
                BUILTIN_PLUGINS,
                [self.settings.PLUGINS, self.settings.REDIS_MONITOR_PLUGINS],
                lambda cls: cls.from_monitor(self),
            )
        self.control.ensure_group()
        ensure_topics(self.settings, [self.outbound_topic, self.dead_letter_topic])
        self._topics_ready.update((self.outbound_topic, self.dead_letter_topic))
        if self.producer is None:
            self.producer = make_producer(self.settings)
        self.beat(force=True)
        logger.info("redis-monitor %s reading %s", self.node_id, self.keys.control_stream())

    def close(self) -> None:
        """Close the producer (flushing it). Entries still held stay pending in the group; another
        monitor claims them after REDIS_MONITOR_CLAIM_IDLE_S."""
        for plugin in self.plugins:
            try:
                plugin.close()
            except Exception:
                logger.warning("redis-monitor plugin %s failed to stop", plugin.name, exc_info=True)
        producer, self.producer = self.producer, None
        if producer is not None:
            producer.close(timeout=5)

    # --- one iteration ---------------------------------------------------------------------------

    def run_once(self) -> int:
        """One iteration (see the module docstring). Returns the number of entries finished.

        Raises:
            redis.RedisError, kafka.errors.KafkaError, BackendUnavailable: a backend failed; held
                entries are kept for the next iteration.
        """
        self.beat()
        now = time.monotonic()
        if now >= self._next_tick:
            self._run_ticks()
            self._next_tick = now + self.tick_s
        entries = self._take()
        return self.process(entries)

    def _run_ticks(self) -> None:
        self._ticks += 1
        for plugin in self.plugins:
            if plugin.tick_every and self._ticks % plugin.tick_every == 0:
                try:
                    plugin.tick()
                except Exception as exc:
                    if is_transient(exc):
                        raise  # the loop backs off; the tick runs again
                    logger.error("redis-monitor plugin %s failed on its timer", plugin.name, exc_info=True)

    def _take(self) -> list[ControlEntry]:
        """The entries to work on now: held ones that are due, stale ones of others, new ones."""
        now = time.monotonic()
        entries: list[ControlEntry] = []
        carried = [h for h in self._held.values() if h.retry_at is None or h.retry_at <= now]
        if carried:
            entries += self._resume(carried)
        if now - self._last_renew >= self.claim_idle_s / 3:
            waiting = [i for i, h in self._held.items() if h.retry_at is not None and h.retry_at > now]
            self.control.renew(waiting)
            self._last_renew = now
        if now - self._last_claim >= min(1.0, self.claim_idle_s / 3):
            entries += self.control.claim_stale(int(self.claim_idle_s * 1000), self.batch)
            self._last_claim = now
        room = self.batch - len(entries)
        if room > 0:
            block = 0 if entries else self._block_ms()
            entries += self.control.read(room, block)
        # A claim can return an entry we already hold (ours, idle through a long outage): once each.
        return list({entry.id: entry for entry in entries}.values())

    def _block_ms(self) -> int:
        """How long a read may wait: REDIS_MONITOR_BLOCK_MS, less when a timer or a retry is due sooner."""
        now = time.monotonic()
        due = [self._next_tick] + [h.retry_at for h in self._held.values() if h.retry_at is not None]
        until_ms = int((min(due) - now) * 1000)
        return max(1, min(self.block_ms, until_ms))

    def _resume(self, carried: list[Held]) -> list[ControlEntry]:
        """Entries held from earlier iterations that are due: still ours (another monitor may have
        claimed them while we were cut off), redelivered if they are retries of a failure."""
        owned = self.control.owned([h.entry.id for h in carried])
        for held in carried:
            if held.entry.id not in owned:
                logger.info("control entry %s was taken over by another redis-monitor", held.entry.id)
                del self._held[held.entry.id]
        retries = [h.entry.id for h in carried if h.entry.id in owned and h.retry_at is not None]
        resumed = [h.entry for h in carried if h.entry.id in owned and h.retry_at is None]
        if retries:
            redelivered = {e.id: e for e in self.control.reclaim(retries)}
            for entry_id in retries:
                if entry_id not in redelivered:  # deleted meanwhile: nothing left to answer
                    del self._held[entry_id]
            resumed += redelivered.values()
        return resumed

    def process(self, entries: list[ControlEntry]) -> int:
        """Handle *entries*, produce their answers, acknowledge them; returns how many finished."""
        now = time.monotonic()
        for entry in entries:
            held = self._held.setdefault(entry.id, Held(entry))
            held.entry, held.retry_at = entry, None
        ready: list[Held] = []
        for entry in entries:
            held = self._held[entry.id]
            if held.outbound is None:
                self._dispatch(held)
            if held.outbound is None:
                held.retry_at = now + self.retry_s
            else:
                ready.append(held)
        if not ready:
            return 0
        self._produce([out for held in ready for out in held.outbound or []])
        self.replicas.wait()  # REDIS_WAIT_REPLICAS: what the answers report (a stop's purge) is replicated
        self.control.ack([held.entry.id for held in ready])
        for held in ready:
            del self._held[held.entry.id]
        self._count(ready)
        return len(ready)

    def _dispatch(self, held: Held) -> None:
        """Fill ``held.outbound`` from the first plugin that accepts the entry, or with a report
        when the entry is unusable or has failed REDIS_MONITOR_MAX_ATTEMPTS times."""
        entry = held.entry
        try:
            request = entry.request()
        except ValueError as exc:
            logger.warning("control entry %s is not a JSON object request: %s", entry.id, exc)
            held.outbound, held.failed = [self._report(entry, None, f"Unparseable control entry: {exc}")], True
            return
        plugin = next((p for p in self.plugins if p.accepts(entry.kind, request)), None)
        if plugin is None:
            reason = f"No redis-monitor plugin handles {entry.kind!r} requests"
            logger.warning("control entry %s: %s", entry.id, reason, extra={"appid": request.get("appid")})
            held.outbound, held.failed = [self._report(entry, request, reason)], True
            return
        try:
            held.outbound, held.plugin = plugin.handle(entry.kind, request), plugin.name
            return
        except Exception as exc:
            if is_transient(exc):
                raise  # the loop backs off; the entry is handled again, not counted as an attempt
            error = f"{type(exc).__name__}: {exc}"
            logger.error(
                "redis-monitor plugin %s failed on control entry %s (attempt %d of %d)",
                plugin.name,
                entry.id,
                entry.deliveries,
                self.max_attempts,
                exc_info=True,
                extra={"appid": request.get("appid"), "crawlid": request.get("crawlid")},
            )
        if entry.deliveries < self.max_attempts:
            return
        reason = f"{plugin.name} failed {entry.deliveries} times: {error}"
        try:
            reported = plugin.failed(entry.kind, request, reason)
        except Exception:
            logger.error("plugin %s failed to report a failure", plugin.name, exc_info=True)
            reported = None
        held.outbound = reported if reported is not None else [self._report(entry, request, reason)]
        held.failed = True

    def _report(self, entry: ControlEntry, request: dict[str, Any] | None, reason: str) -> Outbound:
        """The dead letter of a control entry that cannot be answered: docs/contract.md §6 (a)'s shape with
        stage ``control``, the request as ``payload`` (its raw text if it is not JSON) and its
        ``uuid`` / ``appid`` when they are strings."""
        payload: Any = request if request is not None else entry.raw
        letter = control_dead_letter(f"{entry.kind or 'control'}: {reason}", payload)
        return Outbound(dict(letter), dead_letter=True)

    # --- Kafka -----------------------------------------------------------------------------------

    def topics_for(self, out: Outbound) -> list[str]:
        """Where *out* goes (docs/contract.md §1): dead letters to the dead-letter topic; the rest to the
        firehose and, with KAFKA_APPID_TOPICS, to ``outbound_<appid>`` if the appid is legal there."""
        if out.dead_letter:
            return [self.dead_letter_topic]
        topics = [self.outbound_topic]
        appid = out.message.get("appid")
        if self.appid_topics and isinstance(appid, str):
            topic = appid_topic(self.settings.KAFKA_TOPIC_PREFIX, "outbound", appid)
            if topic is not None:
                topics.append(topic)
            elif appid not in self._bad_appids:
                self._bad_appids.add(appid)
                logger.warning("appid %r cannot be part of a topic name; outbound_firehose only", appid)
        return topics

    def _produce(self, outbound: list[Outbound]) -> None:
        """Send *outbound* and wait until Kafka acknowledged every record.

        Raises:
            KafkaError, BackendUnavailable: not all were acknowledged within KAFKA_FEED_TIMEOUT.
        """
        if not outbound:
            return
        assert self.producer is not None, "setup() first"
        records = [(topic, out) for out in outbound for topic in self.topics_for(out)]
        missing = {topic for topic, _ in records} - self._topics_ready
        if missing:
            ensure_topics(self.settings, sorted(missing))
            self._topics_ready |= missing
        # any other KafkaError is raised: the loop backs off and sends the held answers again
        fitted = ((topic, self._fitted(out), out) for topic, out in records)
        send_and_wait(self.producer, fitted, self.kafka_timeout_s, give_up=self._give_up)

    def _fitted(self, out: Outbound) -> bytes:
        """The record value of *out*, cut to fit the producer's limit (docs/contract.md §10.5); an
        answer that cannot be cut enough is replaced by a dead letter saying so."""
        value = fit_message(out.message, self.value_limit)
        if value is not None:
            return value
        logger.error("answer to %r cannot fit in one Kafka record; dead-lettered instead", out.message.get("uuid"))
        error = f"answer too large to send (KAFKA_PRODUCER_MAX_REQUEST_SIZE={self.max_request_size})"
        return encode(control_dead_letter(error, None, ids_from=out.message))

    def _give_up(self, topic: str, out: Outbound, exc: BaseException) -> None:
        """A record Kafka will never accept: logged and dropped, so the others are not held up."""
        logger.error(
            "dropped an answer to %s that Kafka refuses for good (%s: %s); check KAFKA_PRODUCER_MAX_REQUEST_SIZE "
            "and the broker's message.max.bytes",
            topic,
            type(exc).__name__,
            exc,
            extra={"appid": out.message.get("appid")},
        )

    # --- stats -----------------------------------------------------------------------------------

    def _count(self, finished: list[Held]) -> None:
        counts: dict[str, int] = {TOTAL: len(finished)}
        for held in finished:
            name = FAIL if held.failed else plugin_counter_name(held.plugin) if held.plugin else ""
            if name:
                counts[name] = counts.get(name, 0) + 1
        self.stats.incr_many([(COMPONENT, name, n) for name, n in counts.items()])


__all__ = ["COMPONENT", "Held", "RedisMonitor"]
