"""A 429 with ``Retry-After`` backs its domain off for every crawler (``defer_domain``), while other
domains are fetched as usual."""

from __future__ import annotations

import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import redis
from support.crawler import Collector, Crawler, Seen, TestSite, crawler_env, html, seed

from crawlhive.utils.backends.kafka_clients import ensure_topics
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import RETRY_AFTER_MAX_S, defer_domain, parse_retry_after

pytestmark = pytest.mark.timeout(90)


def test_defer_domain_only_ever_moves_the_ready_time_later(redis_client: redis.Redis, names: Any) -> None:
    keys = Keys(names.key_prefix)
    now = float(redis_client.time()[0])
    first = defer_domain(redis_client, keys, "link", "example.com", 30)
    assert now + 29 < first < now + 32
    assert defer_domain(redis_client, keys, "link", "example.com", 5) == first  # GT: never earlier
    assert defer_domain(redis_client, keys, "link", "example.com", 10**9) < now + RETRY_AFTER_MAX_S + 2
    assert redis_client.zscore(keys.domains("other"), "example.com") is None  # per spider type


def test_parse_retry_after() -> None:
    assert parse_retry_after(b"12") == 12.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=0) > 0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_429_with_retry_after_backs_the_domain_off_cluster_wide(
    settings: Settings, redis_client: redis.Redis, site: TestSite, tmp_path: Path
) -> None:
    answers = iter([429])

    def limited(_seen: Seen) -> tuple[int, dict[str, str], bytes]:
        status = next(answers, 200)
        headers = {"Content-Type": "text/html", **({"Retry-After": "3"} if status == 429 else {})}
        return status, headers, html("/ra/1", "/ra/2")

    site.handler("/ra/0", limited)
    site.page("/ra/1", html())
    site.page("/ra/2", html())
    site.page("/rb/0", html())
    topics = [settings.topic("crawled_firehose"), settings.topic("dead_letter")]
    ensure_topics(settings, topics)
    collector = Collector(settings, topics)
    crawlers = [Crawler(crawler_env(settings), tmp_path) for _ in range(2)]
    try:
        crawlers[0].wait_ready(redis_client, settings["REDIS_KEY_PREFIX"], count=2)
        seed(settings, redis_client, appid="testapp", crawlid="ra", url=site.url("/ra/0"), maxdepth=1)
        time.sleep(0.5)
        seed(settings, redis_client, appid="testapp", crawlid="rb", url=site.url("/rb/0", host="127.0.0.2"))
        items = collector.wait_for("ra", 3, timeout=30)
        other = collector.wait_for("rb", 1, timeout=5)
    finally:
        for crawler in crawlers:
            crawler.kill()
        collector.close()
    assert sorted((i["url"].rsplit("/", 2)[-2:], i["status_code"]) for i in items) == [
        (["ra", "0"], 200),
        (["ra", "1"], 200),
        (["ra", "2"], 200),
    ]
    first, retry = (s.at for s in site.hits("/ra/0"))
    assert retry - first >= 3.0 - 0.2, retry - first  # nobody fetched from the domain meanwhile
    assert min(s.at for s in site.hits("/ra/") if s.path != "/ra/0") > retry
    (other_hit,) = site.hits("/rb/0")
    assert other_hit.at < first + 2.0 and other, "another domain must not wait"


def test_one_tenant_of_a_shared_suffix_pauses_itself_not_its_siblings(
    settings: Settings, redis_client: redis.Redis, site: TestSite, tmp_path: Path
) -> None:
    """``mallory.github.io`` and ``alice.github.io`` share the bucket ``github.io`` (§3.2). Mallory's
    ``Retry-After: 3600`` and ``Crawl-delay: 60`` pause mallory's own site; alice's pages are
    fetched at once. The hosts are reached through the test site acting as the crawler's HTTP
    proxy (``http_proxy``), so their names need no DNS."""

    def tenant(seen: Seen) -> str:
        return urllib.parse.urlsplit(seen.path).hostname or ""

    def robots(seen: Seen) -> tuple[int, dict[str, str], bytes]:
        delay = "Crawl-delay: 60\n" if tenant(seen) == "mallory.github.io" else ""
        return 200, {"Content-Type": "text/plain"}, f"User-agent: *\n{delay}".encode()

    def mallory(seen: Seen) -> tuple[int, dict[str, str], bytes]:
        if seen.path.endswith("/m/0"):
            return 200, {"Content-Type": "text/html"}, html("/m/1", "/m/2")
        return 429, {"Content-Type": "text/html", "Retry-After": "3600"}, html()

    site.handler("/robots.txt", robots)
    for path in ("/m/0", "/m/1", "/m/2"):
        site.handler(path, mallory)
    site.page("/a/0", html("/a/1", "/a/2", "/a/3"))
    for path in ("/a/1", "/a/2", "/a/3"):
        site.page(path, html())
    keys = Keys(settings["REDIS_KEY_PREFIX"])
    topics = [settings.topic("crawled_firehose"), settings.topic("dead_letter")]
    ensure_topics(settings, topics)
    collector = Collector(settings, topics)
    proxy = f"http://127.0.0.1:{site.port}"
    crawler = Crawler(crawler_env(settings, http_proxy=proxy, RETRY_TIMES=0), tmp_path)
    try:
        crawler.wait_ready(redis_client, settings["REDIS_KEY_PREFIX"])
        seed(
            settings,
            redis_client,
            appid="testapp",
            crawlid="m",
            url=f"http://mallory.github.io:{site.port}/m/0",
            maxdepth=1,
        )
        collector.wait_for("m", 1, timeout=30)
        time.sleep(1.0)  # mallory's links are queued and its Crawl-delay is running
        started = time.time()
        seed(
            settings,
            redis_client,
            appid="testapp",
            crawlid="a",
            url=f"http://alice.github.io:{site.port}/a/0",
            maxdepth=1,
        )
        alice = collector.wait_for("a", 4, timeout=15)
        took = time.time() - started
        time.sleep(1.0)
    finally:
        crawler.kill()
        collector.close()
    assert sorted(item["url"].rsplit("/", 1)[-1] for item in alice) == ["0", "1", "2", "3"]
    assert took < 10, f"alice.github.io waited {took:.1f}s for mallory.github.io's pause"
    mallory_pages = [s for s in site.seen if tenant(s) == "mallory.github.io" and "/m/" in s.path]
    assert len(mallory_pages) <= 2, "mallory's Crawl-delay of 60 s lets one more page through at most"
    wait = redis_client.pttl(keys.site_wait("github.io", "mallory.github.io"))
    assert wait > 50_000, "mallory's own pause is in force"
    assert redis_client.zscore(keys.domains("link"), "github.io") is None or (
        redis_client.zscore(keys.domains("link"), "github.io") < time.time() + 5
    ), "the shared bucket is not parked"
    assert redis_client.get(keys.crawl_delay("github.io")) is None, "the bucket has no Crawl-delay"
