"""What the sink tests share: the real PostgreSQL (a test that cannot reach it fails), a table of
its own per test, records produced to a topic, a ``crawlhive sink`` subprocess, and a TCP relay that
takes PostgreSQL away from a sink and gives it back."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from crawlhive.utils.backends.kafka_clients import make_consumer, make_producer
from crawlhive.utils.config.settings import Settings
from support.crawler import CLI, crawler_env

#: The PostgreSQL of the tests (trust auth, database ``test``); CRAWLHIVE_TEST_POSTGRES_URL overrides.
POSTGRES_URL = os.environ.get("CRAWLHIVE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def postgres_or_fail() -> str:
    """POSTGRES_URL, after checking it answers (the test fails, never skips, without it)."""
    try:
        with psycopg.connect(POSTGRES_URL, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        pytest.fail(f"the sink tests need PostgreSQL at {POSTGRES_URL} (CRAWLHIVE_TEST_POSTGRES_URL): {exc}")
    return POSTGRES_URL


@pytest.fixture
def pg_table() -> Iterator[str]:
    """A table name of this test's own, dropped afterwards."""
    postgres_or_fail()
    name = f"t_{secrets.token_hex(6)}"
    yield name
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {name}")


def sink_url(table: str, base: str = POSTGRES_URL) -> str:
    return f"{base}?table={table}"


def rows(table: str, where: str = "") -> list[dict[str, Any]]:
    with psycopg.connect(POSTGRES_URL) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        cur.execute(f"SELECT * FROM {table} {where} ORDER BY appid, crawlid, url")
        return list(cur.fetchall())


def count(table: str) -> int:
    with psycopg.connect(POSTGRES_URL) as conn:
        try:
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        except psycopg.errors.UndefinedTable:
            return 0
    return int(row[0]) if row else 0


def cleaned(url: str, crawled_at: str = "2026-11-25T12:00:00.000000", **extra: Any) -> dict[str, Any]:
    """A cleaned record (docs/contract.md §13) as the cleaner produces it."""
    return {
        "appid": "sapp",
        "crawlid": "c1",
        "url": url,
        "response_url": url,
        "status_code": 200,
        "crawled_at": crawled_at,
        "cleaned_at": crawled_at,
        "title": f"title of {url}",
        "description": None,
        "text": f"text of {url}",
        "language": "en",
        "published": "2024-03-05",
        "content_hash": f"h-{url}",
        "pii_masked": 0,
        "attrs": None,
        **extra,
    }


def produce(settings: Settings, topic: str, values: list[bytes | dict[str, Any] | Any]) -> None:
    producer = make_producer(settings)
    try:
        for value in values:
            producer.send(topic, value if isinstance(value, bytes) else json.dumps(value).encode())
        producer.flush(timeout=20)
    finally:
        producer.close(timeout=5)


def produce_to_partitions(settings: Settings, topic: str, by_partition: dict[int, list[dict[str, Any]]]) -> None:
    """Produce each partition's JSON values to that partition of *topic*, in order."""
    producer = make_producer(settings)
    try:
        for partition, values in by_partition.items():
            for value in values:
                producer.send(topic, json.dumps(value).encode(), partition=partition)
        producer.flush(timeout=120)
    finally:
        producer.close(timeout=5)


def stop_sink(process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """SIGTERM a ``crawlhive sink`` and check it exits 0 (killed if it does not exit in time)."""
    process.send_signal(signal.SIGTERM)
    try:
        assert process.wait(timeout) == 0, log_of(process)[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def committed(settings: Settings, topic: str, group: str) -> int:
    """The sum over *topic*'s partitions of *group*'s committed offsets."""
    from crawlhive.utils.contract.kafka_errors import TopicPartition

    consumer = make_consumer(settings, group_id=group)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        return sum(consumer.committed(p) or 0 for p in parts)
    finally:
        consumer.close(autocommit=False)


def start_sink(settings: Settings, home: Path, url: str, *args: str, **overrides: Any) -> subprocess.Popen[bytes]:
    """A ``crawlhive sink`` process (SINK_URL in its environment) logging to a file under *home*."""
    path = home / f"sink-{time.monotonic_ns()}.log"
    with path.open("w") as log:
        command = [*CLI, "sink", *args, "--log-file", str(path)]
        env = crawler_env(settings, SINK_URL=url, **overrides)
        return subprocess.Popen(command, env=env, stdout=log, stderr=log)


def log_of(process: subprocess.Popen[bytes]) -> str:
    return Path(str(process.args[-1])).read_text()  # type: ignore[index]


def wait_until(what: str, check: Any, timeout: float = 60, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"sink exited ({process.returncode}) before {what}:\n{log_of(process)[-3000:]}")
        if time.monotonic() > deadline:
            extra = f"\n{log_of(process)[-3000:]}" if process is not None else ""
            raise AssertionError(f"timed out waiting for {what}{extra}")
        time.sleep(0.2)


class Relay:
    """A TCP relay from a loopback port to *target*: :meth:`down` closes every connection and stops
    listening (the store is gone, as when its host or network fails), :meth:`up` listens again."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() of its thread (Linux)
            except OSError:
                pass
            listener.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
