"""A new process kind, built out of crawlhive's tree, is observed by the real services (docs/extending.md).

The example kind of docs/extending.md (its package, its view and its entry point, written from the
page: ``support.kinds``) is installed in a folder outside the repository and handed to real
``crawlhive kafka-monitor``, ``crawlhive redis-monitor`` and ``crawlhive rest`` processes on their
PYTHONPATH only. None of them names the kind: each finds it through the ``crawlhive.kinds`` entry
points and loads its view by the dotted path it declares. A user asks, through REST, for the
kind's stats types (validated by REST and the kafka-monitor, answered by the redis-monitor), then
reads its metric on ``/metrics`` and its card in the dashboard's data and on the page (headless
Chromium, as tests/integration/test_rest_dashboard.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from support.kinds import install_example

from crawlhive.app.embedded import free_port
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings, settings_env
from crawlhive.utils.state.heartbeat import Heartbeat, new_node_id
from crawlhive.utils.state.stats import Stats

pytestmark = pytest.mark.timeout(120)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]

#: The example kind's component and the stats type its view adds (docs/extending.md).
KIND = "hello-sink"
GREETINGS = "greetings"


@pytest.fixture
def services(settings: Settings, tmp_path: Path) -> Iterator[str]:
    """A kafka-monitor, a redis-monitor and a REST service, each in a process of its own with the
    example on its PYTHONPATH; yields REST's base URL. Stopped with SIGTERM (then killed)."""
    example = install_example(tmp_path / "site")
    port = free_port("127.0.0.1")
    env = {
        **os.environ,
        **settings_env(settings),
        "PYTHONPATH": os.pathsep.join(p for p in (str(example), os.environ.get("PYTHONPATH", "")) if p),
        "HEARTBEAT_INTERVAL": "1",
        "REDIS_MONITOR_BLOCK_MS": "100",
        "CRAWLHIVE_HOME": str(tmp_path / "home"),
    }
    argvs = [["kafka-monitor"], ["redis-monitor"], ["rest", "--host", "127.0.0.1", "--port", str(port)]]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "crawlhive.app.cli", *argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for argv in argvs
    ]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


def call(url: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    """``GET`` *url*, or ``POST`` *body* as JSON; the status and the body (also of an error)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:  # not listening yet
        return 0, b""


def wait_for_rest(base: str, timeout_s: float = 60) -> None:
    """Until REST answers ``GET /`` and has its Kafka clients (``/feed`` refuses before)."""
    deadline = time.monotonic() + timeout_s
    while True:
        status, raw = call(base + "/")
        if status == 200 and json.loads(raw)["kafka_connected"]:
            return
        assert time.monotonic() < deadline, f"the REST service is not ready: {status} {raw!r}"
        time.sleep(0.2)


def ask_stats(base: str, stats_type: str) -> dict[str, Any]:
    """The answer to ``{"stats": stats_type}`` fed through REST (polled if it is not back within
    WAIT_FOR_RESPONSE_TIME: the monitors may still be starting)."""
    uuid = f"ask-{stats_type}-{time.monotonic_ns()}"
    status, raw = call(base + "/feed", {"appid": "testapp", "uuid": uuid, "stats": stats_type})
    assert status == 200, raw
    data = json.loads(raw)["data"]
    deadline = time.monotonic() + 60
    while data == {"poll_id": uuid}:
        assert time.monotonic() < deadline, f"no answer to stats {stats_type!r}"
        time.sleep(0.5)
        status, raw = call(base + "/poll", {"poll_id": uuid})
        if status == 200:
            data = json.loads(raw)["data"]
    assert isinstance(data, dict) and data["stats"] == stats_type, data
    return data


def test_a_kind_built_out_of_tree_is_answered_measured_and_shown_by_the_real_services(
    services: str, settings: Settings, redis_client: redis.Redis
) -> None:
    keys = keys_from_settings(settings)
    stats = Stats(redis_client, keys, settings.STATS_TIMES)
    stats.incr(KIND, GREETINGS, 3)  # what its processes count (docs/extending.md)
    stats.incr(KIND, "total", 5)
    node = new_node_id()
    Heartbeat(redis_client, keys, KIND, node, "box-1", timeout_s=120).beat()
    wait_for_rest(services)

    # its view's own stats type, validated by REST and the kafka-monitor, answered by the redis-monitor
    greetings = ask_stats(services, GREETINGS)
    assert greetings["greetings"]["lifetime"] == 3
    assert set(greetings) == {"stats", "appid", "uuid", "server_time", "greetings"}
    # the kind's own type: the default view's counters and live nodes; and part of `all`
    own = ask_stats(services, KIND)
    assert own["total"]["lifetime"] == 5 and own["nodes"] == {"box-1": [node]}
    everything = ask_stats(services, "all")
    assert everything[KIND]["total"] == own["total"]

    # its metric family on /metrics (after the cluster's own), and its nodes
    status, raw = call(services + "/metrics")
    assert status == 200
    text = raw.decode()
    assert "# TYPE crawlhive_hello_greetings_total counter\ncrawlhive_hello_greetings_total 3.0\n" in text, text
    assert f'crawlhive_nodes{{component="{KIND}"}} 1.0' in text

    # its card, and its node card, in the dashboard's data
    status, raw = call(services + "/dashboard/data")
    assert status == 200, raw
    data = json.loads(raw)["data"]
    assert data["hello"] == {"greetings": 3, "processes": 1}
    assert data["nodes"][KIND] == {"count": 1, "hosts": {"box-1": [node]}, "label": KIND}
    assert list(data)[-3:] == ["proxies", "hello", "sinks"]  # the views' cards, in the registry's order (50 < 60)

    # the page renders the card it does not know: a section headed by its key, a table of its fields
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (make install)")
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium: install Debian's chromium package (make test does when run as root)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            page.goto(f"{services}/dashboard")
            card = page.locator("section.other", has=page.locator("h2", has_text="hello"))
            sync_api.expect(card.locator("th")).to_have_text(["greetings", "processes"], timeout=30_000)
            sync_api.expect(card.locator("td")).to_have_text(["3", "1"])
            sync_api.expect(page.locator("#node-cards")).to_contain_text(KIND)  # its node card
        finally:
            browser.close()
