"""crawlhive.utils.backends.rdkafka against the test broker: kafka-python's meaning of each call."""

from __future__ import annotations

import threading
import time

import pytest
from kafka.errors import MessageSizeTooLargeError
from kafka.structs import TopicPartition

from crawlhive.utils.backends.kafka_clients import consumer_lag, ensure_topics, make_producer
from crawlhive.utils.backends.rdkafka import (
    RdKafkaConsumer,
    Record,
    Report,
    make_rdkafka_consumer,
    make_rdkafka_producer,
)
from crawlhive.utils.config.settings import Settings


def _poll_all(consumer: RdKafkaConsumer, expected: int, timeout_s: float = 30) -> list[Record]:
    records: list[Record] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < expected and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500, max_records=100).values():
            records.extend(batch)
    return records


def test_a_commit_without_offsets_commits_what_was_polled(settings: Settings) -> None:
    """ConsumerWorker.consume_batch commits with ``commit()``: with librdkafka's offset store off,
    librdkafka's own ``commit()`` committed nothing (the group's lag stayed), so the adapter
    commits the consumer's positions, as kafka-python does."""
    topic, group = settings.topic("rdk"), settings.topic("rdk-group")
    ensure_topics(settings, [topic])
    producer = make_producer(settings)
    try:
        for i in range(5):
            producer.send(topic, f"record {i}".encode())
        producer.flush(timeout=10)
    finally:
        producer.close(timeout=5)
    assert consumer_lag(settings, topic, group) > 0
    consumer = make_rdkafka_consumer(settings, topic, group_id=group, auto_offset_reset="earliest")
    try:
        records = _poll_all(consumer, 5)
        assert sorted(r.value for r in records) == [f"record {i}".encode() for i in range(5)]
        consumer.commit()
        assert consumer_lag(settings, topic, group) == 0
        for partition in {TopicPartition(r.topic, r.partition) for r in records}:
            last = max(r.offset for r in records if r.partition == partition.partition)
            assert consumer.committed(partition) == last + 1
        consumer.commit()  # nothing new polled: nothing to commit, no error
    finally:
        consumer.close()
    again = make_rdkafka_consumer(settings, topic, group_id=group, auto_offset_reset="earliest")
    try:
        assert _poll_all(again, 1, timeout_s=5) == []  # the group goes on after what it committed
    finally:
        again.close()


def test_the_producer_reports_each_record_with_its_token_in_batches(settings: Settings) -> None:
    """The crawler's producer: every record is reported once, acknowledged, with the token it was
    given, from the delivery thread, several to a call; the records are on the topic."""
    topic, group = settings.topic("rdk-out"), settings.topic("rdk-out-group")
    ensure_topics(settings, [topic])
    calls: list[list[Report]] = []
    threads: set[str] = set()

    def on_reports(reports: list[Report]) -> None:
        threads.add(threading.current_thread().name)
        calls.append(reports)

    producer = make_rdkafka_producer(settings, on_reports)
    try:
        for i in range(200):
            producer.produce(topic, f"record {i}".encode(), i)
        deadline = time.monotonic() + 30
        while sum(len(c) for c in calls) < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        assert producer.close(timeout=5) == 0
    reports = [report for call in calls for report in call]
    assert sorted(token for token, _ in reports) == list(range(200))
    assert {error for _, error in reports} == {None}
    assert len(calls) < 200  # batched: not one hand-over per record
    assert threads == {"crawlhive-rdkafka-producer"}
    consumer = make_rdkafka_consumer(settings, topic, group_id=group, auto_offset_reset="earliest")
    try:
        assert sorted(r.value for r in _poll_all(consumer, 200)) == sorted(f"record {i}".encode() for i in range(200))
    finally:
        consumer.close()


def test_the_producer_refuses_a_record_over_the_request_size_as_kafka_python_does(settings: Settings) -> None:
    """The emitter sends such a record by reference or writes a dead letter on kafka-python's
    MessageSizeTooLargeError: librdkafka's refusal must arrive as that error."""
    small = settings.copy_with(KAFKA_PRODUCER_MAX_REQUEST_SIZE=10_000)
    topic = small.topic("rdk-big")
    ensure_topics(small, [topic])
    producer = make_rdkafka_producer(small, lambda reports: None)
    try:
        with pytest.raises(MessageSizeTooLargeError):
            producer.produce(topic, b"x" * 20_000, "big")
    finally:
        producer.close(timeout=5)
