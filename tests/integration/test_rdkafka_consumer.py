"""crawlhive.utils.rdkafka_consumer against the test broker: kafka-python's meaning of each call."""

from __future__ import annotations

import time

from kafka.structs import TopicPartition

from crawlhive.utils.kafka_clients import consumer_lag, ensure_topics, make_producer
from crawlhive.utils.rdkafka_consumer import RdKafkaConsumer, Record, make_rdkafka_consumer
from crawlhive.utils.settings import Settings


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
