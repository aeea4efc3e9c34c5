r"""Items and crawl dead letters out of a crawler, as Deferreds that fire on their acknowledgement.

:class:`Emitter` decides what a record is and where it goes (page items to the firehose, a spider's
own items to ``items`` in the §11 envelope, dead letters; the size limit); an output delivers it:

* :class:`KafkaOutput`: a producer on librdkafka sends from its C threads; one record becomes a
  Twisted Deferred that fires in the reactor thread on the broker's acknowledgement (per-appid
  topics are created on first use);
* :class:`RedisOutput`: Redis-only mode (docs/contract.md §12): records are ``RPUSH``\ ed to the
  scrapy-redis style lists ``REDIS_ITEMS_KEY`` and ``<spider>:dead_letter``.

A page's lease ends only after every item of the page was acknowledged
(:class:`~crawlhive.crawler.leases.LeaseTable`); a failed send never acks: the lease is abandoned,
expires and is reclaimed (at least once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from itemadapter import ItemAdapter
from scrapy.exceptions import DropItem
from scrapy.utils.serialize import ScrapyJSONEncoder
from twisted.internet import defer, reactor, threads
from twisted.python.failure import Failure

from crawlhive.crawler.items import CrawledItem
from crawlhive.utils.backends import tracing
from crawlhive.utils.backends.blobs import BlobStore
from crawlhive.utils.backends.kafka_clients import ensure_topics
from crawlhive.utils.backends.rdkafka import Report, make_rdkafka_producer
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.contract.encoding import encode
from crawlhive.utils.contract.kafka_errors import KafkaError, MessageSizeTooLargeError
from crawlhive.utils.contract.records import timestamp
from crawlhive.utils.contract.topics import appid_topic
from crawlhive.utils.frontier.model import dead_letter_of

if TYPE_CHECKING:
    from crawlhive.crawler.leases import LeaseContext, LeaseTable
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

_ENCODER = ScrapyJSONEncoder()


def _json_default(value: Any) -> Any:
    """What ujson cannot encode in a spider's item, as Scrapy's JSON exporters encode it (dates,
    decimals, sets, nested items); raises TypeError for anything else."""
    return _ENCODER.default(value)


def _by_reference_field(kind: str, record: dict[str, Any]) -> str | None:
    """The field of *record* that goes to the blob store when it is too large for one message
    (docs/contract.md §20.5): a crawled item's ``body`` (a string), a spider item's ``item``
    (§11; not one already sent by reference); None if there is none."""
    if kind == "crawled":
        return "body" if isinstance(record.get("body"), str) else None
    return "item" if record.get("item") is not None else None


class Output(Protocol):
    """Where an emitter's records go."""

    name: str

    def send(self, topic: str, data: bytes, headers: list[tuple[str, bytes]] | None = None) -> defer.Deferred[None]:
        """Deliver *data* as a record of *topic* (*headers*: where the output has record headers);
        fires in the reactor thread once it is stored."""

    def close(self) -> None:
        """Deliver what is pending (a few seconds at most) and release the connection."""


def _end_emit(result: Any, span: Any) -> Any:
    """End an emit *span* when its record's sends settle (an error if one failed); *result* passes on."""
    if isinstance(result, Failure):
        tracing.fail(span, f"not acknowledged: {result.value!r}")
    span.end()
    return result


