"""Proxies end to end (docs/contract.md §21): real ``crawlhive crawler`` processes, loopback forward
proxies of our own (tests/support/proxies.py) and a loopback site that records which proxy each request came
through (``X-Via-Proxy``).

Covered: rotation across two proxies; a banning proxy resting for that domain while its requests
are sent through the other without a dead letter and without using their retries; every page
emitted; no credential in items, dead letters, the crawler's log or Redis's proxy counters; a
blocked target through a proxy refused before the proxy hears of it; every proxy resting → the
domain waits and resumes; sticky sessions keeping their proxy and cookies (sent to the port that
set them only); a 429 halving the domain's rate (adaptive throttle); one crawl's ban_regex never
making another crawl wait.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.crawler import (
    Crawler,
    Seen,
    TestSite,
    crawler_env,
    html,
    isolated_settings,
    keys_for,
    output_collector,
    redis_for,
    seed,
)
from support.proxies import CAPTCHA, LoopProxy, TlsSite

from crawlhive.crawler.view import CrawlerView
from crawlhive.redis_monitor.plugins.stats import StatsMonitor
from crawlhive.rest.cluster import ClusterView
from crawlhive.rest.metrics import RestMetrics
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.state.proxies import proxy_overview

pytestmark = pytest.mark.timeout(120)

PASSWORDS = ("pw-A-s3cret-4471", "pw-B-s3cret-9902")


@pytest.fixture
def proxies() -> Iterator[list[LoopProxy]]:
    started = [
        LoopProxy("A", user="alice", password=PASSWORDS[0]).start(),
        LoopProxy("B", user="bob", password=PASSWORDS[1]).start(),
    ]
    yield started
    for proxy in started:
        proxy.stop()


@pytest.fixture
def cluster(redis_url: str, kafka_bootstrap: str, tmp_path: Path, proxies: list[LoopProxy]) -> Iterator[dict[str, Any]]:
    """Settings of our own, a collector, and a function starting crawlers with overrides."""
    settings = isolated_settings(redis_url, kafka_bootstrap, tmp_path, "px")
    client = redis_for(redis_url)
    collector = output_collector(settings)
    crawlers: list[Crawler] = []

    def start(count: int = 1, **overrides: Any) -> list[Crawler]:
        values = {"PROXY_POOLS": {"res": [p.url for p in proxies], "solo": [proxies[0].url]}, **overrides}
        new = [Crawler(crawler_env(settings, **values), tmp_path) for _ in range(count)]
        crawlers.extend(new)
        new[0].wait_ready(client, settings["REDIS_KEY_PREFIX"], count=len(crawlers))
        return new

    try:
        yield {"settings": settings, "redis": client, "collector": collector, "start": start, "crawlers": crawlers}
    finally:
        for crawler in crawlers:
            crawler.kill()
        collector.close()
        prefix = settings["REDIS_KEY_PREFIX"]
        for key in client.scan_iter(f"{prefix}:*"):
            client.delete(key)


def _secrets_absent(text: str) -> None:
    for password in PASSWORDS:
        assert password not in text
    for user, password in zip(("alice", "bob"), PASSWORDS, strict=True):
        assert base64.b64encode(f"{user}:{password}".encode()).decode() not in text


def _via(seen: list[Seen]) -> list[str]:
    return [s.headers.get("X-Via-Proxy", "direct") for s in seen]


def test_rotation_a_ban_moves_traffic_to_the_other_proxy_and_no_credential_leaks(
    cluster: dict[str, Any], site: TestSite, proxies: list[LoopProxy]
) -> None:
    pages = [f"/r/{i}" for i in range(1, 13)]
    site.page("/r/0", html(*pages))
    for page in pages:
        site.page(page, html())
    proxies[0].ban("127.0.0.1", status=403, after=2)  # A serves two requests, then is banned
    crawler = cluster["start"](PROXY_COOLDOWN=600, ROBOTSTXT_OBEY=False, RETRY_TIMES=0)[0]
    settings: Settings = cluster["settings"]
    seed(settings, cluster["redis"], appid="app", crawlid="rot", url=site.url("/r/0"), maxdepth=1, proxy_pool="res")
    items = cluster["collector"].wait_for("rot", 13, timeout=60)
    time.sleep(2)  # the proxy counters are flushed every second
    output = crawler.output()
    assert sorted(i["url"] for i in items) == sorted(site.url(p) for p in ["/r/0", *pages]), output
    assert {i["status_code"] for i in items} == {200}  # every page emitted, no ban in the output
    assert all(i["_topic"].endswith("crawled_firehose") for i in items)
    via = _via(site.hits("/r/"))
    assert "direct" not in via
    assert via.count("A") == 2 and via.count("B") == 11  # rotation across both, then B alone
    asked_a = [t for t in proxies[0].targets() if "/r/" in t]
    bans = len(asked_a) - 2  # at least PROXY_BAN_THRESHOLD in a row (more were in flight), then A rests
    assert bans >= 3
    # switched requests did not use retries (RETRY_TIMES 0) and left no dead letter
    assert not any("dead_letter" in i["_topic"] for i in cluster["collector"].of("rot"))
    # the proxies were asked with their credentials (Scrapy's Proxy-Authorization) …
    assert {a.authorization is not None for p in proxies for a in p.asked} == {True}
    # … which appear nowhere else
    _secrets_absent(json.dumps(items))
    _secrets_absent(output)
    assert not [line for line in output.splitlines() if " WARNING " in line or " ERROR " in line or "Traceback" in line]
    keys = keys_for(settings["REDIS_KEY_PREFIX"], cluster["redis"])
    counts = {k.decode(): int(v) for k, v in cluster["redis"].hgetall(keys.proxy_stats()).items()}
    _secrets_absent(json.dumps(counts))
    assert counts[f"res|{proxies[0].id}|ban"] == bans
    assert counts[f"res|{proxies[1].id}|ok"] >= 7
    rests = cluster["redis"].zrange(keys.proxy_rests(keys.shard_of("127.0.0.1")), 0, -1)
    assert rests == [f"res|{proxies[0].id}|127.0.0.1".encode()]
    # stats proxies, /metrics and the dashboard's card name proxies host:port, with no credential
    with_pools = settings.copy_with(PROXY_POOLS={"res": [p.url for p in proxies]})
    view = ClusterView(cluster["redis"], with_pools, {})
    overview = StatsMonitor(view.context)  # the proxy pools of with_pools
    answer = overview.body("proxies")["proxies"]
    assert answer["pools"]["res"][proxies[0].id]["requests"]["ban"] == bans
    assert list(answer["pools"]["res"][proxies[0].id]["resting"]) == ["127.0.0.1"]
    assert answer["pools"]["res"][proxies[1].id]["resting"] == {}
    metrics = RestMetrics(view, lambda: 0, lambda: 0).render().decode()
    line = f'crawlhive_proxy_requests_total{{outcome="ban",pool="res",proxy="{proxies[0].id}"}} {float(bans)}'
    assert line in metrics
    assert f'crawlhive_proxy_resting_domains{{pool="res",proxy="{proxies[0].id}"}} 1.0' in metrics
    card = CrawlerView.from_context("crawler", view.context).cards()["proxies"]  # the dashboard's proxies card
    assert {r["proxy"]: r["resting"] for r in card["rows"]} == {proxies[0].id: ["127.0.0.1"], proxies[1].id: []}
    for shown in (json.dumps(answer), metrics, json.dumps(card)):
        _secrets_absent(shown)
        assert "alice" not in shown and "bob" not in shown
    headers = [i["request_headers"] for i in items if "Proxy-Authorization" in i.get("request_headers", {})]
    assert all(h["Proxy-Authorization"] == ["[redacted]"] or h["Proxy-Authorization"] == "[redacted]" for h in headers)


def test_a_blocked_target_through_a_proxy_is_refused_before_the_proxy_hears_of_it(
    cluster: dict[str, Any], site: TestSite, proxies: list[LoopProxy]
) -> None:
    site.page("/g/0", html())
    # only 127.0.0.2 may be crawled; the proxies (on 127.0.0.1) are operator configuration
    cluster["start"](CRAWLER_ALLOWED_NETWORKS=["127.0.0.2/32"], ROBOTSTXT_OBEY=False)
    settings = cluster["settings"]
    seed(
        settings, cluster["redis"], appid="app", crawlid="ok", url=site.url("/g/0", host="127.0.0.2"), proxy_pool="res"
    )
    seed(settings, cluster["redis"], appid="app", crawlid="no", url=site.url("/g/0"), proxy_pool="res")
    allowed = cluster["collector"].wait_for("ok", 1, timeout=30)
    refused = cluster["collector"].wait_for("no", 1, timeout=30)
    assert [i["status_code"] for i in allowed] == [200]
    assert _via(site.hits("/g/0")) in (["A"], ["B"])  # through a proxy on a blocked network: allowed
    assert [m["_topic"].rsplit(".", 1)[-1] for m in refused] == ["dead_letter"]
    assert refused[0]["error"].startswith("blocked network: 127.0.0.1")
    asked = [t for p in proxies for t in p.targets()]
    assert asked == [site.url("/g/0", host="127.0.0.2")]  # never the blocked target
    assert [s.host for s in site.hits("/g/0")] == ["127.0.0.2"]


def test_when_every_proxy_rests_the_domain_waits_and_resumes(
    cluster: dict[str, Any], site: TestSite, proxies: list[LoopProxy]
) -> None:
    site.page("/w/0", html())
    proxies[0].ban("127.0.0.1", status=429)
    cluster["start"](PROXY_COOLDOWN=2, PROXY_BAN_THRESHOLD=1, ROBOTSTXT_OBEY=False, RETRY_TIMES=0, AUTOTHROTTLE=False)
    settings = cluster["settings"]
    seed(settings, cluster["redis"], appid="app", crawlid="w", url=site.url("/w/0"), proxy_pool="solo")
    keys = keys_for(settings["REDIS_KEY_PREFIX"], cluster["redis"])
    waiting_key = keys.proxy_waiting(keys.shard_of("127.0.0.1"))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not cluster["redis"].zcard(waiting_key):
        time.sleep(0.1)
    assert cluster["redis"].zrange(waiting_key, 0, -1) == [b"solo|127.0.0.1"]  # what stats proxies shows
    assert not cluster["collector"].of("w")  # waiting, not failed
    proxies[0].unban("127.0.0.1")
    items = cluster["collector"].wait_for("w", 1, timeout=30)
    assert [(i["status_code"], i["_topic"].rsplit(".", 1)[-1]) for i in items] == [(200, "crawled_firehose")]
    assert len([t for t in proxies[0].targets() if "/w/0" in t]) >= 2


def test_a_captcha_body_matching_ban_regex_is_a_ban(
    cluster: dict[str, Any], site: TestSite, proxies: list[LoopProxy]
) -> None:
    site.page("/c/0", html())
    proxies[0].ban("127.0.0.1", status=200, body=CAPTCHA)
    cluster["start"](ROBOTSTXT_OBEY=False, RETRY_TIMES=0)
    seed(
        cluster["settings"],
        cluster["redis"],
        appid="app",
        crawlid="cap",
        url=site.url("/c/0"),
        proxy_pool="res",
        ban_regex=["(?i)solve this captcha"],
    )
    items = cluster["collector"].wait_for("cap", 1, timeout=30)
    assert [i["status_code"] for i in items] == [200]
    assert "CAPTCHA" not in items[0]["body"]
    assert _via(site.hits("/c/0")) == ["B"]
    # a graceful stop flushes the proxy counters, quietly
    crawler = cluster["crawlers"][-1]
    assert crawler.terminate() == 0
    output = crawler.log_path.read_text()
    assert not [line for line in output.splitlines() if " WARNING " in line or " ERROR " in line or "Traceback" in line]
    keys = keys_for(cluster["settings"]["REDIS_KEY_PREFIX"], cluster["redis"])
    counts = {k.decode(): int(v) for k, v in cluster["redis"].hgetall(keys.proxy_stats()).items()}
    assert counts.get(f"res|{proxies[0].id}|ban", 0) >= 1 and counts.get(f"res|{proxies[1].id}|ok", 0) >= 1


def test_a_sticky_session_keeps_its_proxy_and_cookies(
    cluster: dict[str, Any], site: TestSite, proxies: list[LoopProxy]
) -> None:
    pages = [f"/s/{i}" for i in range(1, 6)]

    def first(_seen: Seen) -> tuple[int, dict[str, str], bytes]:
        return 200, {"Content-Type": "text/html", "Set-Cookie": "sid=abc123; Path=/"}, html(*pages)

    site.handler("/s/0", first)
    for page in pages:
        site.page(page, html())
    cluster["start"]()  # robots.txt obeyed: read through the crawl's pool too
    seed(
        cluster["settings"],
        cluster["redis"],
        appid="app",
        crawlid="st",
        url=site.url("/s/0"),
        maxdepth=1,
        proxy_pool="res",
        sticky="domain",
    )
    items = cluster["collector"].wait_for("st", 6, timeout=30)
    assert len(items) == 6
    hits = site.hits("/s/")
    assert len(set(_via(hits))) == 1  # one proxy for the whole session
    later = [s for s in hits if s.path != "/s/0"]
    assert later and all("sid=abc123" in s.headers.get("Cookie", "") for s in later)
    keys = keys_for(cluster["settings"]["REDIS_KEY_PREFIX"], cluster["redis"])
    session = cluster["redis"].hgetall(keys.proxy_session("link", "app", "st", "127.0.0.1"))
    jar = json.loads(session[b"cookies"])  # cookie-jar records (crawler/cookies.py)
    assert list(jar) == ["127.0.0.1 / sid"] and jar["127.0.0.1 / sid"][0] == "abc123"
    assert jar["127.0.0.1 / sid"][6] == str(site.port)  # kept to the port that set it
    assert session[b"proxy"].decode() == {"A": proxies[0].id, "B": proxies[1].id}[_via(hits)[0]]
    asked_robots = [t for p in proxies for t in p.targets() if t.endswith("/robots.txt")]
    assert asked_robots and set(_via(site.hits("/robots.txt"))) <= {"A", "B"}


def test_a_429_halves_the_domain_rate_cluster_wide(cluster: dict[str, Any], site: TestSite) -> None:
    answers = iter([429])

    def limited(_seen: Seen) -> tuple[int, dict[str, str], bytes]:
        return next(answers, 200), {"Content-Type": "text/html"}, html()

    site.handler("/t/0", limited)
    cluster["start"](2, ROBOTSTXT_OBEY=False, QUEUE_HITS=10, QUEUE_WINDOW=2)
    settings = cluster["settings"]
    seed(settings, cluster["redis"], appid="app", crawlid="t", url=site.url("/t/0"))  # direct: no pool
    items = cluster["collector"].wait_for("t", 1, timeout=30)
    assert [i["status_code"] for i in items] == [200]  # retried after the 429
    keys = keys_for(settings["REDIS_KEY_PREFIX"], cluster["redis"])
    value = cluster["redis"].hget(keys.autothrottle(keys.shard_of("127.0.0.1")), "127.0.0.1")
    assert value is not None and float(value.split()[0]) == 0.5
    # it recovers a step per window (2 s here) without a slow-down: what stats proxies shows
    since = int(value.split()[1]) / 1e6
    time.sleep(max(0.0, since + 4.2 - float(cluster["redis"].time()[0])))
    slowed = proxy_overview(cluster["redis"], keys, 2.0)["autothrottle"]
    assert slowed["127.0.0.1"]["factor"] >= 0.75


def test_a_proxy_that_cannot_be_reached_is_switched_without_using_retries(
    cluster: dict[str, Any], site: TestSite, proxies: list[LoopProxy]
) -> None:
    pages = [f"/f/{i}" for i in range(1, 7)]
    site.page("/f/0", html(*pages))
    for page in pages:
        site.page(page, html())
    proxies[0].refuse()  # connections to A are refused
    crawler = cluster["start"](ROBOTSTXT_OBEY=False, RETRY_TIMES=0)[0]
    settings = cluster["settings"]
    seed(settings, cluster["redis"], appid="app", crawlid="f", url=site.url("/f/0"), maxdepth=1, proxy_pool="res")
    items = cluster["collector"].wait_for("f", 7, timeout=60)
    assert sorted((i["url"], i["status_code"]) for i in items) == sorted(
        (site.url(p), 200) for p in ["/f/0", *pages]
    ), crawler.output()
    assert set(_via(site.hits("/f/"))) == {"B"}
    keys = keys_for(settings["REDIS_KEY_PREFIX"], cluster["redis"])
    time.sleep(1.5)
    counts = {k.decode(): int(v) for k, v in cluster["redis"].hgetall(keys.proxy_stats()).items()}
    assert counts.get(f"res|{proxies[0].id}|ban", 0) >= 1
    _secrets_absent(crawler.output())


def test_slow_responses_slow_their_domain_down(
    cluster: dict[str, Any], site: TestSite, proxies: list[LoopProxy]
) -> None:
    site.page("/l/0", html())
    proxies[0].delay_s = proxies[1].delay_s = 1.2  # both proxies answer slowly
    cluster["start"](ROBOTSTXT_OBEY=False, AUTOTHROTTLE_LATENCY=0.5, QUEUE_HITS=10, QUEUE_WINDOW=60)
    settings = cluster["settings"]
    seed(settings, cluster["redis"], appid="app", crawlid="l", url=site.url("/l/0"), proxy_pool="res")
    items = cluster["collector"].wait_for("l", 1, timeout=30)
    assert [i["status_code"] for i in items] == [200]  # a slow page is still a page
    keys = keys_for(settings["REDIS_KEY_PREFIX"], cluster["redis"])
    deadline = time.monotonic() + 5
    value = None
    while value is None and time.monotonic() < deadline:
        value = cluster["redis"].hget(keys.autothrottle(keys.shard_of("127.0.0.1")), "127.0.0.1")
        time.sleep(0.1)
    assert value is not None and float(value.split()[0]) == 0.5


def test_a_crawler_with_a_bad_proxy_url_refuses_to_start_naming_the_setting(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    settings = cluster["settings"]
    env = crawler_env(settings, PROXY_POOLS={"p": ["socks5://u:pw-Z-s3cret@127.0.0.1:1080"]})
    crawler = Crawler(env, tmp_path)
    code = crawler.proc.wait(60)
    output = crawler.output()
    crawler.log.close()
    assert code != 0
    assert "PROXY_POOLS (pool p)" in output and "not an http:// or https:// proxy URL" in output, output
    assert "pw-Z-s3cret" not in output
    assert "Traceback" not in output


def test_https_through_a_proxy_tunnels_and_a_blocked_https_target_is_never_connected(
    cluster: dict[str, Any], proxies: list[LoopProxy], tmp_path: Path
) -> None:
    site = TlsSite(tmp_path).start()
    try:
        cluster["start"](CRAWLER_ALLOWED_NETWORKS=["127.0.0.2/32"], ROBOTSTXT_OBEY=False)
        settings = cluster["settings"]
        seed(
            settings,
            cluster["redis"],
            appid="app",
            crawlid="tok",
            url=site.url("/a", host="127.0.0.2"),
            proxy_pool="res",
        )
        seed(settings, cluster["redis"], appid="app", crawlid="tno", url=site.url("/b"), proxy_pool="res")
        allowed = cluster["collector"].wait_for("tok", 1, timeout=30)
        refused = cluster["collector"].wait_for("tno", 1, timeout=30)
    finally:
        site.stop()
    assert [(i["status_code"], "secure" in i["body"]) for i in allowed] == [(200, True)]
    asked = [(a.method, a.target) for p in proxies for a in p.asked]
    assert asked == [("CONNECT", f"127.0.0.2:{site.port}")]  # a tunnel; never the blocked target
    assert site.seen == [("127.0.0.2", "/a")]
    assert [m["_topic"].rsplit(".", 1)[-1] for m in refused] == ["dead_letter"]
    assert refused[0]["error"].startswith("blocked network: 127.0.0.1")


def test_one_crawl_s_ban_regex_never_makes_another_crawl_wait(
    cluster: dict[str, Any], site: TestSite, proxies: list[LoopProxy]
) -> None:
    """The review's live probe: a crawl with ``ban_regex: ["(?s)."]`` (every page a ban) rests both
    proxies, for itself; another client's crawl of the same domain, sent after, is fetched at once
    through them (before: it waited out PROXY_COOLDOWN, 600 s here)."""
    hostile = [f"/h/{i}" for i in range(1, 4)]
    victim = [f"/v/{i}" for i in range(1, 6)]
    site.page("/h/0", html(*hostile))
    site.page("/v/0", html(*victim))
    for page in hostile + victim:
        site.page(page, html())
    cluster["start"](PROXY_COOLDOWN=600, ROBOTSTXT_OBEY=False, RETRY_TIMES=0)
    settings: Settings = cluster["settings"]
    client = cluster["redis"]
    seed(
        settings,
        client,
        appid="app",
        crawlid="hostile",
        url=site.url("/h/0"),
        maxdepth=1,
        proxy_pool="res",
        ban_regex=["(?s)."],
    )
    assert cluster["collector"].wait_for("hostile", 1, timeout=30)  # its seed, banned through every switch
    assert len(site.hits("/h/0")) == 6  # 1 + PROXY_MAX_SWITCHES: 3 bans through each proxy
    time.sleep(1.0)  # the bans are counted in Redis and the seed's links tried: they wait
    started = time.monotonic()
    seed(settings, client, appid="app", crawlid="victim", url=site.url("/v/0"), maxdepth=1, proxy_pool="res")
    items = cluster["collector"].wait_for("victim", 6, timeout=30)
    assert sorted(i["url"] for i in items) == sorted(site.url(p) for p in ["/v/0", *victim])
    assert time.monotonic() - started < 30
    assert "direct" not in _via(site.hits("/v/"))  # through the pool, not around it
    assert len(site.hits("/h/")) == 6  # the hostile crawl's own links wait (its seed: 6 attempts)
    keys = keys_for(settings["REDIS_KEY_PREFIX"], client)
    assert client.zcard(keys.proxy_waiting(keys.shard_of("127.0.0.1"))) == 0
    mine = keys.proxy_crawl_health("link", "app", "hostile", "res", "127.0.0.1")
    assert all(client.hget(mine, f"r:{p.id}") for p in proxies), client.hgetall(mine)  # both rest for it


def test_a_sticky_session_s_cookie_goes_back_to_its_own_port_only(
    cluster: dict[str, Any], site: TestSite, proxies: list[LoopProxy]
) -> None:
    """The review's probe: a cookie a site on ``127.0.0.2:P`` set in a sticky session was sent to
    ``127.0.0.2:Q`` (the same bucket, so the same session). Now the jar's rules hold: P's later
    pages get it, Q's never."""
    other = TestSite()
    other.start()
    try:

        def first(_seen: Seen) -> tuple[int, dict[str, str], bytes]:
            links = html(site.url("/c/2", host="127.0.0.2"), other.url("/c/1", host="127.0.0.2"))
            return 200, {"Content-Type": "text/html", "Set-Cookie": "sid=abc123; Path=/"}, links

        site.handler("/c/0", first)
        site.page("/c/2", html())
        other.page("/c/1", html())
        cluster["start"](ROBOTSTXT_OBEY=False)
        url = site.url("/c/0", host="127.0.0.2")
        seed(
            cluster["settings"],
            cluster["redis"],
            appid="app",
            crawlid="ports",
            url=url,
            maxdepth=1,
            proxy_pool="res",
            sticky="domain",
        )
        items = cluster["collector"].wait_for("ports", 3, timeout=30)
        assert len(items) == 3
        (same_port,) = site.hits("/c/2")
        (other_port,) = other.hits("/c/1")
    finally:
        other.stop()
    assert "sid=abc123" in same_port.headers.get("Cookie", "")
    assert "sid" not in other_port.headers.get("Cookie", "")
