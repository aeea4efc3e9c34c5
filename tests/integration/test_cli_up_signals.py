"""`crawlhive up` / `feed` / `dump` stopped as a user stops them: Ctrl-C to the terminal's process
group (once, twice, with a dump attached, with a file sink), and how quiet they are meanwhile.
(The cluster, feed and dump themselves: test_cli_up.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from support.cli_up import (
    CLI,
    NOISE,
    _alive,
    _all_gone,
    _crawl_under_way,
    _feed,
    _kill_group,
    _lines_in,
    _on_a_terminal,
    _ppid,
    _slow_site,
    _start_up,
    _tiny_site,
    _up_with_a_dump_attached,
    cluster,
)
from support.crawler import descendants

# the fixtures imported from support.cli_up: pytest finds them here
__all__ = ["cluster"]


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


def test_ctrl_c_to_the_terminal_s_process_group_during_a_crawl_is_quiet_and_clean(tmp_path: Path) -> None:
    """docs/contract.md §17.1, §17.4: SIGINT to the whole foreground group (as a terminal sends it)
    while a crawl runs: exit 0 within 30 s, no WARNING/ERROR/traceback, nothing left running; and
    the start-up output is short and ends with the summary."""
    site = _slow_site()
    proc = None
    try:
        proc, log, env = _start_up(tmp_path)
        startup = log.read_text().splitlines()
        assert len(startup) <= 30, "\n".join(startup)
        assert startup[-1].startswith("crawlhive up: components:") and "Ctrl-C" in startup[-1]
        assert not [line for line in startup if any(word in line for word in NOISE)], startup
        _crawl_under_way(env, site, "c1", log)
        processes = descendants(proc.pid)
        assert len(processes) >= 6  # Redis, broker, two monitors, a crawler, REST
        before = len(log.read_text().splitlines())
        started = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
        assert time.monotonic() - started <= 30
        shutdown = log.read_text().splitlines()[before:]
        assert not [line for line in shutdown if any(word in line for word in NOISE)], "\n".join(shutdown)
        assert shutdown[-1] == "crawlhive up: stopped"
        _all_gone(processes)
    finally:
        _kill_group(proc)
        site.stop()


def test_a_second_ctrl_c_forces_the_stop_and_leaves_no_process(tmp_path: Path) -> None:
    site = _slow_site()
    proc = None
    try:
        proc, log, env = _start_up(tmp_path)
        _crawl_under_way(env, site, "c2", log)
        processes = descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 130, log.read_text()[-3000:]
        _all_gone(processes)
    finally:
        _kill_group(proc)
        site.stop()


def test_up_is_short_at_start_and_quiet_while_idle(tmp_path: Path) -> None:
    """docs/contract.md §17.4: at most 30 lines until 20 s after ready, at most 5 a minute idle,
    even with the dashboard open (it polls every 2 s). Measured together: the summary comes once
    every component is ready, and the 30 s after it may add at most 2 lines."""
    import httpx

    proc, log, _ = _start_up(tmp_path)
    try:
        startup = log.read_text().splitlines()
        rest = next(line for line in startup if line.startswith("crawlhive up: REST "))
        base = rest.split()[3].rstrip("/")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert httpx.get(f"{base}/dashboard/data", timeout=5).status_code == 200
            time.sleep(2)
        lines = log.read_text().splitlines()
        assert len(lines) <= 30, "\n".join(lines)
        idle = lines[len(startup) :]
        assert len(idle) <= 2, "\n".join(idle)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 0


def test_feed_wait_and_dump_are_quiet_and_ctrl_c_ends_them_cleanly(cluster) -> None:
    """docs/contract.md §17.2, §17.3: ten answered `feed --wait` and ten `dump` stopped by Ctrl-C
    print nothing noisy; `dump` exits 0 and an interrupted `feed --wait` 130."""
    _, env, _ = cluster

    def run(args: list[str], interrupt_after: float | None, **extra: str) -> tuple[int, str]:
        proc = subprocess.Popen(
            [*CLI, *args],
            env={**env, **extra},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        if interrupt_after is not None:
            time.sleep(interrupt_after)
            os.killpg(proc.pid, signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
        return proc.returncode, output

    for i in range(10):
        request = {"action": "info", "appid": "quiet", "crawlid": "c1", "spiderid": "link", "uuid": f"q{i}"}
        code, output = run(["feed", json.dumps(request), "--wait", "20"], None)
        assert code == 0 and f'"uuid":"q{i}"' in output.replace(" ", ""), output
        assert not [line for line in output.splitlines() if any(w in line for w in NOISE)], output
        # once it says it is reading (its imports took over 2.5 s on a loaded CI machine); exit 0 is
        # checked by _on_a_terminal
        shown = _on_a_terminal(["dump", "incoming"], env, "waiting for records")
        assert "waiting for records" in shown, shown
        assert not [line for line in shown.splitlines() if any(w in line for w in NOISE)], shown
    unanswered = {"action": "info", "appid": "quiet", "crawlid": "c1", "spiderid": "link", "uuid": "never"}
    code, output = run(["feed", json.dumps(unanswered), "--wait", "60"], 3.0, KAFKA_TOPIC_PREFIX="nobodyhome")
    assert code == 130 and "interrupted while waiting" in output, output
    assert "Traceback" not in output


def test_ctrl_c_with_a_dump_attached_is_prompt_and_quiet_and_a_second_one_stops_at_once(tmp_path: Path) -> None:
    """The broker (Tansu) waits about 5 s for its clients to hang up after SIGTERM; a `dump` in
    another terminal never does. `up` stops it promptly, without a WARNING (its memory storage is
    gone either way), and a second Ctrl-C kills what is left at once."""
    proc, log, dump = _up_with_a_dump_attached(tmp_path / "one")
    try:
        before = len(log.read_text().splitlines())
        started = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        took = time.monotonic() - started
        shutdown = log.read_text().splitlines()[before:]
        assert not [line for line in shutdown if any(word in line for word in NOISE)], "\n".join(shutdown)
        assert took < 4.5, f"{took:.1f}s\n" + "\n".join(shutdown)
        assert dump.wait(timeout=30) == 1  # its cluster is gone: it says so and exits
    finally:
        _kill_group(proc)
        _kill_group(dump)

    proc, log, dump = _up_with_a_dump_attached(tmp_path / "two")
    try:
        processes = descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.3)
        forced = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        took = time.monotonic() - forced
        assert took < 2.0, f"{took:.1f}s after the second Ctrl-C\n" + log.read_text()[-3000:]
        output = log.read_text()
        assert "second SIGINT: stopping now" in output
        after = output.split("stopping now", 1)[1].splitlines()[1:]
        assert not [line for line in after if any(word in line for word in NOISE)], "\n".join(after)
        _all_gone(processes)
    finally:
        _kill_group(proc)
        _kill_group(dump)


def test_ctrl_c_of_up_writes_what_its_file_sink_holds(tmp_path: Path) -> None:
    """A file sink holding records when `up` is stopped (a roll an hour away) writes them and
    commits them before the cluster goes; until then `stats sink` counts them as buffered, not written."""
    site = _tiny_site()
    proc = None
    pages = tmp_path / "pages"
    try:
        proc, log, env = _start_up(tmp_path, "--sink", f"file://{pages}/", SINK_ROLL_SECONDS="3600")
        _feed(env, {"url": site.url("/"), "appid": "held", "crawlid": "h1", "maxdepth": 1})
        deadline = time.monotonic() + 90
        while True:
            answer = json.loads(
                _feed(env, {"stats": "sink", "appid": "held", "uuid": f"s{time.monotonic_ns()}"}, "--wait", "30")
            )
            sinks = answer.get("data", answer).get("sinks", {})
            if sinks and sum(int(s.get("buffered") or 0) for s in sinks.values()) >= 3:
                break
            assert time.monotonic() < deadline, (answer, log.read_text()[-3000:])
            time.sleep(1)
        assert all(int((s.get("written") or {}).get("lifetime", 0)) == 0 for s in sinks.values()), sinks
        assert _lines_in(pages) == []
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        _kill_group(proc)
        site.stop()
    assert sorted(line["url"] for line in _lines_in(pages)) == sorted(site.url(p) for p in ("/", "/a", "/b"))
    assert not [line for line in log.read_text().splitlines() if any(word in line for word in NOISE)]
