"""crawlhive.utils.backends.rdkafka against the test broker: kafka-python's meaning of each call
(every component's consumer and producer come from kafka_clients' make_consumer / make_producer)."""

from __future__ import annotations

import threading
import time

import pytest

from crawlhive.utils.backends.kafka_clients import consumer_lag, ensure_topics, make_consumer, make_producer
from crawlhive.utils.backends.rdkafka import (
    RdKafkaConsumer,
    Record,
    RecordMetadata,
    Report,
    make_rdkafka_producer,
)
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.kafka_errors import (
    IllegalStateError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    OffsetAndMetadata,
    TopicPartition,
)
from crawlhive.utils.contract.produce import never_sendable, send_and_wait


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
    consumer = make_consumer(settings, topic, group_id=group)
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
    again = make_consumer(settings, topic, group_id=group)
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
    consumer = make_consumer(settings, topic, group_id=group)
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


def test_a_send_is_acknowledged_only_once_the_broker_has_the_record(settings: Settings) -> None:
    """Commit-after-ack rests on this: a send's future settles when the broker acknowledged the
    record, not when it was queued. With a 2 s linger the record waits in librdkafka's queue: its
    future is not done then (given the chance); after the flush it is, and its metadata is where a
    consumer finds the record, with the same timestamp."""
    topic = settings.topic("rdk-ack")
    ensure_topics(settings, [topic])
    producer = make_producer(settings, linger_ms=2000)
    try:
        future = producer.send(topic, b"acked", key=b"k", headers=[("h", b"v")])
        time.sleep(0.3)  # the delivery thread has served reports meanwhile: none is due yet
        assert not future.is_done
        with pytest.raises(KafkaTimeoutError):
            future.get(timeout=0.05)
        producer.flush(timeout=10)
        assert future.succeeded()
        meta = future.get(timeout=0)
    finally:
        producer.close(timeout=5)
    assert isinstance(meta, RecordMetadata) and meta.topic == topic and meta.timestamp > 0
    consumer = make_consumer(settings, topic, group_id=None)
    try:
        (record,) = _poll_all(consumer, 1)
    finally:
        consumer.close()
    assert (record.partition, record.offset, record.timestamp) == (meta.partition, meta.offset, meta.timestamp)
    assert (record.value, record.key, record.headers) == (b"acked", b"k", [("h", b"v")])


def test_callbacks_and_errbacks_run_once_per_record_and_an_oversize_record_fails_as_kafka_python_s(
    settings: Settings,
) -> None:
    """What the bulk feeder and send_and_wait rely on: each future's callback (or errback) runs once;
    a record over KAFKA_PRODUCER_MAX_REQUEST_SIZE gives a failed future whose error is kafka-python's
    MessageSizeTooLargeError (never_sendable: dropped, not retried), and does not hold up the rest."""
    small = settings.copy_with(KAFKA_PRODUCER_MAX_REQUEST_SIZE=10_000)
    topic = small.topic("rdk-callbacks")
    ensure_topics(small, [topic])
    acked: list[RecordMetadata] = []
    failed: list[BaseException] = []
    producer = make_producer(small)
    try:
        for i in range(300):
            producer.send(topic, f"r{i}".encode()).add_callback(acked.append).add_errback(failed.append)
        big = producer.send(topic, b"x" * 20_000)
        big.add_callback(acked.append).add_errback(failed.append)
        producer.flush(timeout=20)
        with pytest.raises(MessageSizeTooLargeError):
            big.get(timeout=0)
        given_up: list[tuple[str, str]] = []
        send_and_wait(
            producer,
            [(topic, b"ok", "ok"), (topic, b"y" * 20_000, "big")],
            10,
            give_up=lambda t, tag, exc: given_up.append((tag, type(exc).__name__)),
        )
        with pytest.raises(MessageSizeTooLargeError):
            send_and_wait(producer, [(topic, b"z" * 20_000, "big")], 10)
    finally:
        producer.close(timeout=5)
    assert len(acked) == 300 and len({(m.partition, m.offset) for m in acked}) == 300
    assert len(failed) == 1 and isinstance(failed[0], MessageSizeTooLargeError) and never_sendable(failed[0])
    assert given_up == [("big", "MessageSizeTooLargeError")]


def test_paused_lists_what_pause_stopped_and_a_paused_partition_delivers_nothing(settings: Settings) -> None:
    """The kafka-monitor holds crawl requests while the frontier's tails are full: it pauses its
    assignment, and later resumes ``paused()``."""
    topic, group = settings.topic("rdk-pause"), settings.topic("rdk-pause-group")
    ensure_topics(settings.copy_with(KAFKA_TOPIC_PARTITIONS=1), [topic])
    producer = make_producer(settings)
    consumer = make_consumer(settings, topic, group_id=group)
    try:
        producer.send(topic, b"first").get(timeout=10)
        assert len(_poll_all(consumer, 1)) == 1  # joined, assigned
        assignment = consumer.assignment()
        assert assignment == {TopicPartition(topic, 0)} and consumer.paused() == set()
        consumer.pause(*assignment)
        assert consumer.paused() == assignment
        producer.send(topic, b"held").get(timeout=10)
        assert _poll_all(consumer, 1, timeout_s=1.5) == []  # given the chance: nothing while paused
        consumer.resume(*consumer.paused())
        assert consumer.paused() == set()
        assert [r.value for r in _poll_all(consumer, 1)] == [b"held"]
    finally:
        consumer.close()
        producer.close(timeout=5)


