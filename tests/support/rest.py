"""Helpers of the REST tests: the real app under uvicorn in a thread, and a stand-in redis-monitor.

Not fixtures: each test module builds the fixtures it needs from these context managers, so that the
clients are closed (consumer first) before the session's broker stops.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from crawlhive.app.embedded import free_port
from crawlhive.rest.server import server_for
from crawlhive.rest.service import RestService
from crawlhive.utils.backends.kafka_clients import ensure_topics, make_consumer, make_producer
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.kafka_errors import TopicPartition

TOPICS = ("incoming", "outbound_firehose", "dead_letter")


@dataclass
class RunningRest:
    """One REST service under test: its base URL and its in-process service object."""

    url: str
    service: RestService


@contextlib.contextmanager
def running_rest(settings: Settings, *, wait_for_kafka: bool = True, host: str = "127.0.0.1") -> Iterator[RunningRest]:
    """Serve the real app on a free loopback port of *host* in a thread; stop it (and its clients) on exit."""
    port = free_port(host)
    server = server_for(settings, host=host, port=port)
    service: RestService = server.config.app.state.rest
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the REST server did not start"
            time.sleep(0.02)
        if wait_for_kafka:
            assert service.kafka.ready.wait(30), "the REST service did not connect to Kafka"
        yield RunningRest(f"http://{host}:{port}", service)
    finally:
        server.should_exit = True
        thread.join(30)


def topic_partitions(consumer: Any, topic: str) -> list[TopicPartition]:
    deadline = time.monotonic() + 10
    while not (numbers := consumer.partitions_for_topic(topic)):
        assert time.monotonic() < deadline, f"no partitions for {topic}"
        time.sleep(0.05)
    return [TopicPartition(topic, p) for p in sorted(numbers)]


@dataclass
class FakeRedisMonitor:
    """Plays the redis-monitor: answers requests with a uuid that arrive on ``<prefix>.incoming``.

    *answer* maps a request to its outbound message (None: no answer); *delay_s* postpones every
    answer. Every incoming message is recorded in :attr:`seen`.
    """

    settings: Settings
    answer: Callable[[dict[str, Any]], dict[str, Any] | None]
    delay_s: float = 0.0
    seen: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._timers: list[threading.Timer] = []
        ensure_topics(self.settings, [self.settings.topic(t) for t in TOPICS])
        self.consumer = make_consumer(self.settings, group_id=None, auto_offset_reset="latest")
        partitions = topic_partitions(self.consumer, self.settings.topic("incoming"))
        self.consumer.assign(partitions)
        self.consumer.seek_to_end(*partitions)
        for partition in partitions:
            self.consumer.position(partition, timeout_ms=10_000)
        self.producer = make_producer(self.settings)
        self.thread = threading.Thread(target=self._run, name="fake-redis-monitor", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for records in self.consumer.poll(timeout_ms=100).values():
                for record in records:
                    request = json.loads(record.value)
                    with self._lock:
                        self.seen.append(request)
                    reply = self.answer(request) if isinstance(request, dict) else None
                    if reply is not None:
                        timer = threading.Timer(self.delay_s, self.send, args=(reply,))
                        self._timers.append(timer)
                        timer.start()

    def send(self, message: dict[str, Any]) -> None:
        """Produce *message* on the outbound topic and wait for the ack."""
        self.producer.send(self.settings.topic("outbound_firehose"), json.dumps(message).encode()).get(timeout=10)

    def find(self, **fields: Any) -> list[dict[str, Any]]:
        """Incoming messages seen so far whose *fields* match."""
        with self._lock:
            return [m for m in self.seen if isinstance(m, dict) and all(m.get(k) == v for k, v in fields.items())]

    def wait_for(self, timeout_s: float = 10.0, **fields: Any) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while not (found := self.find(**fields)):
            assert time.monotonic() < deadline, f"no incoming message with {fields}"
            time.sleep(0.05)
        return found[0]

    def close(self) -> None:
        self._stop.set()
        self.thread.join(10)
        for timer in self._timers:
            timer.join(10)
        self.consumer.close()
        self.producer.close(timeout=2)


def stats_answer(request: dict[str, Any]) -> dict[str, Any] | None:
    """The answers a redis-monitor would give, in the shapes of docs/contract.md §4 (enough for the tests)."""
    if "uuid" not in request:
        return None
    base = {"appid": request["appid"], "uuid": request["uuid"], "server_time": int(time.time())}
    if "stats" in request or set(request) <= {"uuid", "appid"}:
        return {**base, "stats": request.get("stats", "all"), "queues": {"total_backlog": 0}}
    if request.get("action") == "stop":
        return {
            **base,
            "action": "stop",
            "crawlid": request["crawlid"],
            "spiderid": request["spiderid"],
            "total_purged": 0,
        }
    return {**base, "action": request.get("action")}


def delete_prefix(client: redis.Redis, prefix: str) -> None:
    batch = list(client.scan_iter(match=f"{prefix}*", count=1000))
    for start in range(0, len(batch), 500):
        client.delete(*batch[start : start + 500])
