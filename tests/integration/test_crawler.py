"""The crawler end to end: real Redis, real broker, a real ``crawlhive crawler`` subprocess, a
loopback web site served by the test. One crawler serves the whole module; each test uses its own
crawl ids and site paths."""

from __future__ import annotations

import json
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.crawler import Crawler, TestSite, crawler_env, crawler_module, html, keys_for, seed

from crawlhive.utils.backends.blobs import BlobStore
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import CrawlState, FrontierReader

pytestmark = pytest.mark.timeout(90)


def counters(env: dict[str, Any], crawlid: str) -> CrawlState:
    """What ``info`` reads of crawl testapp/*crawlid* (its counters summed over the frontier's shards)."""
    return FrontierReader.from_settings(env["redis"], env["settings"]).crawl_state("link", "testapp", crawlid)


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    site = TestSite()
    site.start()
    yield site
    site.stop()


@pytest.fixture(scope="module")
def env(redis_url: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("crawler")
    with crawler_module(redis_url, kafka_bootstrap, home, "t", RETRY_TIMES=2, DOWNLOAD_TIMEOUT=2) as env:
        yield env


def _crawl(env: dict[str, Any], **request: Any) -> str:
    crawlid = request.pop("crawlid", None) or secrets.token_hex(4)
    seed(env["settings"], env["redis"], appid="testapp", crawlid=crawlid, **request)
    return crawlid


def test_single_page_item_has_the_13_keys(env: dict[str, Any], site: TestSite) -> None:
    site.page("/one/", html("/one/a"))
    crawlid = _crawl(env, url=site.url("/one/"), attrs={"job": "x"})
    items = env["collector"].wait_for(crawlid, 1)
    assert len(items) == 1, env["crawler"].output()
    item = items[0]
    item.pop("_topic")
    assert set(item) == {
        "appid", "crawlid", "url", "response_url", "status_code", "status_msg", "response_headers",
        "request_headers", "body", "encoding", "links", "attrs", "timestamp", "protocol", "original_headers",
    }  # fmt: skip
    assert item["url"] == site.url("/one/")
    assert item["status_code"] == 200 and item["status_msg"] == "OK"
    assert item["links"] == []  # maxdepth 0: no extraction
    assert item["attrs"] == {"job": "x"}
    assert item["encoding"] == "utf-8"
    assert "/one/a" in item["body"]
    assert item["response_headers"]["Content-Type"] == ["text/html; charset=utf-8"]
    assert item["request_headers"]["User-Agent"][0].startswith("crawlhive/")


def _hits(site: TestSite, prefix: str) -> list[str]:
    return sorted(s.path for s in site.hits(prefix))


def test_depth_links_priority_and_attrs_at_every_depth(env: dict[str, Any], site: TestSite) -> None:
    site.page("/d/0", html("/d/1a", "/d/1b"))
    site.page("/d/1a", html("/d/2a"))
    site.page("/d/1b", html())
    site.page("/d/2a", html("/d/3a"))
    site.page("/d/3a", html())
    crawlid = _crawl(env, url=site.url("/d/0"), maxdepth=2, attrs={"a": 1})
    items = env["collector"].wait_for(crawlid, 4)
    items = env["collector"].settle(crawlid, 1.0)
    by_url = {i["url"]: i for i in items}
    assert sorted(by_url) == sorted(site.url(p) for p in ("/d/0", "/d/1a", "/d/1b", "/d/2a")), env["crawler"].output()
    assert by_url[site.url("/d/0")]["links"] == [
        {"url": site.url("/d/1a"), "text": "/d/1a"},
        {"url": site.url("/d/1b"), "text": "/d/1b"},
    ]
    assert by_url[site.url("/d/2a")]["links"] == []  # depth == maxdepth: no extraction
    assert all(i["attrs"] == {"a": 1} for i in items)
    assert _hits(site, "/d/3a") == []


def test_filters_deny_wins_and_default_extensions(env: dict[str, Any], site: TestSite) -> None:
    other = site.url("/f/other.html", host="127.0.0.2")
    site.page("/f/0", html("/f/keep.html", "/f/doc.PDF", "/f/deny/x.html", "/g/outside.html", other, "mailto:a@b.c"))
    for path in ("/f/keep.html", "/f/doc.PDF", "/f/deny/x.html", "/g/outside.html"):
        site.page(path, html())
    crawlid = _crawl(
        env,
        url=site.url("/f/0"),
        maxdepth=1,
        allowed_domains=["127.0.0.1"],
        allow_regex=["/f/"],
        deny_regex=["deny"],
    )
    items = env["collector"].wait_for(crawlid, 2)
    items = env["collector"].settle(crawlid, 1.0)
    seed_item = next(i for i in items if i["url"] == site.url("/f/0"))
    assert [link["url"] for link in seed_item["links"]] == [site.url("/f/keep.html")]
    assert sorted(i["url"] for i in items) == sorted([site.url("/f/0"), site.url("/f/keep.html")])

    crawlid = _crawl(env, url=site.url("/f/0"), maxdepth=1, deny_extensions=[".html"], deny_regex=["deny"])
    items = env["collector"].wait_for(crawlid, 2)
    items = env["collector"].settle(crawlid, 1.0)
    seed_item = next(i for i in items if i["url"] == site.url("/f/0"))
    assert [link["url"] for link in seed_item["links"]] == [site.url("/f/doc.PDF")]


def test_a_catastrophic_allow_regex_does_not_stall_the_crawler(env: dict[str, Any], site: TestSite) -> None:
    """``(a+)+$`` against a link ending in 40 ``a`` and a ``!``: hours in Python's re, nothing in RE2."""
    trap = "/re/" + "a" * 40 + "!"
    site.page("/re/0", html(trap, "/re/aaa"))
    site.page("/re/aaa", html())
    site.page(trap, html())
    crawlid = _crawl(env, url=site.url("/re/0"), maxdepth=1, allow_regex=["(a+)+$"])
    items = env["collector"].wait_for(crawlid, 2, timeout=15)
    items = env["collector"].settle(crawlid, 1.0)
    assert sorted(i["url"] for i in items) == [site.url("/re/0"), site.url("/re/aaa")], env["crawler"].output()


def test_responses_over_download_maxsize_are_dead_letters_raw_or_decoded(env: dict[str, Any], site: TestSite) -> None:
    """docs/contract.md §10.7: 8 MiB by default, counted as received and once decompressed (a
    compression bomb of 9 KB), each a ``response too large`` dead letter without retries."""
    import gzip

    limit = 8 * 1024 * 1024
    site.page("/big/raw", b"x" * (limit + 1), content_type="text/plain")
    bomb = gzip.compress(b"\0" * (limit + 1024))
    site.handler("/big/bomb", lambda _s: (200, {"Content-Type": "text/plain", "Content-Encoding": "gzip"}, bomb))
    fine = gzip.compress(b"<html><body>small and fine</body></html>")
    site.handler("/big/fine", lambda _s: (200, {"Content-Type": "text/html", "Content-Encoding": "gzip"}, fine))
    crawls = {path: _crawl(env, url=site.url(path)) for path in ("/big/raw", "/big/bomb", "/big/fine")}
    for path, detail in (
        ("/big/raw", f"more than {limit} bytes"),
        ("/big/bomb", f"more than {limit} bytes once decoded"),
    ):
        (letter,) = env["collector"].wait_for(crawls[path], 1)
        assert letter["_topic"].endswith(".dead_letter"), letter
        assert letter["error"] == f"response too large: {detail} (DOWNLOAD_MAXSIZE)"
        assert letter["retry_times"] == 0
        assert env["collector"].settle(crawls[path], 1.0) == [letter]
        assert len(site.hits(path)) == 1  # not retried
    (item,) = env["collector"].wait_for(crawls["/big/fine"], 1)
    assert item["body"] == "<html><body>small and fine</body></html>"


def test_a_redirect_out_of_allowed_domains_is_not_followed(env: dict[str, Any], site: TestSite) -> None:
    """docs/contract.md §10.7: a redirect is checked like a link of the crawl."""
    away, inside = site.url("/rd/away", host="127.0.0.2"), site.url("/rd/inside")
    site.handler("/rd/0", lambda _s: (302, {"Location": away, "Content-Type": "text/html"}, b""))
    site.handler("/rd/1", lambda _s: (302, {"Location": inside, "Content-Type": "text/html"}, b""))
    site.page("/rd/away", html())
    site.page("/rd/inside", html())
    crawlid = _crawl(env, url=site.url("/rd/0"), allowed_domains=["127.0.0.1"])
    followed = _crawl(env, url=site.url("/rd/1"), allowed_domains=["127.0.0.1"])
    (item,) = env["collector"].wait_for(followed, 1)
    assert item["response_url"] == inside
    key = keys_for(env["settings"]["REDIS_KEY_PREFIX"]).crawl("link", "testapp", crawlid)
    deadline = time.monotonic() + 15
    while counters(env, crawlid).inflight or not env["redis"].exists(key):
        assert time.monotonic() < deadline, env["redis"].hgetall(key)
        time.sleep(0.1)
    assert env["collector"].settle(crawlid, 1.0) == []  # dropped by policy: no item, no dead letter
    assert [s.host for s in site.hits("/rd/away")] == []


def test_domain_max_pages_gives_exactly_that_many_items(env: dict[str, Any], site: TestSite) -> None:
    links = [f"/cap/{i}" for i in range(10)]
    site.page("/cap/", html(*links))
    for link in links:
        site.page(link, html())
    crawlid = _crawl(env, url=site.url("/cap/"), maxdepth=1, domain_max_pages=4)
    env["collector"].wait_for(crawlid, 4)
    items = env["collector"].settle(crawlid, 1.5)
    assert len(items) == 4, [i["url"] for i in items]


def test_duplicates_are_fetched_once_and_seed_counts(env: dict[str, Any], site: TestSite) -> None:
    site.page("/u/0", html("/u/0", "/u/1", "/u/1#x", "/u/2"))
    site.page("/u/1", html("/u/0", "/u/2", "/u/1"))
    site.page("/u/2", html("/u/1"))
    crawlid = _crawl(env, url=site.url("/u/0"), maxdepth=3)
    env["collector"].wait_for(crawlid, 3)
    items = env["collector"].settle(crawlid, 1.5)
    assert sorted(i["url"] for i in items) == [site.url(f"/u/{n}") for n in range(3)]
    assert _hits(site, "/u/") == ["/u/0", "/u/1", "/u/2"]


def test_404_is_an_item_with_its_reason_phrase(env: dict[str, Any], site: TestSite) -> None:
    crawlid = _crawl(env, url=site.url("/nf/missing"))
    (item,) = env["collector"].wait_for(crawlid, 1)
    assert (item["status_code"], item["status_msg"]) == (404, "Not Found")


def test_retryable_status_is_retried_then_emitted(env: dict[str, Any], site: TestSite) -> None:
    site.page("/r/503", b"busy", status=503, content_type="text/plain")
    crawlid = _crawl(env, url=site.url("/r/503"))
    items = env["collector"].wait_for(crawlid, 1)
    items = env["collector"].settle(crawlid, 1.0)
    assert [(i["status_code"], i["status_msg"]) for i in items] == [(503, "Service Unavailable")]
    assert len(site.hits("/r/503")) == 3  # RETRY_TIMES=2: three attempts


def test_network_error_is_retried_then_dead_lettered(env: dict[str, Any], site: TestSite) -> None:
    crawlid = _crawl(env, url="http://127.0.0.1:1/closed")
    letters = env["collector"].wait_for(crawlid, 1)
    assert len(letters) == 1, env["crawler"].output()
    letter = letters[0]
    assert letter["_topic"].endswith(".dead_letter")
    assert letter["stage"] == "crawl" and letter["retry_times"] == 2
    assert letter["error"].startswith("ConnectionRefusedError: ")
    assert letter["url"] == "http://127.0.0.1:1/closed" and letter["spiderid"] == "link"
    assert set(letter) - {"_topic"} == {
        "stage",
        "error",
        "url",
        "appid",
        "crawlid",
        "spiderid",
        "retry_times",
        "server_time",
    }
    state = counters(env, crawlid)
    assert (state.failed, state.inflight) == (1, 0)


def test_useragent_everywhere_headers_and_cookies_only_on_the_seed_origin(env: dict[str, Any], site: TestSite) -> None:
    """docs/contract.md §3.7 and §10.6: credentials go to the seed's scheme, host and port only (not
    to another host of the same machine, not after a redirect elsewhere), and items redact them."""
    elsewhere = site.url("/s/landed", host="127.0.0.2")
    sibling = TestSite()  # the same host on another port: another origin, the same domain
    sibling.start()
    links = ["/s/same", "/s/jump", site.url("/s/other", host="127.0.0.2"), site.url("/s/named", "localhost")]
    site.page("/s/0", html(*links, sibling.url("/s/port")))
    for path in ("/s/same", "/s/other", "/s/named", "/s/landed"):
        site.page(path, html())
    sibling.page("/s/port", html())
    site.handler("/s/jump", lambda _seen: (302, {"Location": elsewhere, "Content-Type": "text/html"}, b""))
    crawlid = _crawl(
        env,
        url=site.url("/s/0"),
        maxdepth=1,
        useragent="ua-test/1",
        cookie="a=1; junk; b=2",
        cookies={"a": "9", "c": "3"},
        headers={"X-Test": "yes", "User-Agent": "ignored", "Authorization": "Bearer t0k"},
    )
    try:
        items = env["collector"].wait_for(crawlid, 6)
        items = env["collector"].settle(crawlid, 1.0)
    finally:
        sibling.stop()
    seen = {(s.host, s.path): s.headers for s in site.hits("/s/")}
    (port_hit,) = sibling.hits("/s/port")
    assert not {"X-Test", "Cookie", "Authorization"} & set(port_hit.headers), port_hit.headers
    for key in (("127.0.0.1", "/s/0"), ("127.0.0.1", "/s/same"), ("127.0.0.1", "/s/jump")):
        assert seen[key]["User-Agent"] == "ua-test/1"
        assert seen[key]["X-Test"] == "yes" and seen[key]["Authorization"] == "Bearer t0k"
        assert seen[key]["Cookie"] == "a=9; b=2; c=3"
    for key in (("127.0.0.2", "/s/other"), ("127.0.0.1", "/s/named"), ("127.0.0.2", "/s/landed")):
        assert seen[key]["User-Agent"] == "ua-test/1", key
        assert not {"X-Test", "Cookie", "Authorization"} & set(seen[key]), (key, seen[key])
    seed_item = next(i for i in items if i["url"] == site.url("/s/0"))
    assert seed_item["request_headers"]["Authorization"] == ["[redacted]"]
    assert seed_item["request_headers"]["Cookie"] == ["[redacted]"]
    assert seed_item["request_headers"]["X-Test"] == ["yes"]


def test_items_redact_every_request_header_whose_name_looks_secret(env: dict[str, Any], site: TestSite) -> None:
    """docs/contract.md §10.6: items reach a shared firehose; a crawl's API key, token or session
    header is sent to its site but shown there as "[redacted]", not only Authorization and Cookie."""
    site.page("/h/0", html())
    secret_headers = {
        "X-Api-Key": "k-123",
        "X-Auth-Token": "t-456",
        "X-Session-Id": "s-789",
        "X-Amz-Security-Token": "a-000",
        "X-Hub-Signature": "sha1=abc",
        "X-Client-Secret": "cs-111",
        "X-Db-Password": "pw-222",
        "X-Credentials": "cr-333",
    }
    crawlid = _crawl(env, url=site.url("/h/0"), headers={**secret_headers, "X-Test": "yes", "Accept-Language": "fr"})
    (item,) = env["collector"].wait_for(crawlid, 1)
    (hit,) = site.hits("/h/0")
    for name, value in secret_headers.items():
        assert hit.headers[name] == value  # sent to the site as asked
        assert item["request_headers"][name] == ["[redacted]"], name
    assert item["request_headers"]["X-Test"] == ["yes"] and item["request_headers"]["Accept-Language"] == ["fr"]
    assert not any(value in json.dumps(item) for value in secret_headers.values())


def test_post_seed_sends_method_and_body_links_are_get(env: dict[str, Any], site: TestSite) -> None:
    site.page("/p/0", html("/p/1"))
    site.page("/p/1", html())
    crawlid = _crawl(
        env,
        url=site.url("/p/0"),
        maxdepth=1,
        method="POST",
        body='{"q": "crawl"}',
        headers={"Content-Type": "application/json"},
    )
    env["collector"].wait_for(crawlid, 2)
    hits = {s.path: s for s in site.hits("/p/")}
    assert (hits["/p/0"].method, hits["/p/0"].body) == ("POST", b'{"q": "crawl"}')
    assert (hits["/p/1"].method, hits["/p/1"].body) == ("GET", b"")


def test_robots_disallowed_page_is_a_policy_drop(env: dict[str, Any], site: TestSite) -> None:
    site.page("/private/page", html())
    crawlid = _crawl(env, url=site.url("/private/page"))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and ((state := counters(env, crawlid)).pending or state.inflight):
        time.sleep(0.05)  # popped (robots.txt read) and ended
    state = counters(env, crawlid)
    assert (state.pending, state.inflight, state.crawled, state.failed) == (0, 0, 0, 0)
    assert env["collector"].settle(crawlid, 0.5) == []
    assert site.hits("/private/") == []


def test_redirect_item_has_pre_redirect_url(env: dict[str, Any], site: TestSite) -> None:
    site.handler("/rd/from", lambda _s: (302, {"Location": "/rd/to"}, b""))
    site.page("/rd/to", html())
    crawlid = _crawl(env, url=site.url("/rd/from"))
    (item,) = env["collector"].wait_for(crawlid, 1)
    assert item["url"] == site.url("/rd/from") and item["response_url"] == site.url("/rd/to")


def test_binary_body_is_latin1_text(env: dict[str, Any], site: TestSite) -> None:
    payload = bytes(range(256))
    site.page("/bin/x.bin", payload, content_type="application/octet-stream")
    crawlid = _crawl(env, url=site.url("/bin/x.bin"))
    (item,) = env["collector"].wait_for(crawlid, 1)
    assert item["encoding"] == "latin-1" and item["body"].encode("latin-1") == payload


def test_too_large_item_goes_by_reference_or_becomes_a_dead_letter(env: dict[str, Any], site: TestSite) -> None:
    """A page whose item exceeds the message limit is sent with its body in the blob store (§20.5);
    an item still too large without its body (huge attrs) is a dead letter, logged in one line."""
    page = b"<html><body>" + b"x" * 1_100_000 + b"</body></html>"
    site.page("/big/x", page)
    crawlid = _crawl(env, url=site.url("/big/x"))
    (item,) = env["collector"].wait_for(crawlid, 1, timeout=30)
    assert item["body"] is None and item["body_ref"]["size"] == len(page)
    assert BlobStore.from_settings(env["settings"]).resolve(item)["body"] == page.decode()

    site.page("/big/y", html())
    crawlid = _crawl(env, url=site.url("/big/y"), attrs={"note": "y" * 1_100_000})
    (letter,) = env["collector"].wait_for(crawlid, 1, timeout=30)
    assert letter["stage"] == "crawl"
    assert letter["error"].startswith("item too large: ") and letter["error"].endswith(
        " bytes > KAFKA_PRODUCER_MAX_REQUEST_SIZE 1048576"
    )
    # One short log line, without the item (Scrapy's own line is followed by the whole page item).
    deadline = time.monotonic() + 10
    while "Dropped: item too large" not in (log := env["crawler"].output()) and time.monotonic() < deadline:
        time.sleep(0.1)
    (line,) = [line for line in log.splitlines() if "Dropped: item too large" in line]
    assert len(line) < 600 and site.url("/big/y") in line, line[:2000]
    assert "x" * 100 not in log and "y" * 100 not in log and max(len(line) for line in log.splitlines()) < 5000


def test_expired_crawl_is_never_fetched(env: dict[str, Any], site: TestSite) -> None:
    import time

    site.page("/exp/0", html())
    crawlid = _crawl(env, url=site.url("/exp/0"), expires=int(time.time()) - 5)
    prefix = env["settings"]["REDIS_KEY_PREFIX"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and env["redis"].zcard(
        keys_for(prefix).crawl_queue("link", "testapp", crawlid, "127.0.0.1")
    ):
        time.sleep(0.05)
    time.sleep(0.3)
    assert site.hits("/exp/") == []
    assert env["collector"].of(crawlid) == []


def test_stop_drops_in_flight_page_and_its_links(env: dict[str, Any], site: TestSite) -> None:
    import time

    from crawlhive.utils.frontier import FrontierReader

    def slow(_seen: Any) -> tuple[int, dict[str, str], bytes]:
        time.sleep(1.0)
        return 200, {"Content-Type": "text/html"}, html("/stop/child")

    site.handler("/stop/0", slow)
    site.page("/stop/child", html())
    crawlid = _crawl(env, url=site.url("/stop/0"), maxdepth=1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not site.hits("/stop/0"):
        time.sleep(0.02)
    FrontierReader.from_settings(env["redis"], env["settings"]).purge("link", "testapp", crawlid)
    time.sleep(1.5)
    assert env["collector"].settle(crawlid, 0.5) == []
    assert site.hits("/stop/child") == []


def test_stats_and_heartbeat_name_the_spider(env: dict[str, Any], site: TestSite) -> None:
    import time

    from crawlhive.utils.state.heartbeat import live_heartbeats
    from crawlhive.utils.state.stats import CRAWLER, Stats, crawler_counter_name, machine_counter_name

    settings = env["settings"]
    site.page("/st/0", html())
    crawlid = _crawl(env, url=site.url("/st/0"))
    closed = _crawl(env, url="http://127.0.0.1:1/st-closed")  # a network failure counts as 504
    env["collector"].wait_for(crawlid, 1)
    env["collector"].wait_for(closed, 1, timeout=30)  # its dead letter, after the retries
    time.sleep(1.3)  # CRAWLER_STATS_FLUSH_S
    keys = keys_from_settings(settings)
    stats = Stats(env["redis"], keys, settings["STATS_TIMES"])
    assert stats.read(CRAWLER, crawler_counter_name("link", 200))["lifetime"] >= 1
    assert stats.read(CRAWLER, machine_counter_name(settings.node_name, 200))["lifetime"] >= 1
    assert stats.read(CRAWLER, crawler_counter_name("link", 504)).get("lifetime", 0) >= 1
    beats = live_heartbeats(env["redis"], keys, CRAWLER)
    assert [b["spider"] for b in beats] == ["link"]


@pytest.mark.parametrize("after_s", [0.8, 1.4, 2.0, 2.8])
def test_a_crawler_stopped_while_it_starts_stops_quietly(after_s: float, settings: Settings, tmp_path: Path) -> None:
    """SIGTERM at any moment of a crawler's start-up is a graceful stop: exit 0, no ERROR, no
    traceback (seen in the chaos test: one arriving while Scrapy built its middlewares was logged
    as ``crawler failed`` and the crawler exited 1). One arriving before the command installed
    its handlers (the first few hundred ms of imports) ends it as SIGTERM's default does."""
    crawler = Crawler(crawler_env(settings), tmp_path)
    time.sleep(after_s)
    code = crawler.terminate()
    output = crawler.output()
    assert code in (0, -signal.SIGTERM), output
    assert "Traceback" not in output and " ERROR " not in output, output
