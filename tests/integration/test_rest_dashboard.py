"""End to end in a real browser: submit a crawl from the dashboard, watch it complete, stop another.

Headless Chromium (Debian's ``chromium`` package, driven by Playwright; no browser download) loads
``GET /dashboard`` from the real REST service. The request travels REST -> Kafka -> the real
kafka-monitor (``crawlhive kafka-monitor``; when that subcommand is not built yet, a test-side
consumer writes the seed with ``Frontier.push``) -> the Redis frontier. A stand-in crawler pops and
acks through :class:`FrontierLeaser` and a stand-in redis-monitor answers the stop. The final
screenshot is saved as ``tests/artifacts/dashboard.png``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from support.rest import FakeRedisMonitor, running_rest, stats_answer

from crawlhive.utils.backends.kafka_clients import make_producer
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings, settings_env
from crawlhive.utils.frontier import Frontier, FrontierLeaser, FrontierReader, FrontierRequest
from crawlhive.utils.state.heartbeat import Heartbeat, new_node_id
from crawlhive.utils.state.stats import Stats, crawler_counter_name, items_counter_name

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
#: The second crawl's id: as long as the form allows (40), so that the finished crawls' card shows a long one.
CRAWL_TWO = "crawl-two-" + "x" * 30
#: The cards (and the page) whose content is wider than they are, by heading: each would scroll sideways.
SIDEWAYS = """() => {
  const wide = [...document.querySelectorAll("section")].filter(s => s.scrollWidth > s.clientWidth)
    .map(s => `${s.querySelector("h2").textContent}: ${s.scrollWidth} > ${s.clientWidth}`);
  const page = document.documentElement;
  return page.scrollWidth > page.clientWidth ? [...wide, `page: ${page.scrollWidth} > ${page.clientWidth}`] : wide;
}"""
#: Links the stand-in crawler "finds" on the seed page: the crawl has 1 + len(CHILDREN) pages.
CHILDREN = [f"http://example.com/page{i}" for i in range(3)] + [f"http://example.org/doc{i}" for i in range(2)]


@pytest.fixture
def cluster_settings(settings: Settings) -> Settings:
    # A fast throttle, so the stand-in crawler is not held back by politeness.
    return settings.copy_with(QUEUE_HITS=1000, QUEUE_MODERATED=False, HEARTBEAT_INTERVAL=1.0)


@pytest.fixture
def intake(cluster_settings: Settings, redis_client: redis.Redis) -> Iterator[str]:
    """The real kafka-monitor process."""
    env = {**os.environ, **settings_env(cluster_settings)}
    process = subprocess.Popen([sys.executable, "-m", "crawlhive.app.cli", "kafka-monitor"], env=env)
    try:
        yield "crawlhive kafka-monitor"
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class StandInCrawler:
    """Pops and acks like a crawler of spider ``link``; the seed "links to" CHILDREN."""

    def __init__(self, settings: Settings, client: redis.Redis) -> None:
        self.client = client
        self.keys = keys_from_settings(settings)
        self.worker = FrontierLeaser.from_settings(client, settings)
        self.frontier = Frontier.from_settings(client, settings)
        self.stats = Stats(client, self.keys, settings.getlist("STATS_TIMES"))
        self.heartbeat = Heartbeat(
            client, self.keys, "crawler", new_node_id(), "browser-test", 30, extra={"spider": "link"}
        )
        self.stop = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self.run, name="stand-in-crawler", daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            self.heartbeat.beat()
            lease = self.worker.pop("link").lease
            if lease is None:
                self.stop.wait(0.1)
                continue
            request = lease.request
            if request.depth == 0:
                children = [
                    FrontierRequest(
                        url=url,
                        appid=request.appid,
                        crawlid=request.crawlid,
                        priority=request.priority - 10,
                        request_id=f"{request.request_id}/{i}",
                        depth=1,
                    )
                    for i, url in enumerate(CHILDREN)
                ]
                pipe = self.client.pipeline()
                self.frontier.push(children, pipe)
                pipe.execute()
            else:
                while not self.release.is_set() and not self.stop.is_set():
                    self.stop.wait(0.05)  # the first link stays in flight until the test has looked
                self.stop.wait(0.2)  # "fetching"
            self.stats.incr_many(
                [("crawler", crawler_counter_name("link", 200), 1), ("crawler", items_counter_name("link"), 1)]
            )
            self.worker.ack(lease, "crawled")

    def __enter__(self) -> StandInCrawler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        self.heartbeat.stop()


def test_dashboard_submits_a_crawl_shows_it_complete_and_stops_another(
    cluster_settings: Settings, redis_client: redis.Redis, intake: str
) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (make install)")
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium: install Debian's chromium package (make test does when run as root)")
    reader = FrontierReader.from_settings(redis_client, cluster_settings)

    def redis_monitor(request: dict[str, Any]) -> dict[str, Any] | None:
        if request.get("action") == "stop" and "uuid" in request:
            purged = reader.purge(request["spiderid"], request["appid"], request["crawlid"])
            return {**(stats_answer(request) or {}), "total_purged": purged}
        return None

    monitor = FakeRedisMonitor(cluster_settings, redis_monitor)
    try:
        with (
            running_rest(cluster_settings) as rest,
            StandInCrawler(cluster_settings, redis_client) as crawler,
            sync_api.sync_playwright() as playwright,
        ):
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(f"{rest.url}/dashboard")
                page.wait_for_selector("#node-cards .card")

                # A crawl the stand-in crawler serves: it runs to completion.
                page.fill("#f-url", "http://example.com/")
                page.fill("#f-appid", "browserapp")
                page.fill("#f-crawlid", "crawl-one")
                page.click("#f-submit")
                sync_api.expect(page.locator("#feed-result")).to_have_text("submitted browserapp/crawl-one")
                row = page.locator("#crawls tbody tr", has_text="crawl-one")
                cells = row.locator("td")
                sync_api.expect(cells.nth(5)).to_have_text("1", timeout=30_000)  # in flight: held by the crawler
                sync_api.expect(cells.nth(4)).to_have_text(str(len(CHILDREN) - 1))  # queued
                sync_api.expect(cells.nth(6)).to_have_text("1")  # crawled: the seed
                sync_api.expect(page.locator("#domains tbody")).to_contain_text("example.org")
                ARTIFACTS.mkdir(exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / "dashboard-running.png"), full_page=True)
                crawler.release.set()
                sync_api.expect(row.locator(".pill")).to_have_text("complete", timeout=60_000)
                sync_api.expect(cells.nth(6)).to_have_text(str(1 + len(CHILDREN)))  # crawled
                sync_api.expect(row).to_contain_text("100%")

                # A crawl for a spider type nobody runs: it waits, and the Stop button stops it.
                page.fill("#f-url", "http://example.net/")
                page.fill("#f-crawlid", CRAWL_TWO)
                page.fill("#f-spiderid", "parked")
                page.click("#f-submit")
                parked = page.locator("#crawls tbody tr", has_text="crawl-two")
                sync_api.expect(parked.locator(".pill")).to_have_text("waiting", timeout=30_000)
                sync_api.expect(parked).to_contain_text("no live crawler serves spider type 'parked'")  # why
                parked_spider = page.locator("#spiders tbody tr", has_text="parked")
                sync_api.expect(parked_spider).to_contain_text("none: crawls wait")
                sync_api.expect(page.locator("#domains tbody")).to_contain_text("example.net")
                _send_invalid_request(cluster_settings)  # shows up under dead letters (real kafka-monitor)
                parked.locator("button.stop").click()
                sync_api.expect(parked.locator(".pill")).to_have_text("stopped", timeout=30_000)
                stop = monitor.wait_for(action="stop", crawlid=CRAWL_TWO)
                assert stop["spiderid"] == "parked" and stop["appid"] == "browserapp"
                if intake.startswith("crawlhive"):
                    sync_api.expect(page.locator("#dead tbody")).to_contain_text("too short", timeout=30_000)

                sync_api.expect(page.locator("#node-cards")).to_contain_text("crawler")

                # At 1280 px (a laptop), no card scrolls sideways, the finished crawls' included:
                # crawl-one ends as the redis-monitor ends it (scan_complete), with the full row.
                while reader.scan_complete()[0]:
                    pass
                page.set_viewport_size({"width": 1280, "height": 900})
                sync_api.expect(page.locator("#finished tbody")).to_contain_text("crawl-one", timeout=30_000)
                sync_api.expect(page.locator("#finished tbody")).to_contain_text(CRAWL_TWO)
                page.screenshot(path=str(ARTIFACTS / "dashboard-1280.png"), full_page=True)
                sideways = page.evaluate(SIDEWAYS)
                assert sideways == [], f"cards that scroll sideways at 1280 px: {sideways}"
                page.wait_for_timeout(2500)  # one more refresh, so the picture has settled
                page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
            finally:
                browser.close()
    finally:
        monitor.close()
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 10_000


def _send_invalid_request(settings: Settings) -> None:
    producer = make_producer(settings)
    try:
        bad = {"url": "http://example.com/", "appid": "ab", "crawlid": "bad"}
        producer.send(settings.topic("incoming"), json.dumps(bad).encode()).get(timeout=10)
    finally:
        producer.close(timeout=2)
