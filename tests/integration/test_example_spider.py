"""The example spider project (examples/quotes, docs/spiders.md) crawled end to end by the real
``crawlhive crawler`` against its own sample site, with Kafka and in Redis-only mode, so the example
and the guide can never rot."""

from __future__ import annotations

import functools
import http.server
import json
import secrets
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.crawler import CLI, Crawler, crawler_env, crawler_module, redis_for, seed

from crawlhive.utils.config.settings import Settings

pytestmark = pytest.mark.timeout(120)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quotes"
SPIDER_SETTINGS = {"SPIDER_MODULES": ["quotes_spiders.spiders"]}


@pytest.fixture
def sample_site() -> Iterator[str]:
    """The example's sample site (examples/quotes/site), as ``python -m http.server`` serves it."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(EXAMPLE / "site"))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def example_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", f"{EXAMPLE}:{__import__('os').environ.get('PYTHONPATH', '')}")


def _check_items(items: list[dict[str, Any]], root: str) -> None:
    quotes = sorted((i["item"]["page"], i["item"]["text"]) for i in items if "text" in i["item"])
    assert quotes == [
        (1, "It is our choices that show what we truly are."),
        (1, "The world as we have created it is a process of our thinking."),
        (2, "The person who has not pleasure in a good novel must be intolerably stupid."),
        (2, "There are only two ways to live your life."),
        (3, "Try not to become a man of success."),
    ], quotes  # cleaned by the pipeline; the unsigned quote was dropped
    authors = {i["item"]["name"]: i for i in items if "born" in i["item"]}
    assert set(authors) == {"Albert Einstein", "Jane Austen"}  # each author page once: the crawl's dedupe
    assert authors["Jane Austen"]["item"]["born"] == "December 16, 1775"
    assert authors["Jane Austen"]["item"]["quotes_seen_on_page"] == 3  # cb_kwargs from page 1
    assert authors["Jane Austen"]["url"] == root + "author/jane-austen/"


def test_the_example_spider_crawls_its_sample_site_to_the_items_topic(
    example_path: None, sample_site: str, redis_url: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    with crawler_module(redis_url, kafka_bootstrap, tmp_path, "x", spider="quotes", **SPIDER_SETTINGS) as env:
        settings = env["settings"]
        seed(
            settings, env["redis"], appid="examples", crawlid="quotes1", spiderid="quotes", url=sample_site, maxdepth=3
        )
        env["collector"].wait_for("quotes1", 7, topic=settings.topic("items"), timeout=30)
        items = env["collector"].settle("quotes1", quiet_s=1.0)
        # docs/spiders.md: `crawlhive dump items` shows them
        dumped = subprocess.run(
            [*CLI, "dump", "items", "-b", "-n", "7"],
            env=crawler_env(settings),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert dumped.returncode == 0, dumped.stderr
    assert sorted(json.loads(line)["url"] for line in dumped.stdout.splitlines()) == sorted(i["url"] for i in items)
    assert {i["_topic"] for i in items} == {settings.topic("items")}
    assert len(items) == 7, items
    _check_items(items, sample_site)


def test_the_example_spider_in_redis_only_mode(
    example_path: None, sample_site: str, redis_url: str, tmp_path: Path
) -> None:
    """docs/spiders.md's first steps: no Kafka at all, a JSON crawl request pushed to quotes:start_urls."""
    prefix = f"xr{secrets.token_hex(4)}"
    items_key = f"{prefix}-quotes:items"  # unique per run (the default, quotes:items, is not under the prefix)
    settings = Settings.from_overrides(
        REDIS_URL=redis_url,
        KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1",
        REDIS_KEY_PREFIX=prefix,
        KAFKA_TOPIC_PREFIX=prefix,
        CRAWLHIVE_HOME=str(tmp_path),
    )
    env = crawler_env(
        settings, REDIS_START_URLS_KEY=f"{prefix}-%(name)s:start_urls", REDIS_ITEMS_KEY=items_key, **SPIDER_SETTINGS
    )
    client = redis_for(redis_url)
    crawler = Crawler(env, tmp_path, spider="quotes", name="example-redis-only", extra_args=["--no-kafka"])
    try:
        crawler.wait_ready(client, prefix)
        client.rpush(
            f"{prefix}-quotes:start_urls",
            json.dumps({"url": sample_site, "appid": "examples", "crawlid": "r1", "maxdepth": 3}),
        )
        deadline = time.monotonic() + 30
        while client.llen(items_key) < 7 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        items = [json.loads(raw) for raw in client.lrange(items_key, 0, -1)]
    finally:
        code = crawler.terminate()
        for key in [*client.scan_iter(match=f"{prefix}*", count=1000), "quotes:dead_letter"]:
            client.delete(key)
        client.close()
    assert code == 0, crawler.output()
    assert len(items) == 7, items
    _check_items(items, sample_site)
