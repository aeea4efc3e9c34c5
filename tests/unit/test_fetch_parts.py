"""The crawler's fetch path against hostile input, part by part (docs/contract.md §10.2, §10.7, §14):
http(s) only (download handlers, sitemaps, spider requests, frontier requests), link extraction
bounded on hostile hosts and link counts, non-idempotent requests never retried. The end-to-end
tests are in tests/integration/test_fetch_path.py."""

from __future__ import annotations

import time
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.http import HtmlResponse, TextResponse
from scrapy.utils.response import get_base_url, get_meta_refresh
from scrapy.utils.test import get_crawler

from crawlhive.crawler.leases import LeaseContext
from crawlhive.crawler.links import (
    MAX_IDN_HOSTS_PER_PAGE,
    LinkLimits,
    extract_links,
    in_scope,
    link_allowed,
    names_impossible_host,
)
from crawlhive.crawler.middlewares.redirects import PageHostGuardMiddleware
from crawlhive.crawler.requests import Unfetchable, child_request, scrapy_request, unfetchable
from crawlhive.crawler.settings import scrapy_settings
from crawlhive.crawler.sitemaps import discover
from crawlhive.utils.config.errors import SettingsError
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.hosts import host_problem
from crawlhive.utils.frontier import FrontierRequest, Lease

#: A host of 8,000 distinct CJK characters: IDNA-encoding it took 22 s.
HUGE_HOST = "".join(chr(0x4E00 + i) for i in range(8000)) + ".com"


class DemoSpider(Spider):
    name = "demo"


@pytest.fixture
def spider() -> DemoSpider:
    return DemoSpider.from_crawler(get_crawler(DemoSpider))


def _page(url: str, body: str) -> HtmlResponse:
    return HtmlResponse(url, body=body.encode(), encoding="utf-8", request=Request(url))


# --- http(s) only ---------------------------------------------------------------------------------


def test_only_the_http_download_handlers_exist() -> None:
    values = scrapy_settings(Settings.from_overrides(), "link")
    handlers = {**values["DOWNLOAD_HANDLERS_BASE"], **values["DOWNLOAD_HANDLERS"]}
    assert {scheme for scheme, handler in handlers.items() if handler} == {"http", "https"}
    assert {"ftp", "file", "s3", "data"} <= set(values["DOWNLOAD_HANDLERS"])


def test_a_user_may_replace_the_http_handler_but_not_enable_another_scheme() -> None:
    mine = "myproject.handlers.Impersonate"
    values = scrapy_settings(Settings.from_overrides(SCRAPY_SETTINGS={"DOWNLOAD_HANDLERS": {"https": mine}}), "link")
    assert values["DOWNLOAD_HANDLERS"]["https"] == mine and values["DOWNLOAD_HANDLERS"]["ftp"] is None
    for wrong, named in [
        ({"DOWNLOAD_HANDLERS": {"ftp": "scrapy.core.downloader.handlers.ftp.FTPDownloadHandler"}}, "'ftp'"),
        ({"DOWNLOAD_HANDLERS": {"FILE": "x.Y"}}, "'FILE'"),
        ({"DOWNLOAD_HANDLERS_BASE": {"file": "x.Y"}}, "DOWNLOAD_HANDLERS_BASE cannot be changed"),
        ({"DOWNLOAD_HANDLERS": ["ftp"]}, "must be a mapping"),
    ]:
        with pytest.raises(SettingsError, match=f"SCRAPY_SETTINGS: .*{named}"):
            scrapy_settings(Settings.from_overrides(SCRAPY_SETTINGS=wrong), "link")


def test_robots_sitemap_lines_other_than_http_are_skipped() -> None:
    robots = (
        b"User-agent: *\nSitemap: ftp://127.0.0.1:2121/x.xml\nSitemap: file:///etc/passwd\n"
        b"Sitemap: file:///dev/zero\nSitemap: data:text/xml,<urlset/>\nSitemap: s3://bucket/m.xml\n"
        b"Sitemap: https://a.com/ok.xml\nSitemap: /relative.xml\n"
    )
    response = TextResponse("http://a.com/robots.txt", body=robots, encoding="utf-8")
    found = discover(response, "robots", 1000)
    assert found is not None and found.sitemaps == ["https://a.com/ok.xml", "http://a.com/relative.xml"]


