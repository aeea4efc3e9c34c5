"""`crawlhive up` / `feed` / `dump` as a user runs them, in separate processes: a cluster, what
is fed to it and dumped from it, what `up` refuses, outages and an `up` that went away.
(Ctrl-C, signals and the terminal: test_cli_up_signals.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support.cli_up import (
    CLI,
    NOISE,
    _env,
    _feed,
    _kill_group,
    _lines_in,
    _on_a_terminal,
    _ppid,
    _start_up,
    _tiny_site,
    _wait_until_connected,
    cluster,
)

from crawlhive.app.up import UP_CLEANER_SESSION_TIMEOUT_MS

# the fixtures imported from support.cli_up: pytest finds them here
__all__ = ["cluster"]


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


def test_feed_reports_bad_json_and_unreachable_kafka(tmp_path: Path) -> None:
    env = _env(tmp_path)
    bad = subprocess.run([*CLI, "feed", "{nope"], env=env, capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1 and "invalid JSON" in bad.stderr
    # A bare URL: the two ways to send it, ready to copy.
    url = subprocess.run([*CLI, "feed", "http://127.0.0.1:8000/"], env=env, capture_output=True, text=True, timeout=30)
    assert url.returncode == 1 and "bare URL" in url.stderr, url.stderr
    assert """crawlhive feed '{"url": "http://127.0.0.1:8000/", "appid": "myapp", "crawlid": "c1"}'""" in url.stderr
    assert "--file urls.txt --appid myapp --crawlid c1" in url.stderr
    env["KAFKA_BOOTSTRAP_SERVERS"] = "127.0.0.1:1"
    down = subprocess.run(
        [*CLI, "feed", '{"a": 1}', "--no-validate"], env=env, capture_output=True, text=True, timeout=30
    )
    assert down.returncode == 2 and "KAFKA_BOOTSTRAP_SERVERS" in down.stderr


def test_feed_and_dump_without_a_cluster_say_to_start_one_and_exit_2(tmp_path: Path) -> None:
    """No `crawlhive up` runs and no address is set: both say so, how to start one, and exit 2."""
    env = _env(tmp_path)
    for args in (["feed", '{"a": 1}', "--no-validate"], ["dump", "incoming", "-n", "1"]):
        out = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, (args, out.stderr)
        assert "no crawlhive up is running" in out.stderr and "`crawlhive up` in another terminal" in out.stderr
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_up_refuses_a_public_rest_address_without_a_key_before_starting_anything(tmp_path: Path) -> None:
    env = _env(tmp_path)
    env.update(REST_HOST="0.0.0.0", REST_API_KEY="", REST_INSECURE="false")
    out = subprocess.run([*CLI, "up"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "REST_API_KEY" in out.stderr and "REST_INSECURE" in out.stderr
    assert "started embedded" not in out.stderr and not (tmp_path / "up.json").exists()


def test_up_refuses_a_sink_it_cannot_write_before_starting_anything(tmp_path: Path) -> None:
    """A --sink whose database does not exist: exit 2 at once, naming the URL (password masked)
    and PostgreSQL's error, with nothing started (it used to restart the sink forever)."""
    env = _env(tmp_path)
    url = "postgresql://postgres:s3cret-pw@127.0.0.1:5432/no_such_db_crawlhive?table=pages"
    out = subprocess.run([*CLI, "up", "--sink", url], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "--sink postgresql://postgres:***@127.0.0.1:5432/no_such_db_crawlhive" in out.stderr, out.stderr
    assert "does not exist" in out.stderr and "s3cret-pw" not in out.stdout + out.stderr
    assert "started" not in out.stdout + out.stderr and not (tmp_path / "up.json").exists()
    folder = tmp_path / "not-a-folder"
    folder.write_text("a file where the sink's folder should be")
    out = subprocess.run(
        [*CLI, "up", "--sink", f"file://{folder}/?format=jsonl"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and f"--sink file://{folder}/?format=jsonl cannot be written" in out.stderr, out.stderr


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

    from crawlhive.app.embedded import EmbeddedRedis

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
                    while not state.exists() or "REDIS_URL" not in state.read_text():  # claimed, then written
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
            monitor_log = tmp_path / "refused.log"
            with monitor_log.open("w") as out:
                monitor = subprocess.Popen([*CLI, "redis-monitor"], env=env, stdout=out, stderr=subprocess.STDOUT)
            try:  # it retries with back-off, logging what to check (its start may take seconds on a loaded machine)
                deadline = time.monotonic() + 30
                while "REDIS_URL" not in monitor_log.read_text() and time.monotonic() < deadline:
                    time.sleep(0.2)
                monitor.terminate()
                monitor.wait(timeout=30)
            finally:
                if monitor.poll() is None:
                    monitor.kill()
                    monitor.wait()
            refused = monitor_log.read_text()
            assert "REDIS_URL" in refused and "***" in refused, refused[-2000:]
            assert password not in refused
        finally:
            client.config_set("requirepass", "")
            client.close()


def test_dump_says_what_it_waits_for_and_refuses_a_topic_that_does_not_exist(cluster) -> None:
    _, env, _ = cluster
    shown = _on_a_terminal(["dump", "incoming"], env, "waiting for records")
    assert "dump: waiting for records on clitest.incoming" in shown, shown
    # Piped (a script): nothing but the records.
    quiet = subprocess.Popen(
        [*CLI, "dump", "incoming"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    _wait_until_connected(quiet.pid)  # it says nothing when piped: reading is when it talks to the broker
    os.killpg(quiet.pid, signal.SIGINT)
    out, err = quiet.communicate(timeout=30)
    assert (quiet.returncode, out, err) == (0, b"", b""), err
    started = time.monotonic()
    missing = subprocess.run([*CLI, "dump", "nosuchtopic"], env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1, missing.stderr
    assert "dump: no topic nosuchtopic on 127.0.0.1:" in missing.stderr
    assert "topics of prefix 'clitest': " in missing.stderr and "incoming" in missing.stderr
    assert time.monotonic() - started < 30
    # It was not created by asking.
    again = subprocess.run([*CLI, "dump", "nosuchtopic"], env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 1


def test_a_second_up_refuses_while_the_first_runs_and_never_takes_its_record(cluster, tmp_path: Path) -> None:
    """A second `up` on the same CRAWLHIVE_HOME would start a second cluster and take up.json (and
    with it every other command) over: it refuses before starting anything, names the running one
    and how to run another beside it; the first keeps its record and its commands."""
    proc, env, _ = cluster
    state_file = Path(env["CRAWLHIVE_HOME"]) / "up.json"
    before = state_file.read_text()
    second = subprocess.run([*CLI, "up"], env=env, capture_output=True, text=True, timeout=60)
    assert second.returncode == 1, second.stdout + second.stderr
    assert f"a crawlhive up is already running (pid {proc.pid}; Redis redis://127.0.0.1:" in second.stderr
    assert "CRAWLHIVE_HOME=/tmp/other crawlhive up" in second.stderr
    assert "started" not in second.stdout + second.stderr  # nothing was started
    assert state_file.read_text() == before and proc.poll() is None
    fed = subprocess.run(
        [*CLI, "feed", '{"url": "http://example.com/", "appid": "second", "crawlid": "s1"}'],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert fed.returncode == 0, fed.stderr

    # Another home runs a second cluster beside it; it never touches the first one's record.
    other = {**env, "CRAWLHIVE_HOME": str(tmp_path / "other"), "REST_PORT": "0"}
    beside = subprocess.Popen(
        [*CLI, "up", "--duration", "1"], env=other, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    output, _ = beside.communicate(timeout=120)
    assert beside.returncode == 0, output
    assert state_file.read_text() == before and not (tmp_path / "other" / "up.json").exists()

    # A record that is not its own (another pid and nonce) is never removed by `up` on exit.
    foreign = {**json.loads(before), "pid": os.getpid(), "nonce": "not-its-own"}
    state_file.write_text(json.dumps(foreign))
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0
    assert json.loads(state_file.read_text()) == foreign


def test_commands_that_used_an_up_that_exited_say_so_once_and_exit_1(tmp_path: Path) -> None:
    """The tour's background commands (a crawler, `dump`, and any component started by hand) take
    their addresses from up.json. When that `up` stops, its Redis and broker are gone for good: each
    says so in one line and exits 1, instead of retrying forever (1,564 lines and 71 tracebacks in
    40 s from the tour's crawler; `dump` looping on ECONNREFUSED)."""
    proc, log, env = _start_up(tmp_path, "--crawlers", "0", "--cleaners", "0")
    commands = {
        "crawler": ["crawler", "--spider", "link"],
        "dump": ["dump", "incoming"],
        "kafka-monitor": ["kafka-monitor"],
        "redis-monitor": ["redis-monitor"],
        "cleaner": ["cleaner"],
        "rest": ["rest", "--port", "0"],
    }
    running: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    try:
        for name, args in commands.items():
            out = tmp_path / f"{name}.log"
            with out.open("wb") as sink:
                running[name] = (
                    subprocess.Popen(
                        [*CLI, *args], env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
                    ),
                    out,
                )
        ready = {
            "crawler": "crawling spider type",
            "kafka-monitor": "consuming",
            "redis-monitor": "reading",
            "cleaner": "consuming",
            "rest": "REST service on",
        }
        deadline = time.monotonic() + 90
        for name, text in ready.items():
            while text not in running[name][1].read_text():
                assert running[name][0].poll() is None and time.monotonic() < deadline, running[name][1].read_text()
                time.sleep(0.2)
        time.sleep(3)  # dump is polling too
        marks = {name: len(out.read_text().splitlines()) for name, (_, out) in running.items()}
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
        stopped = time.monotonic()
        for name, (child, out) in running.items():
            assert child.wait(timeout=max(1.0, stopped + 45 - time.monotonic())) == 1, out.read_text()[-3000:]
            after = out.read_text().splitlines()[marks[name] :]
            assert len(after) == 1, f"{name}:\n" + "\n".join(after[:40])
            assert after[0].startswith(f"crawlhive {name}: the crawlhive up whose Redis and broker"), after[0]
            assert "is gone" in after[0] and "start `crawlhive up`" in after[0]
        assert time.monotonic() - stopped < 45
    finally:
        for child, _ in running.values():
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
        _kill_group(proc)


def test_a_crawler_whose_up_is_gone_exits_even_while_its_redis_and_broker_answer(
    tmp_path: Path, redis_url: str, kafka_bootstrap: str
) -> None:
    """A crawler on the addresses of up.json notices that `up` is gone without waiting for a failed
    call: in the README tour a crawler whose calls never failed ran on 45 s after `up` exited
    (1 run in 5). Here its Redis and broker keep answering (they are the test's), so only the
    record says `up` is gone: removing it must end the crawler with the one line, exit 1."""
    from crawlhive.app.state import write_state

    write_state(tmp_path, redis_url, [kafka_bootstrap])  # an `up` that is this test process
    env = _env(tmp_path)
    out = tmp_path / "crawler.log"
    with out.open("wb") as sink:
        child = subprocess.Popen(
            [*CLI, "crawler", "--spider", "link"],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while "crawling spider type" not in out.read_text():
            assert child.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.2)
        mark = len(out.read_text().splitlines())
        (tmp_path / "up.json").unlink()  # `up` exited
        assert child.wait(timeout=30) == 1, out.read_text()[-3000:]
        after = out.read_text().splitlines()[mark:]
        assert len(after) == 1, "\n".join(after[:40])
        assert after[0].startswith("crawlhive crawler: the crawlhive up whose Redis and broker"), after[0]
        assert "is gone: it has exited and removed" in after[0]
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "not-persistent"])
def test_a_passing_redis_outage_is_one_warning_per_component_and_no_traceback(
    persistent: bool, tmp_path: Path, kafka_bootstrap: str
) -> None:
    """Addresses the user set are retried for ever, but quietly: one WARNING when Redis stops
    answering, one INFO line when it is back, no traceback (the crawler wrote one a second).
    A Redis without persistence comes back empty: the redis-monitor creates its consumer group
    again, with one more WARNING saying so (it used to exit on ``NOGROUP``)."""
    from crawlhive.app.embedded import EmbeddedRedis

    with EmbeddedRedis(appendonly=persistent) as server:
        env = _env(tmp_path)
        env.update(REDIS_URL=server.url, KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap, HEARTBEAT_INTERVAL="1")
        env["KAFKA_TOPIC_PREFIX"] = f"outage{os.getpid()}"
        running: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        try:
            for name, args, ready in (
                ("crawler", ["crawler", "--spider", "link"], "crawling spider type"),
                ("redis-monitor", ["redis-monitor"], "reading"),
            ):
                out = tmp_path / f"{name}.log"
                with out.open("wb") as sink:
                    child = subprocess.Popen([*CLI, *args], env=env, stdout=sink, stderr=subprocess.STDOUT)
                running[name] = (child, out)
                deadline = time.monotonic() + 60
                while ready not in out.read_text():
                    assert child.poll() is None and time.monotonic() < deadline, out.read_text()
                    time.sleep(0.2)
            marks = {name: len(out.read_text().splitlines()) for name, (_, out) in running.items()}
            server.stop()
            time.sleep(8)
            server.restart()
            time.sleep(12)  # back-off of at most 10 s, then the next call succeeds
            for name, (child, out) in running.items():
                assert child.poll() is None, out.read_text()[-3000:]
                after = out.read_text().splitlines()[marks[name] :]
                noisy = [line for line in after if any(word in line for word in NOISE)]
                if name == "redis-monitor" and not persistent:
                    regrouped = [line for line in noisy if "had no consumer group" in line]
                    assert len(regrouped) == 1 and "WARNING" in regrouped[0], (name, after[:40])
                    noisy.remove(regrouped[0])
                assert len(noisy) == 1 and "WARNING" in noisy[0] and "REDIS_URL" in noisy[0], (name, after[:40])
                assert any("again after" in line and "INFO" in line for line in after), (name, after[:40])
        finally:
            for child, _ in running.values():
                if child.poll() is None:
                    child.terminate()
                    child.wait(30)


def test_the_tours_file_sink_writes_files_within_seconds(tmp_path: Path) -> None:
    """`up --sink file:///…/` (the README tour): the cleaned pages are in a file seconds after
    they are crawled (the sink's roll time under `up` is short), not after 5 minutes."""
    site = _tiny_site()
    proc = None
    pages = tmp_path / "pages"
    try:
        proc, log, env = _start_up(tmp_path, "--sink", f"file://{pages}/")
        _feed(env, {"url": site.url("/"), "appid": "tour", "crawlid": "f1", "maxdepth": 1})
        deadline = time.monotonic() + 90
        while len(_lines_in(pages)) < 3:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        assert sorted(line["url"] for line in _lines_in(pages)) == sorted(site.url(p) for p in ("/", "/a", "/b"))
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        _kill_group(proc)
        site.stop()
    assert not [line for line in log.read_text().splitlines() if any(word in line for word in NOISE)]


def test_feed_in_another_terminal_validates_with_the_settings_up_was_started_with(tmp_path: Path) -> None:
    """`up` started with a lower RECRAWL_MIN_EVERY (and its own topic prefix): `feed` in a terminal
    without them accepts what the cluster accepts, sends to the cluster's topics, and names the
    settings it used when it refuses."""
    proc = None
    try:
        proc, log, env = _start_up(tmp_path, RECRAWL_MIN_EVERY="5", KAFKA_TOPIC_PREFIX="sharedtour")
        other = {k: v for k, v in env.items() if k not in ("RECRAWL_MIN_EVERY", "KAFKA_TOPIC_PREFIX")}
        request = {"url": "http://127.0.0.1:9/", "appid": "shared", "crawlid": "r1", "recrawl": {"every": 10}}
        fed = subprocess.run([*CLI, "feed", json.dumps(request)], env=other, capture_output=True, text=True, timeout=60)
        assert fed.returncode == 0 and "sent to sharedtour.incoming" in fed.stderr, fed.stderr
        request["recrawl"] = {"every": 2}
        fed = subprocess.run([*CLI, "feed", json.dumps(request)], env=other, capture_output=True, text=True, timeout=60)
        assert fed.returncode == 1, fed.stderr
        assert "validated with the settings of the running crawlhive up: " in fed.stderr, fed.stderr
        assert "RECRAWL_MIN_EVERY=5" in fed.stderr and "KAFKA_TOPIC_PREFIX=sharedtour" in fed.stderr
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        _kill_group(proc)


def _children_env(up_pid: int) -> dict[str, dict[str, str]]:
    """The environment of each component `up` runs, by its command (``cleaner``, ``kafka-monitor``…)."""
    found: dict[str, dict[str, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or _ppid(int(entry.name)) != up_pid:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"crawlhive.app.cli" in argv:
            kind = argv[argv.index(b"crawlhive.app.cli") + 1].decode()
            found[kind] = dict(item.decode().split("=", 1) for item in environ if b"=" in item)
    return found


@pytest.mark.parametrize("chosen", [None, "7000"])
def test_up_gives_its_cleaners_a_short_session_on_the_embedded_broker_unless_one_is_chosen(
    tmp_path: Path, chosen: str | None
) -> None:
    """On the embedded broker, which holds every join of a group half its session timeout, `up`
    starts its cleaners with KAFKA_SESSION_TIMEOUT_MS 2000 (a cleaner started or restarted cleans
    within 2 s); the other components keep theirs, and a value the user
    chose wins everywhere."""
    proc, log, _ = _start_up(tmp_path, **({"KAFKA_SESSION_TIMEOUT_MS": chosen} if chosen else {}))
    try:
        children = _children_env(proc.pid)
        assert {"cleaner", "kafka-monitor", "crawler"} <= set(children), children.keys()
        assert children["cleaner"].get("KAFKA_SESSION_TIMEOUT_MS") == (chosen or str(UP_CLEANER_SESSION_TIMEOUT_MS))
        assert children["kafka-monitor"].get("KAFKA_SESSION_TIMEOUT_MS") == chosen
        assert children["crawler"].get("KAFKA_SESSION_TIMEOUT_MS") == chosen
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(60) == 0, log.read_text()[-3000:]
    finally:
        _kill_group(proc)
    assert not [line for line in log.read_text().splitlines() if any(word in line for word in NOISE)]