class Emitter:
    """Sends a crawler's items and dead letters, and ends their pages' leases when acknowledged.

    Args:
        settings: KAFKA_PRODUCER_MAX_REQUEST_SIZE, KAFKA_APPID_TOPICS and the topic names.
        output: where records go (:class:`KafkaOutput`, or :class:`RedisOutput` in Redis-only mode).
        leases: the process's lease table (pages finish there).
        on_failed: called once per crawl dead letter the output acknowledged (the failed stat).
    """

    def __init__(self, settings: Settings, output: Output, leases: LeaseTable, on_failed: Callable[[], None]) -> None:
        self.settings = settings
        self.output = output
        self.leases = leases
        self.on_failed = on_failed
        self.max_item_bytes = settings.KAFKA_PRODUCER_MAX_REQUEST_SIZE
        self.appid_topics = settings.KAFKA_APPID_TOPICS and isinstance(output, KafkaOutput)
        self.firehose = settings.topic("crawled_firehose")
        self.items_topic = settings.topic("items")
        self.dead_letter_topic = settings.topic("dead_letter")
        #: Where bodies too large for one message go (docs/contract.md §20.5).
        self.blobs = BlobStore.from_settings(settings)

    def emit(self, item: Any, context: LeaseContext | None) -> defer.Deferred[None]:
        """Send *item*, an item of *context*'s page; fires when the broker acknowledged it.

        A :class:`CrawledItem` goes to the firehose (and ``crawled_<appid>``, §5); any other item
        (whatever ``itemadapter`` supports) goes to ``items`` (and ``items_<appid>``) in the §11
        envelope. The caller accounts for the item on the page (:class:`FrontierItemProcessor`).

        Raises (in the Deferred):
            DropItem: the item was not sent (too large or not JSON-serialisable: a dead letter was
                written instead; or Kafka failed: the lease is left to expire and be reclaimed).
        """
        if isinstance(item, CrawledItem):
            kind, record = "crawled", dict(item)
        else:
            kind, record = "items", self.envelope(item, context)
        try:
            data = encode(record, default=_json_default)
        except (TypeError, ValueError, OverflowError) as exc:
            error = f"item error: {type(exc).__name__}: {exc}"
            if context is not None:
                self.fail(context, error)
            return defer.fail(DropItem(error))
        if len(data) > self.max_item_bytes:
            if _by_reference_field(kind, record) is not None:
                return self._by_reference(kind, record, context)
            return self._too_large(context, len(data))
        return self._send_record(kind, record, data, context)

    def _by_reference(self, kind: str, record: dict[str, Any], context: LeaseContext | None) -> defer.Deferred[None]:
        """Send a record too large for one message with its bulk in the blob store (docs/contract.md
        §20.5): a crawled item's ``body`` (UTF-8; ``"body": null``, ``body_ref``), a spider item's
        ``item`` (its JSON; ``"item": null``, ``item_ref``); the blob is written in a thread. Still
        too large without it: the item-too-large dead letter. The store refusing the write: the
        lease is abandoned, so the page is fetched again once it expires."""
        name = _by_reference_field(kind, record)
        assert name is not None
        value = record[name]
        data = value.encode("utf-8", "replace") if name == "body" else encode(value, default=_json_default)
        written: defer.Deferred[dict[str, Any]] = threads.deferToThread(self.blobs.put, data)

        def stored(ref: dict[str, Any]) -> defer.Deferred[None]:
            threads.deferToThread(self.blobs.expire)  # at most once an hour; never raises
            smaller = {**record, name: None, f"{name}_ref": ref}
            encoded = encode(smaller, default=_json_default)
            if len(encoded) > self.max_item_bytes:
                return self._too_large(context, len(encoded))
            return self._send_record(kind, smaller, encoded, context)

        def failed(failure: Any) -> None:
            url = context.request.url if context is not None else record.get("url")
            logger.error(
                "could not store the %s of %s (%d bytes) in BLOB_STORE_URL %s: %r; its lease will be reclaimed",
                name,
                url,
                len(data),
                self.blobs.public_url,
                failure.value,
            )
            if context is not None:
                self.leases.abandon(context)
            raise DropItem(f"BLOB_STORE_URL failed: {failure.value!r}")

        return written.addCallbacks(stored, failed)

    def _send_record(
        self, kind: str, record: dict[str, Any], data: bytes, context: LeaseContext | None
    ) -> defer.Deferred[None]:
        """Send the encoded *record* to its topics; fires on the broker's acknowledgement."""
        topics = [self.firehose if kind == "crawled" else self.items_topic]
        appid = str(record.get("appid", ""))
        if self.appid_topics:
            topic = appid_topic(self.settings.KAFKA_TOPIC_PREFIX, kind, appid)
            if topic is not None and len(topic) <= 249:
                topics.append(topic)
            else:
                logger.warning("appid %r is not a legal topic name fragment; firehose only", appid)
        headers = span = None
        if context is not None and context.trace is not None:  # §26.3: the record carries its emit span
            span, headers = context.trace.emit(topics[0])
        result: defer.Deferred[Any] = defer.gatherResults(
            [self.send(t, data, headers) for t in topics], consumeErrors=True
        )
        if span is not None:
            result.addBoth(_end_emit, span)

        def failed(failure: Any) -> Any:
            error = failure.value.subFailure.value if isinstance(failure.value, defer.FirstError) else failure.value
            big = isinstance(error, MessageSizeTooLargeError)
            if big and _by_reference_field(kind, record) is not None:
                return self._by_reference(kind, record, context)  # within the limit, but not with the framing
            if isinstance(error, MessageSizeTooLargeError):
                self._too_large(context, len(data))
                raise DropItem(f"item too large for Kafka ({len(data)} bytes); dead letter written")
            url = context.request.url if context is not None else record.get("url")
            logger.error(
                "%s did not accept an item of %s: %r; its lease will be reclaimed", self.output.name, url, error
            )
            if context is not None:
                self.leases.abandon(context)
            raise DropItem(f"{self.output.name} failed: {error!r}")

        result.addCallbacks(lambda _: None, failed)
        return result

    @staticmethod
    def envelope(item: Any, context: LeaseContext | None) -> dict[str, Any]:
        """The §11 record of a spider's own *item*, yielded on *context*'s page."""
        request = context.request if context is not None else None
        return {
            "appid": request.appid if request else "",
            "crawlid": request.crawlid if request else "",
            "spiderid": request.spiderid if request else "",
            "url": request.url if request else "",
            "timestamp": timestamp(),
            "item": ItemAdapter(item).asdict(),
        }

    def _too_large(self, context: LeaseContext | None, size: int) -> defer.Deferred[None]:
        error = f"item too large: {size} bytes > KAFKA_PRODUCER_MAX_REQUEST_SIZE {self.max_item_bytes}"
        if context is not None:
            self.fail(context, error)
        return defer.fail(DropItem(error))

    def fail(self, context: LeaseContext, error: str) -> None:
        """End *context* with a crawl dead letter (§6 b); acked as failed once Kafka has it."""
        if context.done or context.failed:
            return
        context.failed = True
        context.pending_items += 1  # the dead letter: the page ends once the broker has it
        letter = dead_letter_of(context.request, error)
        data = encode(letter)

        def sent(_: Any) -> None:
            self.on_failed()
            context.parsed = True
            context.pending_items -= 1
            self.leases.maybe_finish(context)

        def failed(failure: Any) -> None:
            logger.error(
                "%s did not accept a dead letter for %s: %r", self.output.name, context.request.url, failure.value
            )
            self.leases.abandon(context)

        self.send(self.dead_letter_topic, data).addCallbacks(sent, failed)

    def send(self, topic: str, data: bytes, headers: list[tuple[str, bytes]] | None = None) -> defer.Deferred[None]:
        """Deliver *data* as a record of *topic* (with *headers*: its trace context) through the output."""
        return self.output.send(topic, data, headers)