def test_sitemaps_pass_the_crawl_s_scope() -> None:
    crawl = FrontierRequest("http://a.com/", "app", "c1", allowed_domains=["a.com"], deny_regex=["map"])
    assert in_scope("http://a.com/map.xml", crawl)  # the link filters (deny_regex) do not apply
    assert not in_scope("http://b.com/map.xml", crawl)  # allowed_domains does
    assert not in_scope("ftp://a.com/map.xml", crawl)
    assert not in_scope(f"http://{HUGE_HOST}/map.xml", FrontierRequest("http://a.com/", "app", "c1"))
    assert not in_scope("http://" + "a" * 64 + ".com/", FrontierRequest("http://a.com/", "app", "c1"))


def test_unfetchable_names_the_scheme_not_the_url() -> None:
    assert unfetchable("http://a.com/") is None and unfetchable("HTTPS://a.com/") is None
    assert unfetchable("file:///etc/passwd") == "not an http(s) URL (scheme 'file'): crawlers fetch http and https only"
    assert unfetchable("/relative") == "not an http(s) URL (scheme none): crawlers fetch http and https only"
    assert len(unfetchable("x" * 100_000 + ":/y") or "") < 120


def test_a_spider_s_request_for_another_scheme_never_becomes_a_frontier_request(spider: DemoSpider) -> None:
    parent = FrontierRequest("http://a.com/", "app", "c1")
    for url in ("file:///etc/passwd", "ftp://127.0.0.1/x", "data:text/html,hi", "s3://bucket/key"):
        with pytest.raises(Unfetchable, match="not an http\\(s\\) URL"):
            child_request(parent, Request(url), spider)
    assert child_request(parent, Request("https://a.com/x"), spider).url == "https://a.com/x"


# --- host names too long for IDNA, links per page ----------------------------------------------------


def test_a_link_with_a_huge_unicode_host_is_dropped_at_once() -> None:
    page = _page(
        "http://a.com/",
        f'<a href="http://{HUGE_HOST}/">x</a><a href="//{HUGE_HOST}/">y</a><a href="/ok">ok</a>'
        f'<a href="http://{"b" * 8000}.com/">ascii</a><base href="http://a.com/">',
    )
    request = FrontierRequest("http://a.com/", "app", "c1")
    started = time.monotonic()
    urls = [link["url"] for link in extract_links(page, request)]
    assert time.monotonic() - started < 1.0  # the old code took over 40 s
    assert urls == ["http://a.com/ok"]
    assert not link_allowed(f"http://{HUGE_HOST}/", request)


def test_a_base_or_a_redirect_naming_an_impossible_host_is_refused_before_idna() -> None:
    """Scrapy reads a <base> (and a meta refresh) from the first 4096 characters and IDNA-encodes
    its host: a 1,300-character label there cost 2 s. Such a page has no links."""
    host = "".join(chr(0x4E00 + i) for i in range(1300)) + ".com"
    page = _page("http://a.com/", f'<base href="http:\\\\{host}/"><a href="x">x</a><a href="http://a.com/y">y</a>')
    started = time.monotonic()
    assert extract_links(page, FrontierRequest("http://a.com/", "app", "c1")) == []
    assert time.monotonic() - started < 0.5
    fine = _page("http://a.com/", '<base href="http://b.com/d/"><a href="x">x</a>')
    assert [link["url"] for link in extract_links(fine, FrontierRequest("http://a.com/", "app", "c1"))] == [
        "http://b.com/d/x"
    ]
    assert names_impossible_host(f'<meta http-equiv="Refresh" content="0; url=//u@{host}:80/">', "refresh")
    assert names_impossible_host(f"https:/\\{host}/", "")
    assert not names_impossible_host(f"<p>{host}</p><base href='/x'>", "<base")  # not an authority
    assert not names_impossible_host(f'<a href="//{host}/">', "<base")  # no <base>: not read
    assert not names_impossible_host('<base href="http://[::1]:80/"><base href="//b.com/">', "<base")


def test_any_spider_s_selector_and_the_meta_refresh_skip_an_impossible_host() -> None:
    """Scrapy reads <base> in ``response.selector`` (every ``response.css``) and a meta refresh in
    MetaRefreshMiddleware, IDNA-encoding their hosts: the page guard makes them read nothing."""
    host = "".join(chr(0x4E00 + i) for i in range(1300)) + ".com"
    body = f'<base href="//{host}/"><meta http-equiv="refresh" content="0;url=http://{host}/"><a href="x">x</a>'
    page = PageHostGuardMiddleware().process_response(Request("http://a.com/"), _page("http://a.com/", body))
    started = time.monotonic()
    assert page.css("a::attr(href)").getall() == ["x"] and get_base_url(page) == "http://a.com/"
    assert get_meta_refresh(page) == (None, None)
    assert time.monotonic() - started < 0.5
    fine = PageHostGuardMiddleware().process_response(
        Request("http://a.com/"),
        _page("http://a.com/", '<base href="http://b.com/"><meta http-equiv="refresh" content="0;url=/z">'),
    )
    assert get_base_url(fine) == "http://b.com/" and get_meta_refresh(fine) == (0.0, "http://b.com/z")


