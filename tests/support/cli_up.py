"""What the `crawlhive up` / `feed` / `dump` tests share: the environment of a test's own `up`, a
cluster started in the background (the ``cluster`` fixture, import it by name), `up` started as a
terminal starts it, sites to crawl, and checks that no process is left behind.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

CLI = [sys.executable, "-m", "crawlhive.app.cli"]


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


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


NOISE = ("WARNING", "ERROR", "CRITICAL", "Traceback")


def _start_up(tmp_path: Path, *args: str, **extra: str) -> tuple[subprocess.Popen[bytes], Path, dict[str, str]]:
    """`crawlhive up` as a terminal runs it: the leader of its own process group, output to a file."""
    env = _env(tmp_path)
    env.update(REST_PORT="0", CRAWLER_ALLOWED_NETWORKS='["127.0.0.0/8"]', **extra)
    log = tmp_path / "up.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*CLI, "up", *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + 90
    while "Ctrl-C stops everything" not in log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)
    return proc, log, env


def _slow_site() -> Any:
    from support.crawler import TestSite, html

    site = TestSite()
    site.start()

    def page(seen: Any) -> tuple[int, dict[str, str], bytes]:
        time.sleep(0.3)  # slow enough that the crawl is still running when Ctrl-C comes
        n = int(seen.path.rsplit("/", 1)[1] or 0)
        return 200, {"Content-Type": "text/html"}, html(*(f"/p/{n * 4 + i}" for i in range(1, 5)))

    site.handler("/p/0", page)
    for n in range(1, 400):
        site.handler(f"/p/{n}", page)
    return site


def _crawl_under_way(env: dict[str, str], site: Any, crawlid: str, log: Path) -> None:
    """Feed a crawl of *site* through the real `feed` and wait until its pages are being fetched."""
    request = {"url": site.url("/p/0"), "appid": "ctrlc", "crawlid": crawlid, "maxdepth": 3}
    fed = subprocess.run([*CLI, "feed", json.dumps(request)], env=env, capture_output=True, text=True, timeout=60)
    assert fed.returncode == 0, fed.stderr
    deadline = time.monotonic() + 60
    while len(site.hits("/p/")) < 3:
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)


def _all_gone(processes: list[int]) -> None:
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in processes if _alive(pid)]


def _kill_group(proc: subprocess.Popen[bytes] | None) -> None:
    """After a failed assertion: stop the whole `up` process group, so nothing outlives the test."""
    if proc is not None and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)


def _on_a_terminal(args: list[str], env: dict[str, str], until: str, timeout_s: float = 60) -> str:
    """Run a command with its stderr on a pseudo-terminal (as in a terminal) until *until* appears
    there, then Ctrl-C it; returns what it wrote on the terminal."""
    import pty
    import select

    leader, follower = pty.openpty()
    proc = subprocess.Popen([*CLI, *args], env=env, stdout=subprocess.DEVNULL, stderr=follower, start_new_session=True)
    os.close(follower)
    seen = b""
    try:
        deadline = time.monotonic() + timeout_s
        while until.encode() not in seen and time.monotonic() < deadline and proc.poll() is None:
            if select.select([leader], [], [], 0.2)[0]:
                try:
                    seen += os.read(leader, 4096)
                except OSError:
                    break
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    return seen.decode(errors="replace")


def _wait_until_connected(pid: int, timeout_s: float = 60) -> None:
    """Wait until process *pid* has an established TCP connection (its imports are done)."""
    import psutil

    deadline = time.monotonic() + timeout_s
    process = psutil.Process(pid)
    while not [c for c in process.net_connections("tcp") if c.status == psutil.CONN_ESTABLISHED]:
        assert time.monotonic() < deadline, f"process {pid} never connected"
        time.sleep(0.1)
    time.sleep(0.5)  # its subscription, after the first connection


def _up_with_a_dump_attached(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path, subprocess.Popen[bytes]]:
    tmp_path.mkdir()
    proc, log, env = _start_up(tmp_path)
    dump = subprocess.Popen(
        [*CLI, "dump", "crawled_firehose", "-nb"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    time.sleep(4)  # connected and polling (the broker now has a client that never hangs up)
    assert dump.poll() is None
    return proc, log, dump


def _tiny_site() -> Any:
    from support.crawler import TestSite, html

    site = TestSite()
    site.start()
    for path, links in (("/", ("/a", "/b")), ("/a", ()), ("/b", ())):
        text = "".join(
            f"<p>Paragraph {i} of the page {path} tells how river number {i} reached the sea after {i * 7} days.</p>"
            for i in range(12)
        )
        site.page(path, html(*links, title=f"The page {path}", extra=f"<article>{text}</article>"))
    return site


def _lines_in(folder: Path) -> list[dict[str, Any]]:
    files = [p for p in folder.rglob("*.jsonl.gz") if not p.name.startswith(".")]
    return [json.loads(line) for p in files for line in gzip.decompress(p.read_bytes()).splitlines()]


def _feed(env: dict[str, str], request: dict[str, Any], *wait: str) -> str:
    fed = subprocess.run(
        [*CLI, "feed", json.dumps(request), *wait], env=env, capture_output=True, text=True, timeout=90
    )
    assert fed.returncode == 0, fed.stdout + fed.stderr
    return fed.stdout