class KafkaOutput:
    """Records to Kafka topics through one producer on librdkafka (:mod:`crawlhive.utils.backends.rdkafka`).

    A record's Deferred fires in the reactor thread on the broker's acknowledgement; the producer's
    delivery thread hands the acknowledgements over in batches, one reactor wake-up for all the
    reports of a ``poll`` (kafka-python's producer, which built the batches in Python on a thread
    competing with the reactor for the GIL, was an eighth of a crawler's CPU).

    Args:
        settings: connection settings (per-appid topics are created with them on first use).

    Raises:
        BackendUnavailable: no broker answers (names KAFKA_BOOTSTRAP_SERVERS).
    """

    name = "Kafka"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.producer = make_rdkafka_producer(settings, self._delivered)
        self._known = {settings.topic(t) for t in ("crawled_firehose", "items", "dead_letter")}
        self._appid_topic_state: dict[str, Any] = {}  # topic -> True (exists) or waiters while being created

    def close(self) -> None:
        left = self.producer.close(timeout=5)
        if left:  # their leases stay and are reclaimed
            logger.warning("%d records not acknowledged by Kafka at close; their pages will be crawled again", left)

    def send(self, topic: str, data: bytes, headers: list[tuple[str, bytes]] | None = None) -> defer.Deferred[None]:
        """Produce *data* (with *headers*) to *topic*; the Deferred fires in the reactor thread on the broker's ack."""
        result: defer.Deferred[None] = defer.Deferred()
        ready = self._topic_ready(topic)

        def send(_: Any) -> None:
            try:
                self.producer.produce(topic, data, result, headers)
            except KafkaError as exc:  # e.g. MessageSizeTooLargeError, a full queue
                result.errback(exc)

        ready.addCallbacks(send, result.errback)
        return result

    def _delivered(self, reports: list[Report]) -> None:
        """In the producer's delivery thread: settle *reports* in the reactor thread."""
        reactor.callFromThread(self._settle, reports)

    @staticmethod
    def _settle(reports: list[Report]) -> None:
        for result, error in reports:
            if error is None:
                result.callback(None)
            else:
                result.errback(error)

    def _topic_ready(self, topic: str) -> defer.Deferred[Any]:
        """Fires once *topic* exists (per-appid topics are created on first use, in a thread)."""
        state = self._appid_topic_state.get(topic)
        if topic in self._known or state is True:
            return defer.succeed(True)
        waiter: defer.Deferred[Any] = defer.Deferred()
        if state is None:
            waiters: list[defer.Deferred[Any]] = [waiter]
            self._appid_topic_state[topic] = waiters

            def done(result: Any) -> None:
                self._appid_topic_state.pop(topic, None)
                if isinstance(result, Failure):
                    logger.error("could not create topic %s: %s", topic, result.value)
                else:
                    self._appid_topic_state[topic] = True
                for w in waiters:
                    w.errback(result) if isinstance(result, Failure) else w.callback(True)

            threads.deferToThread(ensure_topics, self.settings, [topic]).addBoth(done)
        else:
            state.append(waiter)
        return waiter


