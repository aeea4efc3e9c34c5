"""Send records and wait for the broker's acknowledgement of every one (docs/contract.md §1): what
each service does before it commits, acks or ``XACK``\\ s what the records answer."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from crawlhive.utils.contract.kafka_errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTopicError,
    KafkaError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
)

T = TypeVar("T")


class SentRecord(Protocol):
    """What :func:`send_and_wait` needs of a send's future (kafka-python's, or
    :class:`~crawlhive.utils.backends.rdkafka.SendFuture`)."""

    def get(self, timeout: float | None = None) -> Any: ...


class Producer(Protocol):
    """What :func:`send_and_wait` needs of a producer (the contract layer names no client:
    :func:`~crawlhive.utils.backends.kafka_clients.make_producer` builds the one in use)."""

    def send(
        self, topic: str, value: bytes | None = None, *, headers: list[tuple[str, bytes]] | None = None
    ) -> SentRecord: ...

    def flush(self, timeout: float | None = None) -> None: ...


def never_sendable(exc: BaseException) -> bool:
    """True if Kafka refused a record for good: too large for the producer or the broker, or
    malformed. Sending it again can never succeed, so the record is reported or dropped instead
    (docs/contract.md §10.5); every other Kafka error is worth a retry."""
    return isinstance(
        exc,
        MessageSizeTooLargeError
        | RecordListTooLargeError
        | InvalidRecordError
        | CorruptRecordError
        | InvalidTopicError,
    )


def send_and_wait(
    producer: Producer,
    records: Iterable[tuple[str, bytes, T]],
    timeout_s: float,
    give_up: Callable[[str, T, KafkaError], None] | None = None,
    headers: Mapping[int, list[tuple[str, bytes]]] | None = None,
) -> None:
    """Produce every ``(topic, value, tag)`` of *records*, flush, and wait for every ack.

    Args:
        give_up: called with ``(topic, tag, error)`` for a record Kafka refuses for good
            (:func:`never_sendable`: too large, malformed), which is then
            dropped so the others are not held up; without it such an error is raised too.

    Raises:
        KafkaError: a record was not acknowledged within *timeout_s* (the caller retries the lot).
    """
    futures: list[tuple[str, T, SentRecord]] = []
    for i, (topic, value, tag) in enumerate(records):
        try:
            if headers and i in headers:
                futures.append((topic, tag, producer.send(topic, value, headers=headers[i])))
            else:
                futures.append((topic, tag, producer.send(topic, value)))
        except KafkaError as exc:
            if give_up is None or not never_sendable(exc):
                raise
            give_up(topic, tag, exc)
    if not futures:
        return
    producer.flush(timeout=timeout_s)
    for topic, tag, future in futures:
        try:
            future.get(timeout=timeout_s)
        except KafkaError as exc:
            if give_up is None or not never_sendable(exc):
                raise
            give_up(topic, tag, exc)
