"""The kafka-monitor process: ``<prefix>.incoming`` -> validation -> Redis, at least once.

One loop iteration handles one poll's batch:

1. validate every record (:class:`RequestValidator`): accepted ones are grouped by plugin, the
   rest become dead letters with their reason;
2. each plugin queues its Redis writes for its group on one pipeline, executed in one round trip
   (MULTI/EXEC); a plugin that raises sends its group to the dead-letter topic as an internal error;
3. dead letters are produced and the broker's acknowledgement awaited;
4. only then are the offsets committed.

If Redis or Kafka fails in steps 2-4, the consumer seeks back to the batch's first offsets and the
batch is processed again after a back-off; plugin writes are idempotent per record, so nothing is
lost and nothing is queued twice. A SIGKILL at any point has the same effect via the group's last
committed offsets.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from collections import defaultdict
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, Self

from kafka.errors import KafkaError
from redis.exceptions import RedisError

from crawlhive.kafka_monitor.plugins import BUILTIN_PLUGINS, Incoming, IncomingPlugin
from crawlhive.kafka_monitor.validation import Accepted, RequestValidator
from crawlhive.utils.connections import (
    check_redis,
    ensure_topics,
    make_consumer,
    make_producer,
    redis_from_settings,
)
from crawlhive.utils.errors import BackendUnavailable
from crawlhive.utils.heartbeat import Heartbeat, new_node_id
from crawlhive.utils.keys import Keys
from crawlhive.utils.plugins import load_plugins
from crawlhive.utils.stats import Stats

if TYPE_CHECKING:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.consumer.fetcher import ConsumerRecord
    from redis import Redis

    from crawlhive.utils.settings import Settings

logger = logging.getLogger(__name__)

COMPONENT = "kafka-monitor"
#: Characters of the original text kept in a dead letter whose full payload is too large (API.md §6).
TRUNCATED_PAYLOAD_CHARS = 65536
#: Extra bytes a dead-letter record may need beyond its payload (envelope, error text).
DEAD_LETTER_OVERHEAD_BYTES = 4096


class ForcedShutdown(Exception):
    """Second SIGINT/SIGTERM: stop now, without finishing the batch (it will be redelivered)."""


@dataclass
class BatchResult:
    """What one batch did, for tests and progress output."""

    records: int = 0
    accepted: int = 0
    rejected: int = 0


class Backoff:
    """Exponential back-off between failed iterations: 0.5 s doubling to 30 s, reset on success."""

    def __init__(self, first_s: float = 0.5, max_s: float = 30.0) -> None:
        self.first_s, self.max_s = first_s, max_s
        self.current_s = 0.0

    def wait(self, reason: str) -> None:
        self.current_s = min(self.max_s, self.current_s * 2 or self.first_s)
        logger.warning("%s; retrying in %.1fs", reason, self.current_s)
        time.sleep(self.current_s)

    def reset(self) -> None:
        self.current_s = 0.0


class KafkaMonitor:
    """Consumes ``<prefix>.incoming`` in the consumer group KAFKA_GROUP and feeds Redis."""

    def __init__(self, settings: Settings, redis: Redis) -> None:
        self.settings = settings
        self.redis = redis
        self.keys = Keys(settings["REDIS_KEY_PREFIX"])
        self.node_id = new_node_id()
        self.stats = Stats(redis, self.keys, settings.getlist("STATS_TIMES"))
        self.heartbeat = Heartbeat(
            redis, self.keys, COMPONENT, self.node_id, settings.node_name, settings.getfloat("HEARTBEAT_TIMEOUT")
        )
        self.incoming_topic = settings.topic("incoming")
        self.dead_letter_topic = settings.topic("dead_letter")
        self.max_record_bytes = settings.getint("KAFKA_PRODUCER_MAX_REQUEST_SIZE")
        self.validator: RequestValidator | None = None
        self.plugins: dict[type[IncomingPlugin], IncomingPlugin] = {}
        self.consumer: KafkaConsumer | None = None
        self.producer: KafkaProducer | None = None
        self.stopping = False
        self.backoff = Backoff()
        self._last_beat = 0.0

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        return cls(settings, redis_from_settings(settings))

    # --- lifecycle ---------------------------------------------------------------------------

    def setup(self) -> None:
        """Check Redis, create topics, build plugins, join the consumer group."""
        check_redis(self.redis, self.settings)
        ensure_topics(self.settings, [self.incoming_topic, self.dead_letter_topic])
        built = load_plugins(
            COMPONENT,
            BUILTIN_PLUGINS,
            [self.settings["PLUGINS"], self.settings["KAFKA_MONITOR_PLUGINS"]],
            lambda cls: cls.from_monitor(self),
        )
        self.plugins = {type(p): p for p in built}
        # Validate against the plugins that run: a disabled kind is rejected like any unknown one.
        self.validator = RequestValidator(list(self.plugins), self.settings)
        self.producer = make_producer(self.settings)
        self.consumer = make_consumer(self.settings, self.incoming_topic, group_id=self.settings.kafka_group)
        self.heartbeat.beat()
        logger.info(
            "kafka-monitor %s consuming %s as group %s", self.node_id, self.incoming_topic, self.settings.kafka_group
        )

    def teardown(self) -> None:
        """Leave the group, flush and close clients, remove the heartbeat."""
        if self.consumer is not None:
            self.consumer.close(autocommit=False)
        if self.producer is not None:
            self.producer.close(timeout=5)
        try:
            self.heartbeat.stop()
        except RedisError:
            logger.warning("could not remove heartbeat on shutdown (REDIS_URL unreachable)")

    def install_signal_handlers(self) -> None:
        """First SIGINT/SIGTERM: finish the batch, commit, stop. Second: stop at once."""

        def handler(signum: int, frame: FrameType | None) -> None:
            if self.stopping:
                raise ForcedShutdown(signal.Signals(signum).name)
            logger.info("%s received: stopping after this batch", signal.Signals(signum).name)
            self.stopping = True

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)

    def run(self, max_iterations: int | None = None) -> None:
        """The worker loop; *max_iterations* bounds it for tests."""
        self.setup()
        done = 0
        try:
            while not self.stopping and (max_iterations is None or done < max_iterations):
                try:
                    self.run_once()
                    self.backoff.reset()
                except (RedisError, KafkaError, BackendUnavailable) as exc:
                    self.backoff.wait(self._describe_failure(exc))
                done += 1
        finally:
            self.teardown()

    def _describe_failure(self, exc: Exception) -> str:
        if isinstance(exc, RedisError):
            return f"Redis failed ({exc!r}); check REDIS_URL"
        if isinstance(exc, KafkaError):
            return f"Kafka failed ({exc!r}); check KAFKA_BOOTSTRAP_SERVERS"
        return str(exc)

    # --- one iteration ---------------------------------------------------------------------

    def run_once(self) -> BatchResult:
        """Poll one batch, process it, commit; on a backend failure rewind and re-raise."""
        assert self.consumer is not None, "setup() first"
        polled = self.consumer.poll(
            timeout_ms=self.settings.getint("KAFKA_CONSUMER_POLL_TIMEOUT_MS"),
            max_records=self.settings.getint("KAFKA_CONSUMER_MAX_POLL_RECORDS"),
        )
        records = [record for batch in polled.values() for record in batch]
        result = BatchResult()
        if records:
            try:
                result = self.process(records)
                self.consumer.commit()
            except Exception:
                self._rewind(polled)
                raise
        self._maybe_beat()
        return result

    def _rewind(self, polled: dict[Any, list[ConsumerRecord]]) -> None:
        """Seek every partition of the batch back to its first record, so it is processed again."""
        assert self.consumer is not None
        for partition, batch in polled.items():
            if batch:
                try:
                    self.consumer.seek(partition, batch[0].offset)
                except (KafkaError, AssertionError, ValueError):
                    # Partition no longer assigned: its next owner resumes from the committed offset.
                    logger.debug("could not rewind %s", partition)

    def _maybe_beat(self) -> None:
        now = time.monotonic()
        if now - self._last_beat >= self.settings.getfloat("HEARTBEAT_INTERVAL"):
            self.heartbeat.beat()
            self._last_beat = now

    def process(self, records: list[ConsumerRecord]) -> BatchResult:
        """Validate, write to Redis, dead-letter the rest; raises if Redis or Kafka fails."""
        assert self.validator is not None, "setup() first"
        groups: dict[type[IncomingPlugin], list[Incoming]] = defaultdict(list)
        dead: list[tuple[ConsumerRecord, str]] = []
        for record in records:
            try:
                outcome = self.validator.validate_raw(record.value)
            except Exception:  # a validator bug must not stop the loop or lose the neighbours
                logger.error("validation failed on %s@%d", record.topic, record.offset, exc_info=True)
                dead.append((record, "Invalid request: internal error while validating"))
                continue
            if isinstance(outcome, Accepted):
                origin = f"{record.topic}/{record.partition}/{record.offset}"
                groups[outcome.plugin].append(Incoming(outcome.message, origin))
            else:
                dead.append((record, outcome.reason))

        handled: dict[str, int] = {}
        for plugin_cls, requests in groups.items():
            plugin = self.plugins[plugin_cls]
            pipe = self.redis.pipeline(transaction=True)
            try:
                plugin.handle(requests, pipe)
            except (RedisError, BackendUnavailable):
                raise
            except Exception:
                logger.error("plugin %s failed on a batch of %d", plugin_cls.name, len(requests), exc_info=True)
                dead.extend((self._record_of(records, r.origin), "Invalid request: internal error") for r in requests)
                continue
            pipe.execute()
            handled[plugin_cls.name] = len(requests)

        self._send_dead_letters(dead)
        self._count(len(records), len(dead), handled)
        return BatchResult(records=len(records), accepted=sum(handled.values()), rejected=len(dead))

    @staticmethod
    def _record_of(records: list[ConsumerRecord], origin: str) -> ConsumerRecord:
        topic, partition, offset = origin.rsplit("/", 2)
        return next(r for r in records if r.partition == int(partition) and r.offset == int(offset))

    def _count(self, total: int, failed: int, handled: dict[str, int]) -> None:
        pipe = self.redis.pipeline(transaction=False)
        self.stats.incr(COMPONENT, "total", total, pipe=pipe)
        if failed:
            self.stats.incr(COMPONENT, "fail", failed, pipe=pipe)
        for name, count in handled.items():
            self.stats.incr(COMPONENT, f"plugin:{name}", count, pipe=pipe)
        pipe.execute()

    # --- dead letters ------------------------------------------------------------------------

    def dead_letter(self, raw: bytes, reason: str) -> bytes:
        """The dead-letter record (API.md §6 a) of *raw* rejected for *reason*."""
        text = raw.decode("utf-8", errors="replace")
        try:
            payload: Any = json.loads(text)
        except (ValueError, RecursionError):
            payload = text
        letter: dict[str, Any] = {"stage": "validation", "error": reason, "payload": payload}
        if isinstance(payload, dict):
            for field in ("uuid", "appid"):
                if isinstance(payload.get(field), str):
                    letter[field] = payload[field]
        letter["server_time"] = int(time.time())
        try:
            encoded = json.dumps(letter, ensure_ascii=False).encode()
        except (ValueError, RecursionError):
            encoded = b""
        if not encoded or len(encoded) + DEAD_LETTER_OVERHEAD_BYTES > self.max_record_bytes:
            letter["payload"] = text[:TRUNCATED_PAYLOAD_CHARS]
            letter["error"] = f"{reason} (payload truncated)"
            encoded = json.dumps(letter, ensure_ascii=False).encode()
        return encoded

    def _send_dead_letters(self, dead: list[tuple[ConsumerRecord, str]]) -> None:
        """Produce every dead letter and wait for the broker's acks (raises KafkaError if not)."""
        if not dead:
            return
        assert self.producer is not None
        futures = []
        for record, reason in dead:
            logger.info("rejected %s@%d: %s", record.topic, record.offset, reason, extra={"offset": record.offset})
            futures.append(self.producer.send(self.dead_letter_topic, self.dead_letter(record.value, reason)))
        self.producer.flush(timeout=self.settings.getfloat("KAFKA_FEED_TIMEOUT"))
        for future in futures:
            future.get(timeout=self.settings.getfloat("KAFKA_FEED_TIMEOUT"))
