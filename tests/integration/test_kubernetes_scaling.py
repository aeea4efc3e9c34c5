"""The crawler autoscalers' signal for real: during a crawl on the embedded cluster (`crawlhive up`),
a real Prometheus (Debian's) scrapes REST's /metrics, and the exact query of each crawler
ScaledObject of deploy/kubernetes/ (rendered by ``kubectl kustomize``), evaluated by that Prometheus,
gives the replicas KEDA would set: above three times the minimum while many domains are ready to
fetch, the minimum while every domain with queued work waits for its throttle, and the minimum again
once the crawl is complete.

The site: 96 loopback addresses (96 domains), each page answered after a delay, its front page
linking one more page. The throttle (QUEUE_HITS=1 per QUEUE_WINDOW=40 s, moderated) lets each domain
be fetched once, then parks it 40 s with its second page queued: the throttled phase.
"""

from __future__ import annotations

import http.server
import json
import math
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cli_up import CLI, _kill_group, _start_up
from unit.test_kubernetes import keda_replicas, prometheus_queries

from crawlhive.app.demo_site import SiteServer

pytestmark = pytest.mark.timeout(300)

HOSTS = [f"127.0.0.{i}" for i in range(1, 97)]
PAGE_DELAY_S = 2.0
WINDOW_S = 40


class ManyHosts:
    """``/`` links ``/a`` on each of HOSTS (one server each, one port); every page answers after PAGE_DELAY_S."""

    def __init__(self) -> None:
        self.servers: list[SiteServer] = []
        self.port = 0

    def start(self) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/robots.txt":
                    body, kind = b"User-agent: *\n", "text/plain"
                else:
                    time.sleep(PAGE_DELAY_S)
                    link = '<a href="/a">more</a>' if self.path == "/" else ""
                    body, kind = f"<html><body><p>{self.path}</p>{link}</body></html>".encode(), "text/html"
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        for host in HOSTS:
            server = SiteServer((host, self.port), Handler)
            self.port = server.server_address[1]
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


class Prometheus:
    """Debian's prometheus, scraping *target* every second, its API on a loopback port."""

    def __init__(self, folder: Path, target: str) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail(
                "prometheus is missing: install Debian's prometheus package (`make test` does: monitoring-tools)"
            )
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": "crawlhive", "metrics_path": "/metrics", "static_configs": [{"targets": [target]}]}
            ],
        }
        (folder / "prometheus.yml").write_text(json.dumps(config))
        self.log = folder / "prometheus.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={folder / 'prometheus.yml'}",
                    f"--storage.tsdb.path={folder / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while not self.ready():
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log.read_text()[-2000:]
            time.sleep(0.2)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        url = f"http://127.0.0.1:{self.port}/api/v1/query?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = json.loads(answer.read())
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def value(self, expr: str, at: float | None = None) -> float | None:
        """The one sample of *expr* (None: no data)."""
        result = self.query(expr, at)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture
def site() -> Iterator[ManyHosts]:
    s = ManyHosts()
    s.start()
    yield s
    s.stop()


