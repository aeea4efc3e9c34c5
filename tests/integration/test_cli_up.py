"""`crawlhive up` / `feed` / `dump` as a user runs them, in separate processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "crawlhive.utils.app.cli"]


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS", "KAFKA_HOSTS")}
    env["CRAWLHIVE_HOME"] = str(home)
    env["KAFKA_TOPIC_PREFIX"] = "clitest"
    return env


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.fixture
def cluster(tmp_path: Path):
    env = _env(tmp_path)
    proc = subprocess.Popen([*CLI, "up"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "Ctrl-C stops everything" in line:
            break
    assert (tmp_path / "up.json").exists(), "".join(lines)
    yield proc, env, lines
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    proc.stdout.close()


def test_feed_in_a_second_terminal_reaches_up_and_dump_shows_it(cluster) -> None:
    proc, env, lines = cluster
    assert any("crawlhive up: Redis redis://127.0.0.1:" in line for line in lines)
    assert any("crawlhive up: Kafka 127.0.0.1:" in line for line in lines)
    assert any("crawlhive up: REST http://127.0.0.1:" in line for line in lines)  # loopback by default
    assert any("crawlers may fetch from this machine (127.0.0.0/8, ::1/128)" in line for line in lines)
    request = {"url": "http://example.com/", "appid": "testapp", "crawlid": "abc123"}
    fed = subprocess.run([*CLI, "feed", json.dumps(request)], env=env, capture_output=True, text=True, timeout=60)
    assert fed.returncode == 0, fed.stderr
    assert "sent to clitest.incoming" in fed.stderr
    dumped = subprocess.run(
        [*CLI, "dump", "incoming", "-b", "-n", "1"], env=env, capture_output=True, text=True, timeout=60
    )
    assert dumped.returncode == 0, dumped.stderr
    assert json.loads(dumped.stdout.strip()) == request


def test_ctrl_c_stops_everything_and_leaves_no_process(cluster) -> None:
    proc, env, lines = cluster
    state = json.loads((Path(env["CRAWLHIVE_HOME"]) / "up.json").read_text())
    assert state["pid"] == proc.pid
    children = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _ppid(int(p.name)) == proc.pid]
    assert len(children) >= 2  # redis-server and the broker
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in children)
    assert not (Path(env["CRAWLHIVE_HOME"]) / "up.json").exists()


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def test_feed_reports_bad_json_and_unreachable_kafka(tmp_path: Path) -> None:
    env = _env(tmp_path)
    bad = subprocess.run([*CLI, "feed", "{nope"], env=env, capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1 and "invalid JSON" in bad.stderr
    env["KAFKA_BOOTSTRAP_SERVERS"] = "127.0.0.1:1"
    down = subprocess.run(
        [*CLI, "feed", '{"a": 1}', "--no-validate"], env=env, capture_output=True, text=True, timeout=30
    )
    assert down.returncode == 2 and "KAFKA_BOOTSTRAP_SERVERS" in down.stderr


def test_up_refuses_a_public_rest_address_without_a_key_before_starting_anything(tmp_path: Path) -> None:
    env = _env(tmp_path)
    env.update(REST_HOST="0.0.0.0", REST_API_KEY="", REST_INSECURE="false")
    out = subprocess.run([*CLI, "up"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "REST_API_KEY" in out.stderr and "REST_INSECURE" in out.stderr
    assert "started embedded" not in out.stderr and not (tmp_path / "up.json").exists()


def test_bad_setting_is_named_and_exits_1(tmp_path: Path) -> None:
    env = _env(tmp_path)
    env["QUEUE_HITS"] = "ten"
    out = subprocess.run([*CLI, "dump", "incoming"], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert "QUEUE_HITS: expected an integer, got 'ten'" in out.stderr


def test_feed_validates_like_the_kafka_monitor(tmp_path: Path) -> None:
    env = _env(tmp_path)
    env["KAFKA_BOOTSTRAP_SERVERS"] = "127.0.0.1:1"  # never reached: validation fails first
    request = '{"url": "http://example.com/", "appid": "ab", "crawlid": "x"}'
    out = subprocess.run([*CLI, "feed", request], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert "crawl: 'ab' is too short (at /appid)" in out.stderr


def test_no_password_is_printed_or_logged_and_up_json_is_private(tmp_path: Path, kafka_bootstrap: str) -> None:
    """docs/contract.md §10.6, through the real commands at LOG_LEVEL=DEBUG (kafka-python logs its
    whole configuration then): the password of REDIS_URL appears nowhere but in up.json, which only
    its owner can read."""
    import redis

    from crawlhive.utils.app.embedded import EmbeddedRedis

    password = "pw-" + os.urandom(6).hex()
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        client.config_set("requirepass", password)
        try:
            env = _env(tmp_path)
            env.update(
                REDIS_URL=f"redis://:{password}@127.0.0.1:{server.port}/0",
                KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
                LOG_LEVEL="DEBUG",
                REST_PORT="0",
            )
            log = tmp_path / "up.log"  # a file, not a pipe: DEBUG output would fill a pipe and block `up`
            with open(log, "w") as out:
                proc = subprocess.Popen([*CLI, "up", "--duration", "8"], env=env, stdout=out, stderr=subprocess.STDOUT)
                try:
                    state = tmp_path / "up.json"
                    deadline = time.monotonic() + 60
                    while not state.exists():
                        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                        time.sleep(0.05)
                    assert state.stat().st_mode & 0o777 == 0o600
                    assert password in state.read_text()  # other crawlhive commands need it
                    assert proc.wait(90) == 0, log.read_text()[-3000:]
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
            output = log.read_text()
            assert "crawlhive up: Redis redis://:***@127.0.0.1:" in output
            assert password not in output, [line for line in output.splitlines() if password in line][:5]

            env["REDIS_URL"] = f"redis://:wrong-{password}@127.0.0.1:{server.port}/0"
            env["LOG_LEVEL"] = "INFO"
            monitor = subprocess.Popen(
                [*CLI, "redis-monitor"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            try:
                time.sleep(4)  # it retries with back-off, logging what to check
                monitor.terminate()
                refused, _ = monitor.communicate(timeout=30)
            finally:
                if monitor.poll() is None:
                    monitor.kill()
                    monitor.communicate()
            assert "REDIS_URL" in refused and "***" in refused, refused[-2000:]
            assert password not in refused
        finally:
            client.config_set("requirepass", "")
            client.close()
