"""What the redis-monitor tests share: their settings and keys, the outbound and dead-letter topics
read from their beginning, monitors running their real loop in threads (the fixtures ``rm_settings``,
``keys``, ``outbound``, ``dead_letters`` and ``running``: import them by name), and hand-seeding of
the control stream and the frontier.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.client import Pipeline

from crawlhive.redis_monitor.monitor import RedisMonitor
from crawlhive.utils.backends.kafka_clients import ensure_topics, make_consumer
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings, write_pipeline
from crawlhive.utils.backends.scripts import scripts
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.kafka_errors import TopicPartition
from crawlhive.utils.frontier import Frontier, FrontierLeaser, FrontierRequest, ThrottleConfig
from crawlhive.utils.state.control import ControlQueue
from support.crawler import redis_for

FAST = ThrottleConfig(hits=1000, window_s=1.0, moderated=False, type_enabled=True, egress_id=None)


@pytest.fixture
def rm_settings(settings: Settings) -> Settings:
    return settings.copy_with(
        REDIS_MONITOR_BLOCK_MS=100,
        REDIS_MONITOR_TICK_S=0.1,
        REDIS_MONITOR_RETRY_S=0.2,
        HEARTBEAT_INTERVAL=1,
        CRAWLER_NODE_NAME="worker-1",
    )


@pytest.fixture
def keys(rm_settings: Settings) -> Keys:
    return keys_from_settings(rm_settings)


class Topic:
    """Reads one topic from its beginning (all partitions, no group)."""

    def __init__(self, settings: Settings, topic: str) -> None:
        ensure_topics(settings, [topic])
        self.consumer = make_consumer(settings, group_id=None)
        partitions = [TopicPartition(topic, p) for p in sorted(self.consumer.partitions_for_topic(topic))]
        self.consumer.assign(partitions)
        self.consumer.seek_to_beginning(*partitions)
        self.messages: list[dict[str, Any]] = []

    def poll(self) -> None:
        for records in self.consumer.poll(timeout_ms=200).values():
            self.messages += [json.loads(r.value) for r in records]

    def wait_for(self, count: int, timeout_s: float = 20.0, where: Callable[[dict[str, Any]], bool] = bool) -> list:
        """The matching messages once at least *count* have arrived (fails after *timeout_s*)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.poll()
            found = [m for m in self.messages if where(m)]
            if len(found) >= count:
                return found
        raise AssertionError(f"expected {count} messages, got {self.messages!r}")

    def settle(self, seconds: float) -> list[dict[str, Any]]:
        """Everything that arrived after polling for *seconds* more."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.poll()
        return self.messages

    def close(self) -> None:
        self.consumer.close()


@pytest.fixture
def outbound(rm_settings: Settings) -> Iterator[Topic]:
    topic = Topic(rm_settings, rm_settings.topic("outbound_firehose"))
    yield topic
    topic.close()


@pytest.fixture
def dead_letters(rm_settings: Settings) -> Iterator[Topic]:
    topic = Topic(rm_settings, rm_settings.topic("dead_letter"))
    yield topic
    topic.close()


class Running:
    """Redis-monitors running their real loop in threads."""

    def __init__(self) -> None:
        self.monitors: list[RedisMonitor] = []
        self.threads: list[threading.Thread] = []

    def start(self, settings: Settings, client: redis.Redis) -> RedisMonitor:
        monitor = RedisMonitor(settings, client)
        thread = threading.Thread(target=monitor.run, daemon=True)
        thread.start()
        self.monitors.append(monitor)
        self.threads.append(thread)
        return monitor

    def stop(self) -> None:
        for monitor in self.monitors:
            monitor.stopping = True
        for thread in self.threads:
            thread.join(timeout=15)
        assert not any(t.is_alive() for t in self.threads)


@pytest.fixture
def running(redis_url: str) -> Iterator[Callable[..., RedisMonitor]]:
    runner = Running()
    clients: list[redis.Redis] = []

    def start(settings: Settings) -> RedisMonitor:
        client = redis_for(redis_url)
        clients.append(client)
        return runner.start(settings, client)

    yield start
    runner.stop()
    for client in clients:
        client.close()


def submit(client: redis.Redis, settings: Settings, kind: str, *messages: dict[str, Any]) -> None:
    control = ControlQueue.from_settings(client, settings)
    origins = [f"test/0/{message.get('uuid') or time.monotonic_ns()}" for message in messages]

    def build() -> Pipeline:
        pipe = write_pipeline(client)
        for message, origin in zip(messages, origins, strict=True):
            control.submit(pipe, kind, message, origin)
        return pipe

    scripts(client).execute(build)


def push(client: redis.Redis, settings: Settings, *requests: FrontierRequest) -> None:
    frontier = Frontier.from_settings(client, settings)
    pipe = write_pipeline(client)
    frontier.push(list(requests), pipe)
    pipe.execute()


def req(url: str, crawlid: str = "c1", appid: str = "testapp", priority: int = 1, **kw: Any) -> FrontierRequest:
    return FrontierRequest(url=url, appid=appid, crawlid=crawlid, priority=priority, request_id=url, **kw)


def worker(client: redis.Redis, keys: Keys, lease_s: float = 30.0) -> FrontierLeaser:
    return FrontierLeaser(client, keys, lease_s=lease_s, record_ttl_s=3600, throttle=FAST)


def without_time(message: dict[str, Any]) -> dict[str, Any]:
    assert isinstance(message.pop("server_time"), int)
    return message


def by_uuid(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {m["uuid"]: without_time(dict(m)) for m in messages if "uuid" in m}