def test_a_consumer_without_a_group_reads_every_partition_and_from_the_end_when_asked(settings: Settings) -> None:
    """librdkafka needs a group to subscribe: a group-less consumer assigns itself every partition
    (earliest: all records), or, as the REST service's answers reader does, starts at the end
    resolved by ``position`` before anything is sent (latest: only what comes after). It commits nothing."""
    topic = settings.topic("rdk-nogroup")
    ensure_topics(settings, [topic])
    producer = make_producer(settings)
    try:
        for i in range(40):
            producer.send(topic, f"old {i}".encode(), partition=i % 4)
        producer.flush(timeout=10)
        latest = make_consumer(settings, group_id=None, auto_offset_reset="latest")
        partitions = [TopicPartition(topic, p) for p in sorted(latest.partitions_for_topic(topic) or ())]
        assert len(partitions) == 4
        latest.assign(partitions)
        latest.seek_to_end(*partitions)
        ends = {p: latest.position(p) for p in partitions}
        for i in range(4):
            producer.send(topic, f"new {i}".encode(), partition=i).get(timeout=10)
    finally:
        producer.close(timeout=5)
    try:
        seen = _poll_all(latest, 4)
        time.sleep(0.3)
        seen += [r for batch in latest.poll(timeout_ms=500).values() for r in batch]
        assert sorted(r.value for r in seen if r.value.startswith(b"new")) == [f"new {i}".encode() for i in range(4)]
        # Tansu's ListOffsets may answer the start of a partition's last batch: what was read
        # before the new records is at most that batch again, never records after the end
        assert all(r.offset >= ends[TopicPartition(r.topic, r.partition)] - 10 for r in seen)
        with pytest.raises(IllegalStateError):
            latest.commit()
    finally:
        latest.close()
    everything = make_consumer(settings, topic, group_id=None)
    try:
        assert everything.assignment() == set(partitions)
        assert len(_poll_all(everything, 44)) == 44
        assert everything.committed(partitions[0]) is None
    finally:
        everything.close()
    assert consumer_lag(settings, topic, settings.topic("rdk-nogroup-never")) == 44


def test_a_consumer_without_a_group_picks_up_a_topic_created_after_it(settings: Settings) -> None:
    """A per-appid topic exists once its first record was sent; a reader started before must read it."""
    topic = settings.topic("rdk-later")
    consumer = make_consumer(settings, topic, group_id=None)
    try:
        assert consumer.assignment() == set()
        ensure_topics(settings, [topic])
        producer = make_producer(settings)
        try:
            producer.send(topic, b"late").get(timeout=10)
        finally:
            producer.close(timeout=5)
        assert [r.value for r in _poll_all(consumer, 1, timeout_s=15)] == [b"late"]
    finally:
        consumer.close()


def test_a_group_member_starts_at_the_committed_offset_else_where_auto_offset_reset_says(
    settings: Settings,
) -> None:
    """Partitions a member is given start at the group's committed offset; one the group never
    committed starts at ``auto_offset_reset``'s end, the earliest for every crawlhive consumer (the
    adapter names it when the group assigns the partitions, instead of librdkafka's reset after a
    back-off). (The test broker answers "latest" with a stale offset, so that end is not tested.)"""
    reset = "earliest"
    topic, group = settings.topic(f"rdk-start-{reset}"), settings.topic(f"rdk-start-{reset}-group")
    partitions = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    ensure_topics(settings.copy_with(KAFKA_TOPIC_PARTITIONS=2), [topic])

    def joined(consumer: RdKafkaConsumer) -> list[Record]:
        """Poll until both partitions are the member's and it knows where each starts."""
        got: list[Record] = []
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < 2:
            assert time.monotonic() < deadline, "the member got no partitions"
            for batch in consumer.poll(timeout_ms=200).values():
                got += batch
        for partition in partitions:
            consumer.position(partition)
        return got

    producer = make_producer(settings)
    try:
        for i in range(6):
            producer.send(topic, f"old {i}".encode(), partition=i % 2)
        producer.flush(timeout=10)
        first = make_consumer(settings, topic, group_id=group, auto_offset_reset=reset)
        try:
            joined(first)
            first.commit({partitions[0]: OffsetAndMetadata(1, "", -1)})  # partition 1: none
        finally:
            first.close()
        second = make_consumer(settings, topic, group_id=group, auto_offset_reset=reset)
        try:
            records = joined(second)
            for i in range(2):
                producer.send(topic, f"after {i}".encode(), partition=i)
            producer.flush(timeout=10)
            records += _poll_all(second, 7 - len(records))
            records += _poll_all(second, 1, timeout_s=2)  # anything more has its chance
        finally:
            second.close()
    finally:
        producer.close(timeout=5)
    got = {(r.partition, r.value.decode()) for r in records}
    resumed = {(0, "old 2"), (0, "old 4"), (0, "after 0"), (1, "after 1")}  # partition 0 after offset 1
    assert got == resumed | {(1, "old 1"), (1, "old 3"), (1, "old 5")}
