"""The kafka-monitor against a real Redis and a real broker when things fail: a failed batch rewound,
Redis out of memory, SIGKILL mid-batch, Redis or the broker down, signals; stats and heartbeats.
(Request kinds, rejections and redelivery: test_kafka_monitor.py.)"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis
from support.crawler import keys_for
from support.kafka_monitor import (
    CLI,
    crawl,
    drain,
    encode,
    km_settings,
    monitor,
    produce,
    queued,
    read_topic,
)

from crawlhive.app.embedded import EmbeddedBroker, EmbeddedRedis, free_port
from crawlhive.kafka_monitor.monitor import COMPONENT, BatchResult, KafkaMonitor
from crawlhive.utils.backends.kafka_clients import ensure_topics, make_producer
from crawlhive.utils.config.settings import Settings, env_value
from crawlhive.utils.contract.kafka_errors import TopicPartition
from crawlhive.utils.process.loop import ForcedShutdown
from crawlhive.utils.state.heartbeat import live_nodes
from crawlhive.utils.state.stats import Stats

if TYPE_CHECKING:
    from conftest import IsolatedNames

# the fixtures imported from support.kafka_monitor: pytest finds them here
__all__ = ["km_settings", "monitor"]


class FailsOnce(KafkaMonitor):
    """A monitor whose first batch fails as if Redis had dropped the connection."""

    failed: list[tuple[int, int]] | None = None

    def process(self, records: list[Any]) -> BatchResult:
        if self.failed is None:
            self.failed = [(r.partition, r.offset) for r in records]
            raise redis.ConnectionError("simulated: connection reset by peer")
        return super().process(records)


def test_a_failed_batch_is_rewound_redelivered_and_committed_once_done(
    km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    km = FailsOnce(km_settings, redis_client)
    km.setup()
    try:
        produce(km_settings, encode(*(crawl(f"http://example.com/{i}") for i in range(5))))
        deadline = time.monotonic() + 20
        while km.totals.records < 5:
            assert time.monotonic() < deadline
            try:
                km.run_once()
            except redis.ConnectionError:
                assert km.failed  # the first poll's records failed; the next poll must return them again
        assert km.failed == [(0, i) for i in range(5)]
        assert queued(redis_client, keys_for(names.key_prefix), ["c1"], ["example.com"]) == 5
        assert km.consumer is not None
        assert km.consumer.committed(TopicPartition(names.topic("incoming"), 0)) == 5
    finally:
        km.teardown()


@pytest.mark.skipif(
    os.environ.get("CRAWLHIVE_TEST_REDIS") == "cluster",
    reason="CONFIG SET maxmemory reaches one node of a cluster, not the nodes the batch writes to",
)
def test_redis_out_of_memory_dead_letters_the_batch_instead_of_rewinding_it_forever(
    km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames, caplog: pytest.LogCaptureFixture
) -> None:
    """An ``OOM`` reply (maxmemory reached, noeviction) was transient: the batch was rewound and
    retried forever while the whole cluster backed off (and redis-py's OutOfMemoryError made the
    monitor dead-letter it as an internal error, then crash on the stats count). Now it is retried
    once, then its records are dead-lettered with the reason, one ERROR names maxmemory, and the
    next batch goes through."""
    # no heartbeat falls in the out-of-memory window (it would fail there, after the commit)
    monitor = KafkaMonitor(km_settings.copy_with(HEARTBEAT_INTERVAL=3600.0), redis_client)
    monitor.setup()
    try:
        _out_of_memory_then_back(monitor, km_settings, redis_client, names, caplog)
    finally:
        monitor.teardown()


def _out_of_memory_then_back(
    monitor: KafkaMonitor,
    km_settings: Settings,
    redis_client: redis.Redis,
    names: IsolatedNames,
    caplog: pytest.LogCaptureFixture,
) -> None:
    keys = keys_for(names.key_prefix)
    before = redis_client.config_get("maxmemory")["maxmemory"], redis_client.config_get("maxmemory-policy")
    produce(km_settings, encode(crawl("http://example.com/a"), {"appid": "testapp", "uuid": "st"}))
    caplog.set_level(logging.INFO, logger="crawlhive.kafka_monitor.monitor")
    redis_client.config_set("maxmemory-policy", "noeviction")
    redis_client.config_set("maxmemory", 1)  # every write that may grow memory is refused
    try:
        results = drain(monitor, 2, timeout_s=20)
    finally:
        redis_client.config_set("maxmemory", before[0])
        redis_client.config_set("maxmemory-policy", before[1]["maxmemory-policy"])
    assert sum(r.rejected for r in results) == 2 and not any(r.accepted for r in results)
    letters = read_topic(km_settings, "dead_letter", 2)
    assert {letter["error"] for letter in letters} == {"Redis out of memory (maxmemory)"}
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "maxmemory" in errors[0].getMessage(), [r.getMessage() for r in errors]
    assert queued(redis_client, keys, ["c1"], ["example.com"]) == 0

    produce(km_settings, encode(crawl("http://example.com/b")))  # memory is back: work goes on
    assert sum(r.accepted for r in drain(monitor, 1)) == 1
    assert queued(redis_client, keys, ["c1"], ["example.com"]) == 1


def _monitor_env(settings: Settings, home: Path, **extra: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_HOSTS", "REDIS_HOST", "REDIS_PORT")}
    for name in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS", "REDIS_KEY_PREFIX", "KAFKA_TOPIC_PREFIX"):
        env[name] = env_value(settings[name])
    env.update({"CRAWLHIVE_HOME": str(home), "KAFKA_SESSION_TIMEOUT_MS": "2000", "LOG_LEVEL": "INFO"})
    env.update({k: env_value(v) for k, v in extra.items()})
    return env


def test_sigkill_mid_batch_then_restart_queues_every_request_exactly_once(
    km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames, tmp_path: Path
) -> None:
    total, crawls, domains = 10_000, ["k1", "k2"], [f"site{i}.com" for i in range(25)]
    keys = keys_for(names.key_prefix)
    values = encode(
        *(crawl(f"http://www.{domains[i % 25]}/p{i}", crawls[i % 2], priority=i % 100 + 1) for i in range(total))
    )
    producer = make_producer(km_settings)
    try:
        ensure_topics(km_settings, [names.topic("incoming")])
        for value in values:
            producer.send(names.topic("incoming"), value)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=5)

    env = _monitor_env(km_settings, tmp_path, KAFKA_CONSUMER_MAX_POLL_RECORDS=1000)
    log = tmp_path / "km.log"
    with open(log, "wb") as out:
        first = subprocess.Popen([*CLI, "kafka-monitor"], env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            count = 0
            while count == 0 and time.monotonic() < deadline and first.poll() is None:
                count = queued(redis_client, keys, crawls, domains)
                time.sleep(0.002)
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
    killed_at = queued(redis_client, keys, crawls, domains)
    assert 0 < killed_at < total, f"not killed mid-way ({killed_at} queued); log:\n{log.read_text()[-3000:]}"

    with open(log, "ab") as out:
        second = subprocess.Popen([*CLI, "kafka-monitor"], env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            lifetime = keys.stats_lifetime(COMPONENT, "total")
            _wait_for(lambda: queued(redis_client, keys, crawls, domains) == total, 40)
            # a batch is counted just after it is queued: wait for the last count, do not race it
            _wait_for(lambda: int(redis_client.get(lifetime) or 0) >= total, 10)
            second.send_signal(signal.SIGTERM)
            assert second.wait(20) == 0, log.read_text()[-3000:]
        finally:
            if second.poll() is None:
                second.kill()
                second.wait()
    assert queued(redis_client, keys, crawls, domains) == total, log.read_text()[-3000:]
    text = log.read_text()
    assert "stopping after this batch" in text and "records in" in text  # graceful stop, progress line


def test_redis_down_at_start_and_later_the_monitor_backs_off_and_loses_nothing(
    km_settings: Settings, names: IsolatedNames, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    server = EmbeddedRedis(free_port(), appendonly=True, workdir=tmp_path / "redis")  # not started yet
    settings = km_settings.copy_with(REDIS_URL=server.url)
    keys = keys_for(names.key_prefix)
    domains = [f"site{i}.com" for i in range(5)]
    km = KafkaMonitor.from_settings(settings)
    caplog.set_level(logging.WARNING, logger="crawlhive.kafka_monitor.monitor")
    errors: list[BaseException] = []

    def run() -> None:
        try:
            km.run()
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    client: redis.Redis | None = None
    try:
        time.sleep(1.0)
        assert "check REDIS_URL" in caplog.text  # unreachable at start-up: retrying, naming the setting
        server.start()
        client = redis.Redis.from_url(server.url)
        produce(settings, encode(*(crawl(f"http://{domains[i % 5]}/a{i}") for i in range(200))))
        _wait_for(lambda: queued(client, keys, ["c1"], domains) == 200, 20)

        caplog.clear()
        server.stop()  # Redis goes away while requests arrive
        produce(settings, encode(*(crawl(f"http://{domains[i % 5]}/b{i}") for i in range(300))))
        _wait_for(lambda: "check REDIS_URL" in caplog.text, 15)
        server.start()
        _wait_for(lambda: queued(client, keys, ["c1"], domains) == 500, 30)
        assert live_nodes(client, keys, COMPONENT) == {km_settings.node_name: [km.node_id]}
    finally:
        km.stopping = True
        thread.join(30)
        if client is not None:
            client.close()
        server.close()
    assert not thread.is_alive() and not errors


def _wait_for(condition: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return
        except redis.RedisError:
            pass
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_kafka_unreachable_at_start_is_retried_and_sigterm_still_exits_0(km_settings: Settings, tmp_path: Path) -> None:
    env = _monitor_env(km_settings, tmp_path)
    env["KAFKA_BOOTSTRAP_SERVERS"] = "127.0.0.1:1"
    proc = subprocess.Popen([*CLI, "kafka-monitor"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen = b""
    try:
        assert proc.stdout is not None
        while b"retrying in" not in seen:  # retrying: its stop handlers are installed by then
            line = proc.stdout.readline()  # (a fixed sleep lost that race on a loaded machine: -15)
            assert line, seen.decode()
            seen += line
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    text = (seen + out).decode()
    assert proc.returncode == 0, text
    assert "cannot reach Kafka at 127.0.0.1:1" in text and "check KAFKA_BOOTSTRAP_SERVERS" in text
    assert "retrying in" in text


# --- stats and heartbeats ---------------------------------------------------------------------------


def test_stats_and_heartbeat_are_written(
    monitor: KafkaMonitor, km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    keys = keys_for(names.key_prefix)
    assert live_nodes(redis_client, keys, COMPONENT) == {km_settings.node_name: [monitor.node_id]}
    produce(
        km_settings,
        encode(
            crawl("http://a.com/"),
            crawl("http://b.com/"),
            {"appid": "testapp", "uuid": "s1"},
            {"action": "info", "appid": "testapp", "spiderid": "link", "uuid": "i1"},
            {"nope": 1},
        )
        + [b"garbage"],
    )
    drain(monitor, 6)
    stats = Stats(redis_client, keys, km_settings.getlist("STATS_TIMES"))
    windows = [str(w) for w in km_settings.getlist("STATS_TIMES")]

    def window_map(n: int) -> dict[str, int]:
        return {**dict.fromkeys(windows, n), "lifetime": n}

    assert stats.read(COMPONENT, "total") == window_map(6)
    assert stats.read(COMPONENT, "fail") == window_map(2)
    assert stats.read(COMPONENT, "plugin:ScraperHandler") == window_map(2)
    assert stats.read(COMPONENT, "plugin:StatsHandler") == window_map(1)
    assert stats.read(COMPONENT, "plugin:ActionHandler") == window_map(1)
    assert stats.read(COMPONENT, "plugin:DomainConfigHandler") == {}
    monitor.teardown()
    assert live_nodes(redis_client, keys, COMPONENT) == {}


def test_first_signal_finishes_the_batch_second_forces(km_settings: Settings, redis_client: redis.Redis) -> None:
    km = KafkaMonitor(km_settings, redis_client)
    saved = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        km.install_signal_handlers()
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        handler(signal.SIGTERM, None)
        assert km.stopping
        with pytest.raises(ForcedShutdown):
            handler(signal.SIGINT, None)
        km.run()  # stopping before start: returns at once, nothing connected
        assert km.consumer is None
    finally:
        signal.signal(signal.SIGTERM, saved[0])
        signal.signal(signal.SIGINT, saved[1])


def test_broker_down_while_idle_is_reported_and_work_resumes_when_it_is_back(
    km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames, tmp_path: Path
) -> None:
    # In a child process: kafka-python leaks the socket of each reconnect attempt refused while the
    # broker is down (see utils/backends/kafka_clients.py), which pytest's warning filter would turn into errors.
    broker = EmbeddedBroker(free_port())  # a fixed port: clients keep the address across the restart
    keys = keys_for(names.key_prefix)
    log = tmp_path / "km.log"
    try:
        broker.start()
        settings = km_settings.copy_with(KAFKA_BOOTSTRAP_SERVERS=broker.bootstrap)
        env = _monitor_env(settings, tmp_path, HEARTBEAT_INTERVAL=0.5)
        with open(log, "wb") as out:
            proc = subprocess.Popen([*CLI, "kafka-monitor"], env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            produce(settings, encode(crawl("http://example.com/first")))
            _wait_for(lambda: queued(redis_client, keys, ["c1"], ["example.com"]) == 1, 20)
            broker.stop()  # in-memory storage: it comes back empty, as a new cluster
            _wait_for(lambda: "check KAFKA_BOOTSTRAP_SERVERS" in log.read_text(), 15)
            assert proc.poll() is None
            broker.start()
            produce(settings, encode(*(crawl(f"http://example.com/{i}") for i in range(20))))
            _wait_for(lambda: queued(redis_client, keys, ["c1"], ["example.com"]) == 21, 40)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0, log.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    finally:
        broker.close()


def test_new_crawl_requests_wait_while_the_tail_store_is_full(
    km_settings: Settings,
    redis_client: redis.Redis,
    names: IsolatedNames,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """docs/contract.md §23.6: while ``tail_full`` holds (a redis-monitor found more than
    FRONTIER_TAIL_BACKLOG_MAX requests waiting in Redis for an unwritable FRONTIER_TAIL_URL), the
    kafka-monitor reads no crawl request, with one WARNING naming FRONTIER_TAIL_URL; it reads them
    all once the marker is gone."""
    settings = km_settings.copy_with(FRONTIER_TAIL_URL=str(tmp_path / "tails"))
    keys = keys_for(names.key_prefix)
    redis_client.set(keys.tail_full(), "FRONTIER_TAIL_URL /nowhere: [Errno 28] No space left on device", ex=60)
    km = KafkaMonitor(settings, redis_client)
    km.setup()
    caplog.set_level(logging.WARNING)
    try:
        produce(settings, encode(*(crawl(f"http://example.com/{i}") for i in range(3))))
        deadline = time.monotonic() + 6  # several polls and marker checks: time to read them if it would
        while time.monotonic() < deadline:
            km.run_once()
        assert km.totals.records == 0
        assert queued(redis_client, keys, ["c1"], ["example.com"]) == 0
        ours = [r for r in caplog.records if r.name.startswith("crawlhive")]  # not kafka-python's timing notes
        warnings = [r.getMessage() for r in ours if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and "FRONTIER_TAIL_URL" in warnings[0] and "No space left" in warnings[0]
        redis_client.delete(keys.tail_full())
        drain(km, 3)
        assert queued(redis_client, keys, ["c1"], ["example.com"]) == 3
        assert len([r for r in caplog.records if r.name.startswith("crawlhive") and r.levelno >= logging.WARNING]) == 1
    finally:
        km.teardown()