def test_links_to_many_distinct_unicode_hosts_are_bounded() -> None:
    """Hosts within the limits still cost IDNA up to ~4 ms a label: at most MAX_IDN_HOSTS_PER_PAGE
    distinct ones per page, the rest dropped and counted."""
    hosts = [f"{chr(0x4E00 + i)}{chr(0x5E00 + i)}.com" for i in range(MAX_IDN_HOSTS_PER_PAGE + 20)]
    page = _page("http://a.com/", "".join(f'<a href="http://{h}/p">x</a>' for h in hosts + hosts[:5]))
    capped: list[int] = []
    links = extract_links(page, FrontierRequest("http://a.com/", "app", "c1"), on_capped=capped.append)
    assert len(links) == MAX_IDN_HOSTS_PER_PAGE and capped == [20]


def test_the_nfkc_form_of_a_host_is_held_to_the_limits_too() -> None:
    ligature = "\ufdfa"  # one character, 18 once normalised (NFKC), as IDNA does first
    assert host_problem(ligature * 20 + ".com") is not None
    started = time.monotonic()
    links = "".join(f'<a href="http://{ligature * 60}{chr(0x4E00 + i)}.com/">x</a>' for i in range(50))
    assert extract_links(_page("http://a.com/", links), FrontierRequest("http://a.com/", "app", "c1")) == []
    assert time.monotonic() - started < 1.0


def test_an_href_over_the_url_length_limit_is_dropped_before_it_is_resolved() -> None:
    page = _page("http://a.com/", '<a href="/' + "%E4%B8%80" * 1000 + '">x</a><a href="/ok">ok</a>')
    request = FrontierRequest("http://a.com/", "app", "c1")
    assert [link["url"] for link in extract_links(page, request, LinkLimits(max_url_length=2083))] == [
        "http://a.com/ok"
    ]


def test_links_per_page_are_capped_and_the_rest_counted() -> None:
    page = _page("http://a.com/", "".join(f'<a href="/p{i}">{i}</a><a href="/p{i}">again</a>' for i in range(10)))
    request = FrontierRequest("http://a.com/", "app", "c1")
    capped: list[int] = []
    links = extract_links(page, request, LinkLimits(max_per_page=3), capped.append)
    assert [link["url"] for link in links] == ["http://a.com/p0", "http://a.com/p1", "http://a.com/p2"]
    assert capped == [15]  # the hrefs not examined: the second /p2, then /p3 … /p9 twice each
    assert len(extract_links(page, request, LinkLimits(max_per_page=0))) == 10
    assert LinkLimits.from_settings(Settings.from_overrides(LINK_MAX_PER_PAGE=7)).max_per_page == 7


# --- non-idempotent requests are not retried ----------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "retried"), [("GET", True), ("HEAD", True), ("PUT", True), ("POST", False), ("PATCH", False)]
)
def test_only_idempotent_requests_may_be_retried(spider: DemoSpider, method: str, retried: bool) -> None:
    seed = FrontierRequest("http://a.com/", "app", "c1", method=method)
    built = scrapy_request(seed, spider, LeaseContext(Lease(b"m", seed, 0.0)))
    assert bool(built.meta.get("dont_retry")) is not retried


def test_a_spider_may_opt_its_post_into_retries(spider: DemoSpider) -> None:
    parent = FrontierRequest("http://a.com/", "app", "c1")
    for meta, retried in (({}, False), ({"dont_retry": False}, True)):
        child = child_request(parent, Request("http://a.com/form", method="POST", meta=meta), spider)
        built = scrapy_request(child, spider, LeaseContext(Lease(b"m", child, 0.0)))
        assert built.method == "POST" and bool(built.meta.get("dont_retry")) is not retried


# --- a redirect hop takes a start of its domain's throttle (utils/backends/lua/throttle_take.lua) ---------------


