"""Unit tests of the crawler's pure parts: request conversion, links, items, request shaping."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy import Request, Spider
from scrapy.http import HtmlResponse, Response
from scrapy.utils.test import get_crawler

from crawlhive.crawler.admit import Verdict
from crawlhive.crawler.items import ITEM_KEYS, crawled_item, status_message, timestamp
from crawlhive.crawler.leases import LeaseContext
from crawlhive.crawler.links import LinkLimits, extract_links, link_allowed
from crawlhive.crawler.middlewares import spider as spider_middleware
from crawlhive.crawler.middlewares.outcomes import error_text
from crawlhive.crawler.middlewares.shaping import cookie_header
from crawlhive.crawler.middlewares.spider import FrontierSpiderMiddleware
from crawlhive.crawler.requests import (
    CONTEXT,
    FRONTIER,
    child_request,
    is_plain,
    request_from_json,
    request_to_json,
)
from crawlhive.crawler.settings import scrapy_settings
from crawlhive.utils.config.errors import SettingsError
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import FrontierRequest, Lease


class DemoSpider(Spider):
    name = "demo"

    def parse(self, response):  # type: ignore[no-untyped-def]
        return []

    def parse_detail(self, response):  # type: ignore[no-untyped-def]
        return []


@pytest.fixture
def spider() -> DemoSpider:
    crawler = get_crawler(DemoSpider)
    return DemoSpider.from_crawler(crawler)


def _page(url: str, body: str) -> HtmlResponse:
    return HtmlResponse(url, body=body.encode(), encoding="utf-8", request=Request(url))


def test_custom_request_survives_the_frontier_round_trip(spider: DemoSpider) -> None:
    parent = FrontierRequest(
        "http://a.com/", "app", "c1", priority=5, depth=1, attrs={"k": 1}, seed_origin="http://a.com:80"
    )
    custom = Request(
        "http://b.com/x?q=1",
        method="POST",
        body=b"\xffbinary",
        headers={"X-A": "1"},
        cookies={"s": "v"},
        callback=spider.parse_detail,
        meta={"mine": [1, 2]},
        cb_kwargs={"n": 3},
    )
    child = child_request(parent, custom, spider)
    assert (child.depth, child.priority, child.domain, child.attrs) == (2, -5, "b.com", {"k": 1})
    decoded = FrontierRequest.decode(child.encode())
    assert decoded == child and decoded.encode() == child.encode()
    rebuilt = request_from_json(decoded.scrapy_request or {}, spider)
    assert (rebuilt.method, rebuilt.body, rebuilt.headers[b"X-A"]) == ("POST", b"\xffbinary", b"1")
    assert rebuilt.cookies == {"s": "v"} and rebuilt.cb_kwargs == {"n": 3} and rebuilt.meta == {"mine": [1, 2]}
    assert rebuilt.callback == spider.parse_detail


def test_plain_links_carry_no_serialised_request(spider: DemoSpider) -> None:
    parent = FrontierRequest("http://a.com/", "app", "c1")
    assert is_plain(Request("http://a.com/b"), spider)
    child = child_request(parent, Request("http://a.com/b", meta={FRONTIER: {"attrs": {"step": 1}}}), spider)
    assert child.scrapy_request is None and child.attrs == {"step": 1} and child.method == "GET"
    assert request_to_json(Request("http://a.com/"), spider)["body"] == ""


def test_links_filters_canonical_unique_in_order() -> None:
    body = """<a href="/b?y=2&x=1#frag"> B  </a><a href="/b?x=1&y=2">dup</a><area href="/c.html">
    <a href="/d.PDF">pdf</a><a href="http://sub.a.com:81/e">e</a><a href="http://z.org/f">f</a>
    <a href="mailto:x@y">m</a><a href="/deny/g">g</a>"""
    page = _page("http://a.com:8080/", body)
    request = FrontierRequest("http://a.com:8080/", "app", "c1", allowed_domains=["A.com"], deny_regex=["deny"])
    assert extract_links(page, request) == [
        {"url": "http://a.com:8080/b?x=1&y=2", "text": "B"},
        {"url": "http://a.com:8080/c.html", "text": ""},
        {"url": "http://sub.a.com:81/e", "text": "e"},
    ]
    request = FrontierRequest("http://a.com/", "app", "c1", deny_extensions=[".html"], allow_regex=[r"\.PDF$", "/e$"])
    assert [link["url"] for link in extract_links(page, request)] == [
        "http://a.com:8080/d.PDF",
        "http://sub.a.com:81/e",
    ]
    assert extract_links(Response("http://a.com/x.bin", body=b"\x00"), request) == []


@settings(max_examples=300, deadline=None)
@given(
    scheme=st.sampled_from(["http://", "https://", "ftp://", "http:", ""]),
    rest=st.lists(st.sampled_from(["a", "b", "", "a?b", "#a", "?"]), max_size=9).map("/".join),
    repeats=st.integers(1, 4),
)
def test_the_trap_rules_shortcut_answers_as_the_path_split_does(scheme: str, rest: str, repeats: int) -> None:
    """:meth:`LinkLimits.is_trap` skips splitting a URL with few slashes: same answer as splitting."""
    url = f"{scheme}h.com/{rest}"
    segments = [s for s in urlsplit(url).path.split("/") if s]
    expected = max(Counter(segments).values(), default=0) > repeats
    assert LinkLimits(max_url_length=0, max_segment_repeats=repeats).is_trap(url) is expected


def test_crawl_traps_are_dropped_by_the_link_filters() -> None:
    """docs/contract.md §10.7: too long, or one path segment repeated more than allowed."""
    limits = LinkLimits(max_url_length=60, max_segment_repeats=3)
    assert not limits.is_trap("http://a.com/a/b/a/b/a/b/")  # three times each: allowed
    assert limits.is_trap("http://a.com/a/b/a/b/a/b/a/b/")  # four
    assert limits.is_trap("http://a.com/" + "x" * 60)
    assert not LinkLimits(0, 0).is_trap("http://a.com/a/a/a/a/a/" + "x" * 9000)  # 0 = rule off
    # a path of at most 3 segments is never split (the shortcut counts slashes): the same answers
    assert not limits.is_trap("http://a.com/a/a/a") and not limits.is_trap("https://a.com/a/a/a?q=/")
    assert limits.is_trap("http://a.com/a/a/a/a") and limits.is_trap("https://a.com//a//a//a//a")
    assert not limits.is_trap("http://a.com/a/b/c/d?x=/a/a/a/a")  # the query is not the path
    body = (
        '<a href="/cal/2026/11/2026/11/2026/11/2026/11/">trap</a><a href="/ok">ok</a><a href="/'
        + "y" * 80
        + '">long</a>'
    )
    page = _page("http://a.com/", body)
    request = FrontierRequest("http://a.com/", "app", "c1")
    assert [link["url"] for link in extract_links(page, request, limits)] == ["http://a.com/ok"]
    assert len(extract_links(page, request)) == 2  # the defaults (2083 characters, 3 repeats) keep the long one
    assert link_allowed("http://a.com/ok", request, limits)
    assert not link_allowed("http://a.com/cal/1/1/1/1/", request, limits)


def test_item_has_the_13_keys_and_api_formats() -> None:
    request = Request("http://a.com/", headers={"User-Agent": "ua"})
    response = HtmlResponse(
        "http://a.com/final",
        status=418,
        body=b"<html>\xe9t\xe9</html>",
        headers={"Set-Cookie": ["a=1", "b=2"], "Content-Type": "text/html; charset=cp1252"},
        request=request,
    )
    item = crawled_item(response, [], url="http://a.com/", appid="a", crawlid="c", attrs=None, base64_encode=False)
    assert tuple(item) == ITEM_KEYS
    assert item["status_msg"] == "I'm a Teapot" and status_message(299) == "Unknown"
    assert item["response_headers"]["Set-Cookie"] == ["a=1", "b=2"]
    assert item["request_headers"] == {"User-Agent": ["ua"]}
    assert (item["body"], item["encoding"]) == ("<html>été</html>", "cp1252")
    encoded = crawled_item(response, [], url="u", appid="a", crawlid="c", attrs=None, base64_encode=True)
    assert base64.b64decode(encoded["body"]).decode(encoded["encoding"]) == "<html>été</html>"
    assert timestamp(datetime(2024, 5, 1, 12, 0, tzinfo=UTC)) == "2024-05-01T12:00:00.000000"


def test_item_redaction_takes_the_listed_names_and_the_secret_words() -> None:
    """ITEM_REDACT_HEADERS is the explicit list an operator extends; ITEM_REDACT_HEADER_WORDS
    catches the names that look secret; both empty show everything, as Scrapy Cluster did."""
    from crawlhive.utils.config.defaults import ITEM_REDACT_HEADER_WORDS

    headers = {"X-Api-Key": "k", "x-AUTH-token": "t", "X-Internal": "i", "Cookie": "c", "Accept": "a"}
    response = HtmlResponse("http://a.com/", body=b"", request=Request("http://a.com/", headers=headers))

    def shown(names: frozenset[str], words: list[str]) -> dict[str, list[str]]:
        item = crawled_item(
            response, [], url="u", appid="a", crawlid="c", attrs=None, base64_encode=False,
            redact=names, redact_words=tuple(words),
        )  # fmt: skip
        return item["request_headers"]

    default = shown(frozenset({"authorization", "proxy-authorization", "cookie"}), ITEM_REDACT_HEADER_WORDS)
    assert default == {
        "X-Api-Key": ["[redacted]"], "X-Auth-Token": ["[redacted]"], "X-Internal": ["i"],
        "Cookie": ["[redacted]"], "Accept": ["a"],
    }  # fmt: skip
    extended = shown(frozenset({"x-internal"}), ITEM_REDACT_HEADER_WORDS)
    assert extended["X-Internal"] == ["[redacted]"] and extended["X-Api-Key"] == ["[redacted]"]
    assert shown(frozenset(), []) == {name.title(): [value] for name, value in headers.items()}


def test_cookie_header_merges_and_error_text_names_the_cause() -> None:
    request = FrontierRequest("http://a.com/", "a", "c", cookie="a=1; junk; b = 2", cookies={"a": "9", "c": "3"})
    assert cookie_header(request) == "a=9; b=2; c=3"
    assert cookie_header(FrontierRequest("http://a.com/", "a", "c")) is None
    try:
        try:
            raise ConnectionRefusedError("refused")
        except ConnectionRefusedError as exc:
            from scrapy.exceptions import DownloadConnectionRefusedError

            raise DownloadConnectionRefusedError("wrapped") from exc
    except Exception as exc:  # noqa: BLE001 - the test builds the chain
        assert error_text(exc) == "ConnectionRefusedError: refused"


def test_scrapy_settings_come_from_ours() -> None:
    ours = Settings.from_overrides(RETRY_TIMES=5, CONCURRENT_REQUESTS=7, SCRAPY_SETTINGS={"LOGSTATS_INTERVAL": 5})
    converted = scrapy_settings(ours, "link")
    assert converted["RETRY_TIMES"] == 5 and converted["CONCURRENT_REQUESTS"] == 7
    assert converted["COOKIES_ENABLED"] is False and converted["HTTPERROR_ALLOW_ALL"] is True
    assert converted["LOGSTATS_INTERVAL"] == 5 and converted["CRAWLHIVE_SETTINGS"] is ours


def test_user_scrapy_settings_add_components_and_cannot_remove_or_reorder_ours() -> None:
    user = {
        "DOWNLOADER_MIDDLEWARES": {
            "myproject.middlewares.Proxy": 610,
            "scrapy.downloadermiddlewares.stats.DownloaderStats": None,
        },
        "ITEM_PIPELINES": {"myproject.pipelines.Clean": 300},
        "LOGSTATS_INTERVAL": 5,
    }
    converted = scrapy_settings(Settings.from_overrides(SCRAPY_SETTINGS=user), "link")
    middlewares = converted["DOWNLOADER_MIDDLEWARES"]
    assert middlewares["myproject.middlewares.Proxy"] == 610
    assert middlewares["scrapy.downloadermiddlewares.stats.DownloaderStats"] is None  # Scrapy's own: may go
    assert middlewares["crawlhive.crawler.middlewares.outcomes.LeaseOutcomeMiddleware"] == 50  # ours: kept
    assert converted["ITEM_PIPELINES"] == {"myproject.pipelines.Clean": 300}
    assert converted["ITEM_PROCESSOR"] == "crawlhive.crawler.pipelines.FrontierItemProcessor"  # output comes last
    assert converted["SPIDER_MIDDLEWARES"] == {
        # Scrapy's, inert behind the frontier spider middleware: off (crawler/settings.py)
        "scrapy.spidermiddlewares.depth.DepthMiddleware": None,
        "scrapy.spidermiddlewares.urllength.UrlLengthMiddleware": None,
        "scrapy.spidermiddlewares.referer.RefererMiddleware": None,
        "crawlhive.crawler.middlewares.spider.FrontierSpiderMiddleware": 950,
        "crawlhive.crawler.recrawl.RecrawlItemMiddleware": 940,
        "crawlhive.crawler.recrawl.RecrawlSitemapMiddleware": 960,
    }

    for wrong, named in [
        (
            {"DOWNLOADER_MIDDLEWARES": {"crawlhive.crawler.middlewares.outcomes.LeaseOutcomeMiddleware": None}},
            "LeaseOutcomeMiddleware",
        ),
        ({"ITEM_PROCESSOR": "scrapy.pipelines.ItemPipelineManager"}, "ITEM_PROCESSOR"),
        ({"SPIDER_MIDDLEWARES": {FrontierSpiderMiddleware: 100}}, "FrontierSpiderMiddleware"),
        ({"SCHEDULER": "scrapy.core.scheduler.Scheduler"}, "SCHEDULER"),
        ({"SPIDER_MIDDLEWARES": ["not", "a", "mapping"]}, "SPIDER_MIDDLEWARES"),
    ]:
        with pytest.raises(SettingsError, match=f"SCRAPY_SETTINGS: .*{named}"):
            scrapy_settings(Settings.from_overrides(SCRAPY_SETTINGS=wrong), "link")


def test_the_crawler_command_refuses_to_remove_lease_handling_at_start_up() -> None:
    wrong = {"DOWNLOADER_MIDDLEWARES": {"crawlhive.crawler.middlewares.outcomes.LeaseOutcomeMiddleware": None}}
    env = {**os.environ, "SCRAPY_SETTINGS": json.dumps(wrong), "REDIS_URL": "redis://127.0.0.1:1/0"}
    done = subprocess.run(
        [sys.executable, "-m", "crawlhive.app.cli", "crawler", "--spider", "link"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "LeaseOutcomeMiddleware" in done.stderr and "cannot be removed or reordered" in done.stderr


class _FailingAdmitRuntime:
    """Just what FrontierSpiderMiddleware uses of a CrawlRuntime (its admission and lease table),
    with Redis failing at the admit *failures* times (None: always)."""

    def __init__(self, failures: int | None = None, lease_s: float = 0.3) -> None:
        self.abandoned: list[Any] = []
        self.passed: list[Any] = []
        self.attempts = 0
        self.failures = failures
        self.lease_s = lease_s
        self.closed = False
        self.admission = self.leases = self

    def child(self, context: Any, request: Request, spider: Spider) -> tuple[FrontierRequest, str]:
        return FrontierRequest(url=request.url, appid="a", crawlid="c"), request.url

    def admit(self, context: Any, children: list[Any]) -> Any:
        raise redis.ConnectionError("simulated: Redis is down")

    async def admit_async(self, context: Any, children: list[Any]) -> Any:
        self.attempts += 1
        if self.failures is None or self.attempts <= self.failures:
            raise redis.ConnectionError("simulated: Redis is down")
        return Verdict.EMIT

    def abandon(self, context: Any) -> None:
        context.done = True
        self.abandoned.append(context)

    def page_items(self, context: Any, items: list[Any]) -> None:
        self.passed += items


def _admitted(runtime: _FailingAdmitRuntime, spider: DemoSpider, mode: str) -> tuple[LeaseContext, list[Any]]:
    """What the spider middleware passes on of a page with one link and one item, and its lease."""
    crawler = get_crawler(DemoSpider)
    crawler.spider = spider
    middleware = FrontierSpiderMiddleware(crawler, runtime)  # type: ignore[arg-type]
    lease = Lease(b"m", FrontierRequest(url="http://a.com/", appid="a", crawlid="c"), 0.0)
    context = LeaseContext(lease)
    request = Request("http://a.com/", meta={CONTEXT: context})
    response = HtmlResponse("http://a.com/", body=b"<html></html>", request=request)
    outputs: list[Any] = [Request("http://a.com/next"), {"url": "http://a.com/"}]
    if mode == "sync":
        return context, list(middleware.process_spider_output(response, iter(outputs)))

    async def source() -> AsyncIterator[Any]:
        for output in outputs:
            yield output

    async def collect() -> list[Any]:
        return [o async for o in middleware.process_spider_output_async(response, source())]

    return context, asyncio.run(collect())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_page_whose_admit_keeps_failing_on_redis_is_given_up_not_kept_in_flight(
    spider: DemoSpider, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept in flight, its lease would be renewed forever and its crawl never complete: the admit
    is tried again for LEASE_TIMEOUT (the crawler's usual, asynchronous path), then given up."""
    monkeypatch.setattr(spider_middleware, "ADMIT_RETRY_S", 0.02)
    runtime = _FailingAdmitRuntime()
    context, passed = _admitted(runtime, spider, mode)
    assert passed == []
    assert runtime.abandoned == [context] and context.done
    assert runtime.attempts >= (3 if mode == "async" else 0)