def test_each_crawler_scaledobject_query_follows_the_ready_work(tmp_path: Path, site: ManyHosts) -> None:
    queries = prometheus_queries()
    crawler_query, crawler = queries["crawler"]
    render_query, render = queries["crawler-render"]
    minimum = crawler["spec"]["minReplicaCount"]
    threshold = float(crawler["spec"]["triggers"][0]["metadata"]["threshold"])
    proc, log, env = _start_up(
        tmp_path, QUEUE_HITS="1", QUEUE_WINDOW=str(WINDOW_S), QUEUE_MODERATED="true", KAFKA_TOPIC_PREFIX="k8sscale"
    )
    prometheus = None
    try:
        rest = re.search(r"REST http://(127\.0\.0\.1:\d+)", log.read_text())
        assert rest is not None, log.read_text()[-2000:]
        prometheus = Prometheus(tmp_path, rest.group(1))
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("".join(f"http://{host}:{site.port}/\n" for host in HOSTS))
        fed = subprocess.run(
            [*CLI, "feed", "--file", str(seeds), "--appid", "k8s", "--crawlid", "scale", "--set-field", "maxdepth=1"],
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert fed.returncode == 0, fed.stderr

        # 1. Many domains ready at once: the query asks for more than three times the minimum.
        peak, peak_at, deadline = 0.0, 0.0, time.monotonic() + 90
        while time.monotonic() < deadline and keda_replicas(peak, crawler) < 3 * minimum + 1:
            value = prometheus.value(crawler_query)
            if value is not None and value > peak:
                peak, peak_at = value, time.time()
            time.sleep(0.5)
        ready = prometheus.value('max(crawlhive_queue_ready_domains{spiderid="link",lane="plain"})', peak_at)
        assert keda_replicas(peak, crawler) > 3 * minimum, (peak, log.read_text()[-3000:])
        assert ready is not None and ready >= 2 * threshold, ready  # the rise is the ready work, not fetches
        assert keda_replicas(prometheus.value(render_query, peak_at) or 0, render) == 0  # nothing to render

        # 2. Every domain fetched once and parked by its throttle, its second page queued: work
        # exists, none is ready, and the query gives the minimum at every scrape of that phase.
        throttled: list[float] = []
        seen: list[tuple[float, float, float]] = []
        deadline = time.monotonic() + WINDOW_S + 30
        while len(throttled) < 5 and time.monotonic() < deadline:
            now = time.time()
            backlog = prometheus.value('max(crawlhive_queue_backlog{spiderid="link"})', now) or 0
            inflight = prometheus.value('max(crawlhive_inflight_requests{spiderid="link"})', now) or 0
            pages = prometheus.value('max(crawlhive_pages_crawled_total{spiderid="link"})', now) or 0
            seen.append((backlog, inflight, pages))
            if backlog >= len(HOSTS) / 2 and inflight == 0 and pages >= len(HOSTS):
                throttled.append(now)
            time.sleep(1.0)
        assert len(throttled) >= 5, (seen[-12:], log.read_text()[-1500:])
        for at in throttled:
            value = prometheus.value(crawler_query, at)
            assert value is not None and keda_replicas(value, crawler) == minimum, (at, value)
            assert prometheus.value('max(crawlhive_queue_ready_domains{lane="plain"})', at) == 0

        # 3. The windows open, the second pages are fetched, the crawl completes: the minimum again.
        deadline = time.monotonic() + WINDOW_S + 90
        while time.monotonic() < deadline:
            active = prometheus.value('max(crawlhive_active_crawls{spiderid="link"})') or 0
            pages = prometheus.value('max(crawlhive_pages_crawled_total{spiderid="link"})') or 0
            if active == 0 and pages >= 2 * len(HOSTS):
                break
            time.sleep(1.0)
        else:
            pytest.fail(f"the crawl did not complete: {log.read_text()[-3000:]}")
        time.sleep(2.0)  # one more scrape
        value = prometheus.value(crawler_query)
        assert value is not None and keda_replicas(value, crawler) == minimum, value
        assert keda_replicas(prometheus.value(render_query) or 0, render) == 0
        assert not [line for line in log.read_text().splitlines() if "Traceback" in line]
    finally:
        if prometheus is not None:
            prometheus.stop()
        _kill_group(proc)


def test_the_replicas_follow_kedas_rule() -> None:
    """keda_replicas (what the test above compares with): KEDA's AverageValue target."""
    _, crawler = prometheus_queries()["crawler"]
    threshold = float(crawler["spec"]["triggers"][0]["metadata"]["threshold"])
    assert keda_replicas(0, crawler) == crawler["spec"]["minReplicaCount"]
    assert keda_replicas(3 * threshold + 1, crawler) == 4
    assert keda_replicas(10**6, crawler) == crawler["spec"]["maxReplicaCount"]
    assert math.isclose(keda_replicas(threshold, crawler), 1)
