"""Items and crawl dead letters to Kafka, as Deferreds that fire on the broker's acknowledgement.

kafka-python's producer sends from its own thread and reports through futures; :meth:`Emitter.send`
bridges one record to a Twisted Deferred that fires in the reactor thread. A page's lease ends only
after the broker acknowledged every item of the page (:class:`~crawlhive.crawler.leases.LeaseTable`);
a Kafka failure never acks: the lease is abandoned, expires and is reclaimed (at least once).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ujson
from kafka.errors import MessageSizeTooLargeError
from scrapy.exceptions import DropItem
from twisted.internet import defer, reactor, threads
from twisted.python.failure import Failure

from crawlhive.utils.connections import ensure_topics
from crawlhive.utils.frontier import crawl_dead_letter

if TYPE_CHECKING:
    from kafka import KafkaProducer

    from crawlhive.crawler.items import CrawledItem
    from crawlhive.crawler.leases import LeaseContext, LeaseTable
    from crawlhive.utils.settings import Settings

logger = logging.getLogger(__name__)

#: Legal per-appid topic name fragment (docs/contract.md §1).
_APPID_TOPIC = re.compile(r"^[A-Za-z0-9._-]+$")


class Emitter:
    """Sends a crawler's items and dead letters, and ends their pages' leases when acknowledged.

    Args:
        settings: KAFKA_PRODUCER_MAX_REQUEST_SIZE, KAFKA_APPID_TOPICS and the topic names.
        producer: a Kafka producer (``make_producer``).
        leases: the process's lease table (pages finish there).
        on_failed: called once per crawl dead letter the broker acknowledged (the failed stat).
    """

    def __init__(
        self, settings: Settings, producer: KafkaProducer, leases: LeaseTable, on_failed: Callable[[], None]
    ) -> None:
        self.settings = settings
        self.producer = producer
        self.leases = leases
        self.on_failed = on_failed
        self.max_item_bytes = settings.getint("KAFKA_PRODUCER_MAX_REQUEST_SIZE")
        self.appid_topics = settings.getbool("KAFKA_APPID_TOPICS")
        self.firehose = settings.topic("crawled_firehose")
        self.dead_letter_topic = settings.topic("dead_letter")
        self._appid_topic_state: dict[str, Any] = {}  # topic -> True (exists) or waiters while being created

    def emit(self, item: CrawledItem) -> defer.Deferred[None]:
        """Send *item* to the firehose (and its appid topic); fires when the broker acknowledged it.

        When the last item of a page is acknowledged the page is finished.

        Raises (in the Deferred):
            DropItem: the item was not sent (too large: a dead letter was written instead; or Kafka
                failed: the lease is left to expire and be reclaimed).
        """
        context = item.context
        data = ujson.dumps(dict(item), ensure_ascii=False, escape_forward_slashes=False).encode()
        if len(data) > self.max_item_bytes:
            return self._too_large(context, len(data))
        topics = [self.firehose]
        appid = str(item.get("appid", ""))
        if self.appid_topics:
            if _APPID_TOPIC.match(appid) and len(self.settings.topic(f"crawled_{appid}")) <= 249:
                topics.append(self.settings.topic(f"crawled_{appid}"))
            else:
                logger.warning("appid %r is not a legal topic name fragment; firehose only", appid)
        result: defer.Deferred[Any] = defer.gatherResults([self.send(t, data) for t in topics], consumeErrors=True)

        def sent(_: Any) -> None:
            if context is not None:
                context.pending_items -= 1
                self.leases.maybe_finish(context)

        def failed(failure: Any) -> None:
            error = failure.value.subFailure.value if isinstance(failure.value, defer.FirstError) else failure.value
            if isinstance(error, MessageSizeTooLargeError):
                self._too_large(context, len(data))
                raise DropItem(f"item too large for Kafka ({len(data)} bytes); dead letter written")
            logger.error("Kafka did not accept an item of %s: %r; its lease will be reclaimed", item.get("url"), error)
            if context is not None:
                self.leases.abandon(context)
            raise DropItem(f"Kafka failed: {error!r}")

        result.addCallbacks(sent, failed)
        return result

    def _too_large(self, context: LeaseContext | None, size: int) -> defer.Deferred[None]:
        error = f"item too large: {size} bytes > KAFKA_PRODUCER_MAX_REQUEST_SIZE {self.max_item_bytes}"
        if context is not None:
            context.pending_items -= 1
            self.fail(context, error)
        return defer.fail(DropItem(error))

    def fail(self, context: LeaseContext, error: str) -> None:
        """End *context* with a crawl dead letter (§6 b); acked as failed once Kafka has it."""
        if context.done or context.failed:
            return
        context.failed = True
        letter = crawl_dead_letter(context.request, error)
        data = ujson.dumps(letter, ensure_ascii=False, escape_forward_slashes=False).encode()

        def sent(_: Any) -> None:
            self.on_failed()
            context.parsed = True
            self.leases.maybe_finish(context)

        def failed(failure: Any) -> None:
            logger.error("Kafka did not accept a dead letter for %s: %r", context.request.url, failure.value)
            self.leases.abandon(context)

        self.send(self.dead_letter_topic, data).addCallbacks(sent, failed)

    def send(self, topic: str, data: bytes) -> defer.Deferred[None]:
        """Produce *data* to *topic*; the Deferred fires in the reactor thread on the broker's ack."""
        result: defer.Deferred[None] = defer.Deferred()
        ready = self._topic_ready(topic)

        def send(_: Any) -> None:
            try:
                future = self.producer.send(topic, data)
            except Exception as exc:  # kafka-python raises e.g. KafkaTimeoutError, MessageSizeTooLargeError
                result.errback(exc)
                return
            future.add_callback(lambda _meta: reactor.callFromThread(result.callback, None))
            future.add_errback(lambda exc: reactor.callFromThread(result.errback, exc))

        ready.addCallbacks(send, result.errback)
        return result

    def _topic_ready(self, topic: str) -> defer.Deferred[Any]:
        """Fires once *topic* exists (per-appid topics are created on first use, in a thread)."""
        state = self._appid_topic_state.get(topic)
        if topic in (self.firehose, self.dead_letter_topic) or state is True:
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