def test_a_page_whose_admit_fails_while_a_redis_node_fails_over_is_admitted_when_it_is_back(
    spider: DemoSpider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/contract.md §18.3: a failover's failed calls are tried again; the page is not left to
    its lease's expiry (LEASE_TIMEOUT) to be fetched again."""
    monkeypatch.setattr(spider_middleware, "ADMIT_RETRY_S", 0.02)
    runtime = _FailingAdmitRuntime(failures=2, lease_s=30)
    context, passed = _admitted(runtime, spider, "async")
    assert passed == [{"url": "http://a.com/"}] == runtime.passed
    assert runtime.abandoned == [] and not context.done and runtime.attempts == 3


def test_a_crawler_maintenance_task_that_fails_runs_again_in_its_next_round(caplog: pytest.LogCaptureFixture) -> None:
    """A LoopingCall whose function raises stops for good: one unexpected error of a failover (redis-py's
    cluster client raises RedisClusterException, no RedisError) would end the lease renewals of the
    crawler, every lease left to expire. Each round is kept apart: a failure is one line."""
    from twisted.internet import defer, task

    from crawlhive.crawler.runtime import CrawlRuntime

    failures: list[str] = []

    class Owner:  # what _kept_running uses of the runtime
        def backend_failed(self, what: str) -> None:
            failures.append(what)

    rounds: list[int] = []

    def renew_all() -> None:
        rounds.append(1)
        if len(rounds) == 1:
            raise redis.exceptions.SlotNotCoveredError('Slot "7" not covered by the cluster.')
        if len(rounds) == 2:
            raise KeyError("a bug")

    def read_seeds() -> defer.Deferred[None]:
        return defer.fail(redis.ConnectionError("refused"))

    clock = task.Clock()
    loops = [task.LoopingCall(CrawlRuntime._kept_running, Owner(), f) for f in (renew_all, read_seeds)]
    for loop in loops:
        loop.clock = clock
        loop.start(1.0, now=False)
    with caplog.at_level("ERROR", logger="crawlhive.crawler.runtime"):
        clock.advance(1)
        clock.advance(1)
        clock.advance(1)
    assert len(rounds) == 3 and all(loop.running for loop in loops)
    assert failures[0].startswith("renew_all failed (") and "check REDIS_URL" in failures[0]
    assert sum(f.startswith("read_seeds failed (") for f in failures) == 3
    assert "crawler task renew_all failed (KeyError('a bug'))" in caplog.text and "Traceback" not in caplog.text
    for loop in loops:
        loop.stop()


def test_the_wake_channel_says_once_per_outage_that_it_failed() -> None:
    """Resubscribing every second while a Redis node is down (a failover), the wake listener
    reported each attempt: a WARNING a second whenever another call had ended the outage meanwhile."""
    import socket
    import time

    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from crawlhive.crawler.scheduler import WakeListener

    with socket.socket() as probe:  # a port nothing listens on: connections are refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    class Owner:  # what WakeListener uses of the runtime
        redis = redis.Redis(port=port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
        failures: list[str] = []

        def backend_failed(self, what: str) -> None:
            self.failures.append(what)

    owner = Owner()
    listener = WakeListener(owner, "crawlhive-test:wake:link", lambda data: None)  # type: ignore[arg-type]
    listener.start(timeout_s=0.1)
    time.sleep(2.6)  # three attempts, a second apart
    listener.stop()
    owner.redis.close()
    assert len(owner.failures) == 1 and "wake channel crawlhive-test:wake:link failed" in owner.failures[0]


def test_a_maintenance_extension_can_be_switched_off() -> None:
    """The crawler's loops other than lease renewal are Scrapy extensions (crawler/extensions.py): a
    user's EXTENSIONS may switch one off, and Scrapy's extension manager then builds the others only."""
    from scrapy import Spider
    from scrapy.crawler import Crawler

    from crawlhive.crawler import extensions

    off = {"EXTENSIONS": {"crawlhive.crawler.extensions.ProgressLog": None}}
    converted = scrapy_settings(Settings.from_overrides(SCRAPY_SETTINGS=off), "link")
    assert converted["EXTENSIONS"]["crawlhive.crawler.extensions.ProgressLog"] is None
    assert converted["EXTENSIONS"]["crawlhive.crawler.extensions.HeartbeatLoop"] == 100
    scrapy_only = {k: v for k, v in converted.items() if k == "EXTENSIONS"}
    crawler = Crawler(Spider, {**scrapy_only, "TELNETCONSOLE_ENABLED": False, "TWISTED_REACTOR": None})
    crawler._apply_settings()  # what crawl() does first: stats, then the extension manager
    registered = [type(e) for e in extensions._REGISTERED[crawler]]
    assert registered == [extensions.HeartbeatLoop, extensions.StatsFlush, extensions.RedisOnlySeeds]


def test_built_in_spiders_process_their_one_item_a_page_with_one_worker() -> None:
    """Scrapy starts CONCURRENT_ITEMS worker tasks for every response: the built-in spiders, one
    item a page, get one; a user's spider (many items a page) 16; SCRAPY_SETTINGS still wins."""
    assert scrapy_settings(Settings.from_overrides(), "link")["CONCURRENT_ITEMS"] == 1
    assert scrapy_settings(Settings.from_overrides(), "wandering")["CONCURRENT_ITEMS"] == 1
    assert scrapy_settings(Settings.from_overrides(), "mypackage.spiders:Shop")["CONCURRENT_ITEMS"] == 16
    user = Settings.from_overrides(SCRAPY_SETTINGS={"CONCURRENT_ITEMS": 8})
    assert scrapy_settings(user, "link")["CONCURRENT_ITEMS"] == 8
