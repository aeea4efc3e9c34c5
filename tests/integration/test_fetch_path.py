"""The crawler's fetch path against hostile pages (docs/contract.md §10.2, §10.7, §14): a real
``crawlhive crawler`` that may reach 127.0.0.2 only (CRAWLER_ALLOWED_NETWORKS), a loopback test site,
and a plain TCP listener on 127.0.0.1 standing in for an FTP server that must never be reached.

The crawler runs a user spider (``rawlinks``): the link spider plus a ``Request`` for every
``<a class="raw">`` href, unchecked, as a careless spider would yield them (``filters_own_links``).
"""

from __future__ import annotations

import json
import secrets
import socket
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.crawler import TestSite, crawler_module, html, keys_for, seed

from crawlhive.utils.frontier import FrontierReader

pytestmark = pytest.mark.timeout(120)

ALLOWED = "127.0.0.2"
BLOCKED = "127.0.0.1"
SPIDER = "rawlinks"

SPIDER_MODULE = """
from scrapy import Request

from crawlhive.crawler.spiders.link import LinkSpider


class RawLinksSpider(LinkSpider):
    name = "rawlinks"

    def parse(self, response, **kwargs):
        yield from super().parse(response, **kwargs)
        for href in response.css("a.raw::attr(href)").getall():
            yield Request(href)
"""