def test_a_redirect_hop_obeys_the_throttle_the_pops_obey(redis_client: Any, names: Any) -> None:
    """One limit for pops and hops: a hop after a pop waits out the spacing; a granted hop records
    a start the next pop waits for; a Retry-After back-off and the blacklist hold hops too."""
    import json

    from crawlhive.utils.backends.keys import Keys
    from crawlhive.utils.backends.scripts import scripts
    from crawlhive.utils.frontier import Frontier, FrontierLeaser, ThrottleConfig, defer_domain

    keys = Keys(names.key_prefix)
    throttle = ThrottleConfig(hits=2, window_s=1.0, moderated=True, type_enabled=True, egress_id=None)
    worker = FrontierLeaser(redis_client, keys, lease_s=100, record_ttl_s=3600, throttle=throttle)
    take = scripts(redis_client)["throttle_take"]

    def hop(domain: str) -> float:
        keys_, args = worker.hop_call("link", domain)
        return int(take(keys=keys_, args=args)) / 1_000_000

    pipe = redis_client.pipeline(transaction=True)
    requests = [FrontierRequest(f"http://example.com/{i}", "app", "c1", request_id=str(i)) for i in range(3)]
    Frontier(redis_client, keys, record_ttl_s=3600).push(requests, pipe)
    pipe.execute()
    assert worker.pop("link").lease is not None
    assert 0.4 <= hop("example.com") <= 0.51  # moderated: window / hits after the pop
    time.sleep(0.5)
    assert hop("example.com") == 0  # granted: a start is recorded
    second = worker.pop("link")
    assert second.lease is None and second.wait_s is not None and second.wait_s > 0.4  # the hop's start counts
    assert hop("other.org") == 0 and 0.4 <= hop("other.org") <= 0.51  # each domain its own throttle
    redis_client.hset(keys.domain_config(), "slow.net", json.dumps({"hits": 1, "window": 60, "scale": 1.0}))
    assert hop("slow.net") == 0 and hop("slow.net") > 59  # domain-config applies
    defer_domain(redis_client, keys, "link", "later.io", 30.0)
    assert 29 <= hop("later.io") <= 30.01  # a Retry-After back-off applies
    redis_client.sadd(keys.domain_blacklist(), "banned.com")
    assert hop("banned.com") < 0  # blacklisted: the page is dropped


def test_a_redirect_hop_gets_its_referer_without_the_referer_spider_middleware(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Scrapy's RefererMiddleware is out of crawlhive's spider middleware chain (crawler/settings.py);
    the redirect middlewares keep one of their own: a hop's Referer follows REFERRER_POLICY, as
    before, and nothing warns at the engine's start (Scrapy's own lookup would)."""
    from scrapy import signals

    from crawlhive.crawler.middlewares.redirects import FrontierMetaRefreshMiddleware, FrontierRedirectMiddleware

    settings = scrapy_settings(Settings.from_overrides(), "link")
    assert settings["SPIDER_MIDDLEWARES"]["scrapy.spidermiddlewares.referer.RefererMiddleware"] is None
    for cls in (FrontierRedirectMiddleware, FrontierMetaRefreshMiddleware):
        crawler = get_crawler(Spider, {"REFERRER_POLICY": "no-referrer-when-downgrade"})
        middleware = cls.from_crawler(crawler)
        with caplog.at_level("WARNING"):
            crawler.signals.send_catch_log(signals.engine_started)
        assert not [r for r in caplog.records if r.levelname == "WARNING"], cls
        source = Request("http://a.example/page", headers={"If-None-Match": '"v1"'})
        hop = middleware._build_redirect_request(source, HtmlResponse("http://a.example/page", request=source),
                                                 url="http://b.example/next")  # fmt: skip
        assert hop.headers.get("Referer") == b"http://a.example/page"
        assert hop.headers.get("If-None-Match") is None  # and the page's validators stay behind
        downgrade = middleware._build_redirect_request(
            Request("https://a.example/s"), HtmlResponse("https://a.example/s"), url="http://b.example/plain"
        )
        assert downgrade.headers.get("Referer") is None  # the policy: no Referer from https to http
    off = get_crawler(Spider, {"REFERER_ENABLED": False})
    middleware = FrontierRedirectMiddleware.from_crawler(off)
    off.signals.send_catch_log(signals.engine_started)
    hop = middleware._build_redirect_request(
        Request("http://a.example/page"), HtmlResponse("http://a.example/page"), url="http://b.example/next"
    )
    assert hop.headers.get("Referer") is None
