"""`crawlhive demo` as a user runs it: the whole cluster, one crawl to completion, a summary, exit 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from crawlhive.app.demo_site import expected_pages


def test_demo_crawls_the_bundled_site_to_completion_and_stops_cleanly(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS", "KAFKA_HOSTS")}
    env["CRAWLHIVE_HOME"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "crawlhive.app.cli", "demo"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    total = expected_pages()
    assert any(line.startswith("crawl demo-") and f"complete: {total} pages" in line for line in lines), out.stdout
    assert "status codes: 200: 333, 404: 3" in lines
    complete = json.loads(next(line for line in lines if line.startswith("complete event: ")).split(": ", 1)[1])
    assert complete["action"] == "complete" and complete["total_crawled"] == total and complete["total_failed"] == 0
    info = json.loads(next(line for line in lines if line.startswith("info answer: ")).split(": ", 1)[1])
    assert info["total_crawled"] == total and info["total_pending"] == 0 and info["total_inflight"] == 0
    sample = json.loads(next(line for line in lines if line.startswith("sample item: ")).split(": ", 1)[1])
    assert sample["status_code"] == 200 and sample["status_msg"] == "OK"
    # §13: a page of the crawl, cleaned by the cleaner `up`/`demo` start
    line = next(line for line in lines if line.startswith("cleaned record (demo.cleaned): "))
    cleaned = json.loads(line.split(": ", 1)[1])
    assert cleaned["appid"] == "demo" and cleaned["text"] and len(cleaned["content_hash"]) == 64
    assert not any("/dashboard" in line for line in lines)  # no link to a cluster that is stopping (§17.5)
    assert "crawlhive demo --keep-running" in lines[-1]
    assert any(line.startswith("next: your own Scrapy spiders") and "docs/spiders.md" in line for line in lines)
    assert "Traceback" not in out.stderr
    assert "SIGTERM" not in out.stderr  # one signal each: a graceful stop, never a forced one
    assert not (tmp_path / "up.json").exists()


def test_demo_keep_running_prints_a_working_dashboard_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    """docs/contract.md §17.1, §17.5: the dashboard URL only while it works; Ctrl-C to the group."""
    import re
    import signal
    import time

    import httpx

    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS", "KAFKA_HOSTS")}
    env["CRAWLHIVE_HOME"] = str(tmp_path)
    log = tmp_path / "demo.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "crawlhive.app.cli", "demo", "--keep-running"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 150
        while not (found := re.search(r"--keep-running: dashboard at (\S+);", log.read_text())):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        assert httpx.get(found.group(1), timeout=10).status_code == 200
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
        tail = log.read_text().split("--keep-running: dashboard at", 1)[1]
        assert not any(word in tail for word in ("WARNING", "ERROR", "Traceback")), tail
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
