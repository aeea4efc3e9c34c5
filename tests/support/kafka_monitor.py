"""What the kafka-monitor tests share: their settings, a monitor set up on them (the ``km_settings``
and ``monitor`` fixtures, import them by name), producing to and reading from the test's topics, and
counting what landed in Redis.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
import redis

from crawlhive.kafka_monitor.monitor import BatchResult, KafkaMonitor
from crawlhive.utils.backends.kafka_clients import make_consumer, make_producer
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.config.settings import Settings

if TYPE_CHECKING:
    from conftest import IsolatedNames

    from crawlhive.utils.backends.rdkafka import RecordMetadata


CLI = [sys.executable, "-m", "crawlhive.app.cli"]

#: Keys the monitor writes besides the frontier and the control stream (second part of the key).
BOOKKEEPING = {"stats", "stats-lifetime", "stats-unique", "stats-index", "heartbeat", "nodes"}


@pytest.fixture
def km_settings(settings: Settings) -> Settings:
    """A short session timeout: a fresh consumer group joins in about a second on Tansu."""
    return settings.copy_with(KAFKA_SESSION_TIMEOUT_MS=2000)


@pytest.fixture
def monitor(km_settings: Settings, redis_client: redis.Redis) -> Iterator[KafkaMonitor]:
    km = KafkaMonitor(km_settings, redis_client)
    km.setup()
    try:
        yield km
    finally:
        km.teardown()


def produce(settings: Settings, values: list[bytes | None], **overrides: Any) -> list[RecordMetadata]:
    """Send *values* to partition 0 of the incoming topic, in order; returns their metadata.

    A None value is sent with a key (Kafka needs one of them): a record without a value.
    """
    producer = make_producer(settings, **overrides)
    try:
        topic = settings.topic("incoming")
        futures = [
            producer.send(topic, value, key=None if value is not None else b"no-value", partition=0) for value in values
        ]
        producer.flush(timeout=30)
        return [future.get(timeout=30) for future in futures]
    finally:
        producer.close(timeout=5)


def encode(*messages: Any) -> list[bytes | None]:
    return [json.dumps(m).encode() for m in messages]


def drain(monitor: KafkaMonitor, records: int, timeout_s: float = 20.0) -> list[BatchResult]:
    """Run the real loop body until *records* more records have been processed."""
    target = monitor.totals.records + records
    deadline = time.monotonic() + timeout_s
    results = []
    while monitor.totals.records < target:
        assert time.monotonic() < deadline, f"processed {monitor.totals.records} of {target} records"
        result = monitor.run_once()
        if result.records:
            results.append(result)
    assert monitor.totals.records == target
    return results


def read_topic(settings: Settings, short: str, count: int, timeout_s: float = 15.0) -> list[Any]:
    """The first *count* messages of a topic (all partitions), parsed."""
    consumer = make_consumer(settings, settings.topic(short), group_id=None)
    found: list[Any] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(found) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                found.extend(json.loads(r.value) for r in records)
    finally:
        consumer.close()
    assert len(found) >= count, f"{len(found)} of {count} messages on {short}"
    return found


def state_keys(client: redis.Redis, names: IsolatedNames) -> set[bytes]:
    """Every key of this test except the monitor's own stats and heartbeat keys."""
    found = set(client.scan_iter(match=f"{names.key_prefix}:*", count=1000))
    return {k for k in found if _kind(k) not in BOOKKEEPING}


def _kind(key: bytes) -> str:
    """The kind of a key: the part after the prefix and after a shard's hash tag, if any."""
    parts = key.split(b":")[1:]
    if parts and parts[0].startswith(b"{"):
        parts = parts[1:]
    return parts[0].decode() if parts else ""


def queued(client: redis.Redis, keys: Keys, crawls: list[str], domains: list[str], appid: str = "testapp") -> int:
    """Members across the crawl queues of *crawls* x *domains* (spider ``link``)."""
    pipe = client.pipeline(transaction=False)
    for crawl in crawls:
        for domain in domains:
            pipe.zcard(keys.crawl_queue("link", appid, crawl, domain))
    return sum(pipe.execute())


def read_incoming(settings: Settings, names: IsolatedNames, count: int) -> list[Any]:
    """The first *count* records of the test's incoming topic (as a redelivery would bring them)."""
    consumer = make_consumer(settings, names.topic("incoming"), group_id=None)
    try:
        records: list[Any] = []
        while len(records) < count:
            records.extend(r for batch in consumer.poll(timeout_ms=500).values() for r in batch)
        return records
    finally:
        consumer.close()


def crawl(url: str, crawlid: str = "c1", **extra: Any) -> dict[str, Any]:
    return {"url": url, "appid": "testapp", "crawlid": crawlid, **extra}