class Listener:
    """A TCP server on loopback that greets like an FTP server and records every connection."""

    def __init__(self, host: str = BLOCKED) -> None:
        self.sock = socket.create_server((host, 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1.0)
                conn.sendall(b"220 hello\r\n")
                try:
                    self.accepted.append(conn.recv(1024))
                except OSError:
                    self.accepted.append(b"")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    site = TestSite()
    site.start()
    yield site
    site.stop()


@pytest.fixture(scope="module")
def ftp() -> Iterator[Listener]:
    listener = Listener()
    yield listener
    listener.close()


@pytest.fixture(scope="module")
def env(redis_url: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("fetch")
    package = home / "fetchspiders"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "raw.py").write_text(textwrap.dedent(SPIDER_MODULE))
    import os

    path = f"{home}:{os.environ.get('PYTHONPATH', '')}"
    with crawler_module(
        redis_url,
        kafka_bootstrap,
        home,
        "fp",
        spider=SPIDER,
        SPIDER_MODULES=["fetchspiders.raw"],
        PYTHONPATH=path,
        CRAWLER_ALLOWED_NETWORKS=[f"{ALLOWED}/32"],
        RETRY_TIMES=2,
    ) as env:
        yield env


def _crawl(env: dict[str, Any], **request: Any) -> str:
    crawlid = secrets.token_hex(4)
    seed(env["settings"], env["redis"], appid="fetchapp", crawlid=crawlid, spiderid=SPIDER, **request)
    return crawlid


def _urlset(*urls: str) -> bytes:
    entries = "".join(f"<url><loc>{u}</loc></url>" for u in urls)
    return (
        f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'.encode()
    )


# --- 1. http(s) only ------------------------------------------------------------------------------


def test_robots_sitemap_lines_for_ftp_and_file_are_never_fetched(
    env: dict[str, Any], ftp: Listener, tmp_path: Path
) -> None:
    """A robots.txt on an allowed host lists an ftp:// sitemap on a blocked address and a file://
    sitemap listing a page: neither is read (the listener gets no connection, the page listed in
    the local file is never fetched), while the http sitemap beside them is."""
    site = TestSite()  # its own robots.txt
    site.start()
    local = tmp_path / "local.xml"
    local.write_bytes(_urlset(site.url("/sx/secret", host=ALLOWED)))
    site.page(
        "/robots.txt",
        (
            "User-agent: *\nAllow: /\n"
            f"Sitemap: ftp://{BLOCKED}:{ftp.port}/x.xml\n"
            f"Sitemap: file://{local}\n"
            f"Sitemap: {site.url('/sx/map.xml', host=ALLOWED)}\n"
        ).encode(),
        content_type="text/plain",
    )
    site.page("/sx/map.xml", _urlset(site.url("/sx/listed", host=ALLOWED)), content_type="application/xml")
    for path in ("/sx/", "/sx/listed", "/sx/secret"):
        site.page(path, html())
    try:
        crawlid = _crawl(env, url=site.url("/sx/", host=ALLOWED), sitemap=True)
        env["collector"].wait_for(crawlid, 2, timeout=30)
        messages = env["collector"].settle(crawlid, 2.0)
    finally:
        site.stop()
    assert sorted(m["url"] for m in messages) == [site.url(p, host=ALLOWED) for p in ("/sx/", "/sx/listed")], messages
    assert all(m["_topic"].endswith(".crawled_firehose") for m in messages), messages
    assert site.hits("/sx/secret") == []
    assert ftp.accepted == []


def test_a_spider_s_file_and_ftp_requests_are_dropped_never_fetched(
    env: dict[str, Any], site: TestSite, ftp: Listener, tmp_path: Path
) -> None:
    """A user spider yields ``Request("file://…")`` and ``Request("ftp://…")`` for links of a page:
    they are dropped with their reason in the log, never fetched; its http request is."""
    local = tmp_path / "secret.html"
    local.write_text("<html><body>local secret</body></html>")
    raw = [f"file://{local}", f"ftp://{BLOCKED}:{ftp.port}/x.html", site.url("/raw/ok", host=ALLOWED)]
    site.page("/raw/0", html(extra="".join(f'<a class="raw" href="{u}">x</a>' for u in raw)))
    site.page("/raw/ok", html())
    crawlid = _crawl(env, url=site.url("/raw/0", host=ALLOWED))
    env["collector"].wait_for(crawlid, 2, timeout=30)
    messages = env["collector"].settle(crawlid, 2.0)
    assert sorted(m["url"] for m in messages) == [site.url(p, host=ALLOWED) for p in ("/raw/0", "/raw/ok")], messages
    assert all("local secret" not in str(m) for m in messages)
    assert ftp.accepted == []
    log = env["crawler"].output()
    assert "not an http(s) URL (scheme 'file')" in log and "not an http(s) URL (scheme 'ftp')" in log


def test_a_frontier_request_that_is_not_http_is_a_dead_letter(env: dict[str, Any], ftp: Listener) -> None:
    """A request in the frontier with an ftp:// URL (queued past the intake's checks) ends as a
    crawl dead letter naming its scheme, without a connection."""
    url = f"ftp://{BLOCKED}:{ftp.port}/seed.html"
    crawlid = _crawl(env, url=url)
    (letter,) = env["collector"].wait_for(crawlid, 1, timeout=30)
    assert letter["_topic"].endswith(".dead_letter") and letter["stage"] == "crawl", letter
    assert letter["url"] == url and letter["retry_times"] == 0
    assert letter["error"] == "not an http(s) URL (scheme 'ftp'): crawlers fetch http and https only"
    assert env["collector"].settle(crawlid, 1.0) == [letter]
    assert ftp.accepted == []


# --- 2. host names too long for IDNA ----------------------------------------------------------------


def test_links_with_huge_unicode_hosts_cost_nothing(env: dict[str, Any], site: TestSite) -> None:
    """A page with links whose host is 8,000 distinct CJK characters (IDNA-encoding one took 22 s on
    the reactor): the page's item arrives at once, the other link is followed, the long hosts are
    not queued."""
    hosts = ["".join(chr(0x4E00 + (i * 8000 + j)) for j in range(8000)) for i in range(3)]
    short = "".join(chr(0x4E00 + j) for j in range(1300)) + ".com"  # fits Scrapy's 4096-character scan
    site.page("/idn/0", html(*(f"http://{h}.com/" for h in hosts), "/idn/ok", "/idn/base", "/idn/jump"))
    site.page("/idn/ok", html())
    site.page("/idn/base", f'<html><head><base href="//{short}/"></head><body><a href="x">x</a></body></html>'.encode())
    location = f"http://{short}/".encode().decode("latin-1")  # sent as its UTF-8 bytes
    site.handler("/idn/jump", lambda _seen: (302, {"Location": location, "Content-Type": "text/html"}, b""))
    started = time.monotonic()
    crawlid = _crawl(env, url=site.url("/idn/0", host=ALLOWED), maxdepth=2)
    messages = env["collector"].wait_for(crawlid, 3, timeout=15)
    elapsed = time.monotonic() - started
    expected = [site.url(p, host=ALLOWED) for p in ("/idn/0", "/idn/base", "/idn/ok")]
    assert sorted(m["url"] for m in messages) == expected, messages
    assert elapsed < 5, elapsed  # the old code took over 60 s on this page
    (page,) = [m for m in messages if m["url"].endswith("/idn/0")]
    assert sorted(link["url"] for link in page["links"]) == [
        site.url(p, host=ALLOWED) for p in ("/idn/base", "/idn/jump", "/idn/ok")
    ]
    (based,) = [m for m in messages if m["url"].endswith("/idn/base")]
    assert based["links"] == []  # its <base> names no possible host (maxdepth 2: it was read)
    assert [s.path for s in site.hits("/idn/jump")] == ["/idn/jump"]  # the redirect: dropped, not retried
    assert env["collector"].settle(crawlid, 1.0) == messages


# --- 4. non-idempotent requests are not retried -----------------------------------------------------


def test_a_post_is_sent_once_a_get_is_retried(env: dict[str, Any], site: TestSite) -> None:
    """A 503 is retried for a GET (RETRY_TIMES=2: three attempts) but a POST is never replayed."""
    site.page("/once/post", b"busy", status=503, content_type="text/plain")
    site.page("/once/get", b"busy", status=503, content_type="text/plain")
    post = _crawl(env, url=site.url("/once/post", host=ALLOWED), method="POST", body="q=1")
    get = _crawl(env, url=site.url("/once/get", host=ALLOWED))
    (post_item,) = env["collector"].wait_for(post, 1, timeout=30)
    (get_item,) = env["collector"].wait_for(get, 1, timeout=30)
    assert env["collector"].settle(post, 1.0) == [post_item]
    assert (post_item["status_code"], get_item["status_code"]) == (503, 503)
    assert [(s.method, s.body) for s in site.hits("/once/post")] == [("POST", b"q=1")]
    assert [s.method for s in site.hits("/once/get")] == ["GET"] * 3


# --- 3. every redirect hop obeys its domain's throttle ---------------------------------------------


def test_each_redirect_hop_waits_for_its_domain_s_throttle(env: dict[str, Any], site: TestSite) -> None:
    """A chain of 4 redirects on a domain limited to 1 fetch a second (domain-config): the site sees
    the 5 fetches of the chain at least a second apart (they came back to back before: Scrapy's
    RedirectMiddleware hands each hop to the scheduler, which served it without the throttle)."""
    hops = 4
    for i in range(hops):
        site.handler(
            f"/chain/{i}", lambda _seen, i=i: (302, {"Location": f"/chain/{i + 1}", "Content-Type": "text/html"}, b"")
        )
    site.page(f"/chain/{hops}", html())
    client, keys = env["redis"], keys_for(env["settings"]["REDIS_KEY_PREFIX"], env["redis"])
    config = keys.domain_config(keys.shard_of(ALLOWED))
    client.hset(config, ALLOWED, json.dumps({"hits": 1, "window": 1, "scale": 1.0}))
    try:
        crawlid = _crawl(env, url=site.url("/chain/0", host=ALLOWED))
        (item,) = env["collector"].wait_for(crawlid, 1, timeout=30)
    finally:
        client.hdel(config, ALLOWED)
    assert item["response_url"] == site.url(f"/chain/{hops}", host=ALLOWED) and item["status_code"] == 200, item
    starts = sorted(s.at for s in site.hits("/chain/"))
    assert len(starts) == hops + 1
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert min(gaps) >= 0.85, gaps  # one second apart, less connection jitter


def test_a_redirect_loop_ends_its_lease_at_once(env: dict[str, Any], site: TestSite) -> None:
    """A page that redirects to itself: Scrapy gives up after REDIRECT_MAX_TIMES (20) hops with an
    IgnoreRequest of its process_response, which no process_exception sees: the lease stayed in
    flight until given up (DOWNLOAD_TIMEOUT × 30), then the loop was fetched again. Now the page is
    dropped like a redirect the filters refuse: no item, no dead letter, nothing in flight."""
    site.handler("/loop", lambda _seen: (302, {"Location": "/loop", "Content-Type": "text/html"}, b""))
    crawlid = _crawl(env, url=site.url("/loop", host=ALLOWED))
    reader = FrontierReader.from_settings(env["redis"], env["settings"])
    deadline = time.monotonic() + 20
    while len(site.hits("/loop")) < 21 or reader.crawl_state(SPIDER, "fetchapp", crawlid).inflight:
        assert time.monotonic() < deadline, (len(site.hits("/loop")), reader.crawl_state(SPIDER, "fetchapp", crawlid))
        time.sleep(0.1)
    state = reader.crawl_state(SPIDER, "fetchapp", crawlid)
    assert (state.pending, state.inflight, state.crawled, state.failed) == (0, 0, 0, 0)
    assert env["collector"].settle(crawlid, 1.0) == []
    assert len(site.hits("/loop")) == 21  # the first fetch and 20 redirects