class RedisOutput:
    """Redis-only mode (docs/contract.md §12): records pushed to Redis lists named as scrapy-redis
    names them, items (page items and a spider's own) to ``REDIS_ITEMS_KEY`` (default
    ``%(spider)s:items``), dead letters to ``%(spider)s:dead_letter``.

    Why not scrapy-redis's ``RedisPipeline``: it pushes from a pipeline and returns before Redis
    answered, in a thread pool of its own, so a crawler could ack a page whose item was never
    stored; here a page's lease ends only once its ``RPUSH`` returned. Its key format and JSON
    records are kept.

    Args:
        redis: a bytes client (pushes run in the reactor's thread pool, off the reactor).
        items_key: the list of items.
        dead_letter_key: the list of dead letters.
        dead_letter_topic: the topic name the emitter gives dead letters.
    """

    name = "Redis"

    def __init__(self, redis: RedisClient, items_key: str, dead_letter_key: str, dead_letter_topic: str) -> None:
        self.redis = redis
        self.items_key = items_key
        self.dead_letter_key = dead_letter_key
        self.dead_letter_topic = dead_letter_topic

    def key_of(self, topic: str) -> str:
        return self.dead_letter_key if topic == self.dead_letter_topic else self.items_key

    def send(self, topic: str, data: bytes, headers: list[tuple[str, bytes]] | None = None) -> defer.Deferred[None]:
        pushed: defer.Deferred[Any] = threads.deferToThread(self.redis.rpush, self.key_of(topic), data)
        return pushed.addCallback(lambda _: None)

    def close(self) -> None:
        """Nothing is buffered: every push was answered before its Deferred fired."""
