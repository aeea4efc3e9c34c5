"""The impersonated fetch end to end (docs/contract.md §25): real ``crawlhive crawler`` processes
against :class:`~support.tls_site.FingerprintSite`, an HTTPS site in this process that computes
the JA3/JA4 of every ClientHello and the Akamai fingerprint of every HTTP/2 preface.

The reference fingerprints are the browsers' as public fingerprint databases list them (JA4's
cipher hash and the HTTP/2 SETTINGS / WINDOW_UPDATE / pseudo-header order of Chrome, Firefox and
Safari), not values read back from curl_cffi.
"""

from __future__ import annotations

import gzip
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.crawler import crawler_module, html, seed
from support.tls_site import FingerprintSite, Hello

pytestmark = pytest.mark.timeout(120)

#: Real browsers' fingerprints: JA4's cipher part (``a_b``'s *b*), GREASE, and the Akamai HTTP/2
#: fingerprint (SETTINGS|WINDOW_UPDATE|PRIORITY|pseudo-header order).
BROWSERS: dict[str, dict[str, Any]] = {
    "chrome": {
        "ja4_ciphers": "8daaf6152771",
        "grease": True,
        "akamai": "1:65536;2:0;4:6291456;6:262144|15663105|0|m,a,s,p",
        "user_agent": "Chrome/",
    },
    "firefox": {
        "ja4_ciphers": "8daaf6152771",
        "grease": False,
        "akamai": "1:65536;2:0;4:131072;5:16384|12517377|0|m,p,a,s",
        "user_agent": "Firefox/",
    },
    "safari": {
        "ja4_ciphers": "a09f3c656075",
        "grease": True,
        "akamai": "2:0;3:100;4:2097152;9:1|10420225|0|m,s,a,p",
        "user_agent": "Safari/",
    },
}


def browser_of(hello: Hello) -> str | None:
    """The browser whose fingerprints *hello*'s connection has, or None."""
    ja4 = hello.hello.ja4()
    for name, ref in BROWSERS.items():
        if (
            ja4.startswith("t13")
            and ja4.split("_")[1] == ref["ja4_ciphers"]
            and hello.hello.grease == ref["grease"]
            and hello.alpn == "h2"
            and hello.akamai == ref["akamai"]
        ):
            return name
    return None


@pytest.fixture(scope="module")
def site() -> Iterator[FingerprintSite]:
    site = FingerprintSite()
    site.start()
    yield site
    site.stop()


def _module(redis_url: str, kafka: str, tmp: pytest.TempPathFactory, name: str, **overrides: Any) -> Any:
    return crawler_module(
        redis_url,
        kafka,
        tmp.mktemp(name),
        name[:2],
        CRAWLER_ALLOWED_NETWORKS=["127.0.0.1/32"],
        RETRY_TIMES=0,
        **overrides,
    )


@pytest.fixture(scope="module")
def chrome(redis_url: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with _module(
        redis_url,
        kafka_bootstrap,
        tmp_path_factory,
        "imp",
        FETCH="impersonate",
        DOWNLOAD_MAXSIZE=200_000,
        DOWNLOAD_TIMEOUT=3,
    ) as env:
        yield env


def _crawl(env: dict[str, Any], url: str, **request: Any) -> str:
    crawlid = secrets.token_hex(4)
    seed(env["settings"], env["redis"], appid="fetchapp", crawlid=crawlid, url=url, **request)
    return crawlid


def test_the_impersonated_fetch_has_chromes_fingerprints_and_headers(
    chrome: dict[str, Any], site: FingerprintSite
) -> None:
    site.page("/c/page", html(title="chrome"))
    crawlid = _crawl(chrome, site.url("/c/page"))
    (item,) = chrome["collector"].wait_for(crawlid, 1)
    assert item.get("status_code") == 200 and "<title>chrome</title>" in item["body"], (
        item,
        chrome["crawler"].output()[-3000:],
    )
    assert item["protocol"] == "h2" and item["fetch"] == "impersonate"
    assert "User-Agent" not in item["request_headers"], item["request_headers"]  # crawlhive's was not sent
    (hello,) = site.hits("/c/page")
    assert browser_of(hello) == "chrome", (hello.hello.ja4(), hello.akamai)
    # The profile's own headers, in its order, agreeing with the fingerprint: not crawlhive's.
    agent = hello.header("user-agent") or ""
    assert "Chrome/" in agent and "crawlhive" not in agent, hello.headers
    major = agent.split("Chrome/", 1)[1].split(".", 1)[0]
    assert f'v="{major}"' in (hello.header("sec-ch-ua") or ""), hello.headers
    names = [n.lower() for n, _ in hello.headers]
    assert names.index("sec-ch-ua") < names.index("user-agent") < names.index("accept") < names.index("accept-encoding")
    assert "zstd" in (hello.header("accept-encoding") or "")
    # robots.txt went the same way (a wall would refuse it too)
    robots = [h for h in site.seen if h.path == "/robots.txt"]
    assert robots and all(browser_of(h) == "chrome" for h in robots)


@pytest.fixture(scope="module")
def plain(redis_url: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with _module(redis_url, kafka_bootstrap, tmp_path_factory, "pla") as env:
        yield env


@pytest.fixture(scope="module")
def auto(redis_url: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with _module(redis_url, kafka_bootstrap, tmp_path_factory, "aut", FETCH="auto") as env:
        yield env


def test_the_plain_fetch_has_no_browsers_fingerprint(plain: dict[str, Any], site: FingerprintSite) -> None:
    site.page("/p/page", html(title="plain"))
    crawlid = _crawl(plain, site.url("/p/page"))
    (item,) = plain["collector"].wait_for(crawlid, 1)
    assert item["status_code"] == 200 and "fetch" not in item, item  # plain by default: no rung said
    (hello,) = site.hits("/p/page")
    assert browser_of(hello) is None
    assert hello.akamai is None and "crawlhive" in (hello.header("user-agent") or "")


CHALLENGE = b"<html><head><title>Just a moment...</title></head><body>checking your browser</body></html>"


def wall(path: str, site: FingerprintSite, status: int = 403) -> None:
    """*path* answers a challenge page (*status*) to clients that are not browsers."""

    def answer(hello: Hello) -> tuple[int, list[tuple[str, str]], bytes]:
        if browser_of(hello) is None:
            return status, [("content-type", "text/html")], CHALLENGE
        links = [f"{path}/{i}" for i in range(1, 4)] if path.count("/") == 2 else []
        return 200, [("content-type", "text/html")], html(*links, title=f"behind {path}")

    site.pages[path] = answer


def test_auto_climbs_past_a_wall_and_the_site_starts_there_next(
    auto: dict[str, Any], plain: dict[str, Any], site: FingerprintSite
) -> None:
    wall("/w/0", site)
    for i in range(1, 4):
        wall(f"/w/0/{i}", site)
    crawlid = _crawl(auto, site.url("/w/0"), maxdepth=1)
    auto["collector"].wait_for(crawlid, 4)
    items = auto["collector"].settle(crawlid, 1.0)
    assert sorted((i["url"], i["status_code"], i.get("fetch")) for i in items) == [
        (site.url(p), 200, "impersonate") for p in ("/w/0", "/w/0/1", "/w/0/2", "/w/0/3")
    ], items
    # The seed: refused once plain, then fetched impersonated, no retry spent; its links started
    # impersonated (the site's rung remembered), so the wall never saw them plain.
    assert [browser_of(h) for h in site.hits("/w/0") if h.path == "/w/0"] == [None, "chrome"]
    assert [browser_of(h) for h in site.hits("/w/0/")] == ["chrome"] * 3
    key = auto["settings"]["REDIS_KEY_PREFIX"]
    remembered = [k for k in auto["redis"].scan_iter(match=f"{key}*fetch-rung:localhost")]
    assert len(remembered) == 1 and auto["redis"].get(remembered[0]) == b"impersonate"
    assert 0 < auto["redis"].ttl(remembered[0]) <= 86400
    # A plain crawl of the same wall gets the wall's answer, once.
    before = len(site.hits("/w/0"))
    crawlid = _crawl(plain, site.url("/w/0"), maxdepth=1)
    (item,) = plain["collector"].wait_for(crawlid, 1)
    assert item["status_code"] == 403 and "Just a moment" in item["body"], item
    assert plain["collector"].settle(crawlid, 1.0) == [item]
    assert len(site.hits("/w/0")) == before + 1


def test_auto_climbs_past_a_challenge_page_with_a_200(auto: dict[str, Any], site: FingerprintSite) -> None:
    """A challenge served with 200 is a wall by FETCH_WALL_PATTERNS (another site: 127.0.0.1)."""
    wall("/x/0", site, status=200)
    crawlid = _crawl(auto, site.url("/x/0", host="127.0.0.1"))
    (item,) = auto["collector"].wait_for(crawlid, 1)
    assert item["status_code"] == 200 and item["fetch"] == "impersonate" and "behind /x/0" in item["body"], item
    assert [browser_of(h) for h in site.hits("/x/0")] == [None, "chrome"]


def test_without_a_rendering_crawler_the_ladder_stops_at_impersonate(
    auto: dict[str, Any], site: FingerprintSite
) -> None:
    """A wall no fetch of a plain crawler gets past, and no rendering crawler runs (none beats on
    this prefix): the page's answer is the wall at ``impersonate``, and its item says why it went
    no higher; the site does not remember ``render``."""
    site.pages["/st/0"] = lambda _h: (403, [("content-type", "text/html")], CHALLENGE)
    crawlid = _crawl(auto, site.url("/st/0", host="127.0.0.1"))
    (item,) = auto["collector"].wait_for(crawlid, 1)
    assert item["status_code"] == 403 and item["fetch"] == "impersonate", item
    start = "start one with `crawlhive crawler --spider link --render`"
    assert item["fetch_stopped"] == f"no live rendering crawler serves spider type 'link' ({start})", item
    # plain then impersonated, or impersonated at once (127.0.0.1 remembers it from another test)
    assert [browser_of(h) for h in site.hits("/st/0")] in ([None, "chrome"], ["chrome"])
    assert auto["collector"].settle(crawlid, 1.0) == [item]
    key = auto["settings"]["REDIS_KEY_PREFIX"]
    assert [auto["redis"].get(k) for k in auto["redis"].scan_iter(match=f"{key}*fetch-rung:127.0.0.1")] in (
        [],
        [b"impersonate"],
    )


@pytest.mark.parametrize("profile", ["firefox", "safari"])
def test_other_profiles_have_their_browsers_fingerprints(
    redis_url: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, site: FingerprintSite, profile: str
) -> None:
    path = f"/{profile}/page"
    site.page(path, html(title=profile))
    with _module(
        redis_url, kafka_bootstrap, tmp_path_factory, profile, FETCH="impersonate", FETCH_PROFILE=profile
    ) as env:
        crawlid = _crawl(env, site.url(path))
        (item,) = env["collector"].wait_for(crawlid, 1)
    assert item["status_code"] == 200, item
    (hello,) = site.hits(path)
    assert browser_of(hello) == profile, (hello.hello.ja4(), hello.akamai)
    assert BROWSERS[profile]["user_agent"] in (hello.header("user-agent") or "")


def test_cookies_and_crawl_headers_are_sent_and_set_cookie_is_not_kept(
    chrome: dict[str, Any], site: FingerprintSite
) -> None:
    site.pages["/k/0"] = lambda _h: (
        200,
        [("content-type", "text/html"), ("set-cookie", "tracker=1; Path=/")],
        html("/k/1"),
    )
    site.page("/k/1", html())
    crawlid = _crawl(chrome, site.url("/k/0"), maxdepth=1, cookie="session=abc", headers={"X-Crawl": "yes"})
    chrome["collector"].wait_for(crawlid, 2)
    first, second = (site.hits(p)[0] for p in ("/k/0", "/k/1"))
    assert first.header("cookie") == "session=abc" and first.header("x-crawl") == "yes", first.headers
    assert "tracker" not in (second.header("cookie") or ""), second.headers  # no jar between pages


def test_download_maxsize_holds_raw_and_decoded(chrome: dict[str, Any], site: FingerprintSite) -> None:
    limit = 200_000
    site.page("/big/raw", b"x" * (limit + 1))
    bomb = gzip.compress(b"\0" * (limit * 5))
    site.pages["/big/bomb"] = lambda _h: (200, [("content-type", "text/plain"), ("content-encoding", "gzip")], bomb)
    fine = gzip.compress(b"<html><body>small and fine</body></html>")
    site.pages["/big/fine"] = lambda _h: (200, [("content-type", "text/html"), ("content-encoding", "gzip")], fine)
    crawls = {path: _crawl(chrome, site.url(path)) for path in ("/big/raw", "/big/bomb", "/big/fine")}
    for path, detail in (
        ("/big/raw", f"more than {limit} bytes"),
        ("/big/bomb", f"more than {limit} bytes once decoded"),
    ):
        (letter,) = chrome["collector"].wait_for(crawls[path], 1)
        assert letter["_topic"].endswith(".dead_letter"), letter
        assert letter["error"] == f"response too large: {detail} (DOWNLOAD_MAXSIZE)"
        assert letter["retry_times"] == 0
    (item,) = chrome["collector"].wait_for(crawls["/big/fine"], 1)
    assert item["body"] == "<html><body>small and fine</body></html>"
    assert item["original_headers"].get("Content-Encoding") == ["gzip"], item["original_headers"]


def test_download_timeout_holds(chrome: dict[str, Any], site: FingerprintSite) -> None:
    """Last: the slow page holds its HTTP/2 connection's thread in the test site."""

    def slow(_hello: Hello) -> tuple[int, list[tuple[str, str]], bytes]:
        time.sleep(6)
        return 200, [("content-type", "text/html")], html()

    site.pages["/slow/page"] = slow
    crawlid = _crawl(chrome, site.url("/slow/page"))
    (letter,) = chrome["collector"].wait_for(crawlid, 1, timeout=30)
    assert letter["_topic"].endswith(".dead_letter"), letter
    # curl's own error named (as Twisted's is for plain fetches): cut at DOWNLOAD_TIMEOUT, 3 s
    assert letter["error"].startswith("Timeout: ") and "3 seconds" in letter["error"], letter


def test_curl_connects_to_the_pinned_address_and_never_resolves_the_name(site: FingerprintSite) -> None:
    """DNS rebinding (§10.2): the impersonated fetch hands curl the address the guard checked
    (``CURLOPT_RESOLVE``, per request through the session's context variable) and curl connects
    there without a lookup of its own: ``.invalid`` names never resolve (RFC 6761), so only the
    pin can take these requests to the site; two concurrent requests keep their own pins."""
    import asyncio

    from curl_cffi.const import CurlOpt

    from crawlhive.crawler.impersonate import _REQUEST_OPTIONS, _resolve_entry, _session_class

    site.page("/pin/page", html(title="pinned"))
    other = FingerprintSite(hosts=("127.0.0.2",))
    other.page("/pin/page", html(title="other"))
    other.start()

    async def fetch(session: Any, address: str, port: int) -> tuple[int, str]:
        _REQUEST_OPTIONS.set({CurlOpt.RESOLVE: [_resolve_entry("rebind.invalid", port, address)]})
        response = await session.request(
            "GET", f"https://rebind.invalid:{port}/pin/page", impersonate="chrome152", verify=False
        )
        return response.status_code, response.text

    async def main() -> list[tuple[int, str]]:
        session = _session_class()(verify=False, trust_env=False)
        try:
            return list(
                await asyncio.gather(
                    asyncio.create_task(fetch(session, "127.0.0.1", site.port)),
                    asyncio.create_task(fetch(session, "127.0.0.2", other.port)),
                )
            )
        finally:
            await session.close()

    try:
        (first, second) = asyncio.run(main())
    finally:
        other.stop()
    assert first[0] == 200 and "<title>pinned</title>" in first[1]
    assert second[0] == 200 and "<title>other</title>" in second[1]
    assert [h.hello.sni for h in site.hits("/pin/")] == ["rebind.invalid"]  # the name, at the pinned address


def test_a_connection_elsewhere_than_the_pin_carries_nothing(site: FingerprintSite) -> None:
    """Fail-closed pinning (§25.4): were curl to ignore ``CURLOPT_RESOLVE`` (played here by
    ``CURLOPT_CONNECT_TO``, which overrides it), its pre-request callback sees the address it is
    really connected to and aborts before a byte of the request is written; an address the guard
    refuses (what a rebinding DNS answer would give) is refused there too, IPv4-mapped or not.
    The other site would record any request that reached it."""
    import asyncio
    import ipaddress

    from curl_cffi import ffi, lib
    from curl_cffi.const import CurlOpt
    from curl_cffi.requests import exceptions as curl_errors

    from crawlhive.crawler.impersonate import (
        _REQUEST_OPTIONS,
        _REQUEST_PIN,
        Pin,
        _connection_refusal,
        _resolve_entry,
        _session_class,
    )
    from crawlhive.crawler.netguard import NetworkPolicy

    site.page("/fc/page", html(title="pinned"))
    other = FingerprintSite(hosts=("127.0.0.2",))
    other.page("/fc/page", html(title="elsewhere"))
    other.start()
    loopback = [ipaddress.ip_network("127.0.0.0/8")]
    only_first = NetworkPolicy(loopback, [ipaddress.ip_network("127.0.0.1/32")])
    only_second = NetworkPolicy(loopback, [ipaddress.ip_network("127.0.0.2/32")])

    async def fetch(pin: Pin | None, address: str, port: int, elsewhere: str | None = None) -> Any:
        options: dict[Any, Any] = {CurlOpt.RESOLVE: [_resolve_entry("pin.invalid", port, address)]}
        if elsewhere:  # an slist curl_cffi's setopt has no case for: made with libcurl's own call
            options[CurlOpt.CONNECT_TO] = lib.curl_slist_append(ffi.NULL, elsewhere.encode())
        _REQUEST_OPTIONS.set(options)
        _REQUEST_PIN.set(pin)
        session = _session_class()(verify=False, trust_env=False)
        try:
            response = await session.request("GET", f"https://pin.invalid:{port}/fc/page", impersonate="chrome152")
            return response
        except curl_errors.RequestException as exc:
            return exc
        finally:
            await session.close()

    ignored = f"pin.invalid:{site.port}:127.0.0.2:{other.port}"
    try:
        # curl connected elsewhere than the pin: aborted before the request was written
        pin = Pin("pin.invalid", "127.0.0.1", site.port, only_first)
        outcome = asyncio.run(fetch(pin, "127.0.0.1", site.port, ignored))
        assert isinstance(outcome, curl_errors.RequestException) and "(42)" in str(outcome), outcome
        assert pin.refused == (
            f"blocked network: pin.invalid was connected to 127.0.0.2:{other.port}, "
            f"not to the checked 127.0.0.1:{site.port} (the address pin did not hold)"
        )
        # the address itself refused by the guard (as a rebinding answer would be): aborted too
        pin = Pin("pin.invalid", "127.0.0.2", other.port, only_first)
        outcome = asyncio.run(fetch(pin, "::ffff:127.0.0.2", other.port))
        assert isinstance(outcome, curl_errors.RequestException), outcome
        assert (pin.refused or "").startswith("blocked network: pin.invalid (127.0.0.2) is in 127.0.0.0/8"), pin.refused
        assert other.hits("/fc/") == []  # neither request reached the other site
        # the check after the headers, on CURLINFO_PRIMARY_IP/PORT: the same verdict
        response = asyncio.run(fetch(None, "127.0.0.1", site.port, ignored))
        assert response.status_code == 200 and "elsewhere" in response.text  # what an unchecked curl delivers
        late = Pin("pin.invalid", "127.0.0.1", site.port, only_first)
        assert (_connection_refusal(response, late) or "").startswith("blocked network: pin.invalid was connected to")
        # the pin holding: the page is delivered, the address is the checked one
        pin = Pin("pin.invalid", "127.0.0.2", other.port, only_second)
        response = asyncio.run(fetch(pin, "127.0.0.2", other.port))
        assert pin.refused is None and response.status_code == 200 and "elsewhere" in response.text
        assert _connection_refusal(response, pin) is None
    finally:
        other.stop()
    assert len(other.hits("/fc/")) == 2  # the unchecked request and the allowed one


def test_a_domain_update_s_fetch_applies_where_the_crawl_says_none(
    plain: dict[str, Any], site: FingerprintSite
) -> None:
    """The redis-monitor's domain-config plugin stores ``fetch``; the plain crawler's pages of that
    domain then climb the ladder (the crawl says nothing, FETCH is plain)."""
    from support.crawler import keys_for

    from crawlhive.redis_monitor.plugins.domain_config import DomainConfigMonitor
    from crawlhive.utils.frontier import FrontierReader

    settings, client = plain["settings"], plain["redis"]
    monitor = DomainConfigMonitor(
        client, keys_for(settings["REDIS_KEY_PREFIX"], client), FrontierReader.from_settings(client, settings)
    )
    update = {"uuid": "u1", "appid": "fetchapp", "domain": "127.0.0.1", "action": "domain-update", "hits": 100}
    (answer,) = monitor.handle("domain-config", {**update, "window": 1, "scale": 1.0, "fetch": "auto"})
    assert "error" not in answer.message, answer
    wall("/d/0", site)
    crawlid = _crawl(plain, site.url("/d/0", host="127.0.0.1"))
    (item,) = plain["collector"].wait_for(crawlid, 1)
    assert item["status_code"] == 200 and item["fetch"] == "impersonate", item
    assert [browser_of(h) for h in site.hits("/d/0")] == [None, "chrome"]


def test_a_sticky_session_keeps_one_browser_and_a_ban_drops_it(
    redis_url: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, site: FingerprintSite
) -> None:
    """A sticky session (proxy + cookies, §21.2) also keeps one profile of FETCH_SESSION_PROFILES:
    every page through its proxy has that browser's TLS and HTTP/2 fingerprint and User-Agent; a
    ban (403) drops the session, and the next one, through the other proxy, is another browser.
    Each proxy's tunnels leave from their own loopback address, so the site knows the proxy."""
    from support.crawler import keys_for
    from support.proxies import LoopProxy

    from crawlhive.crawler.impersonate import session_profile

    proxies = {  # with credentials: curl sends Scrapy's Proxy-Authorization to the proxy alone
        "127.0.0.3": LoopProxy("A", user="alice", password="pw-a", source="127.0.0.3").start(),
        "127.0.0.4": LoopProxy("B", user="bob", password="pw-b", source="127.0.0.4").start(),
    }
    banned: list[str] = []

    def page(hello: Hello) -> tuple[int, list[tuple[str, str]], bytes]:
        if hello.path == "/s/0/2" and not banned:
            banned.append(hello.peer)
            return 403, [("content-type", "text/html")], b"<html>go away</html>"
        links = [f"/s/0/{i}" for i in range(1, 5)] if hello.path == "/s/0" else []
        return 200, [("content-type", "text/html")], html(*links)

    for path in ("/s/0", *(f"/s/0/{i}" for i in range(1, 5))):
        site.pages[path] = page
    profiles = ["chrome", "firefox", "safari"]
    try:
        with _module(
            redis_url,
            kafka_bootstrap,
            tmp_path_factory,
            "ses",
            FETCH="impersonate",
            PROXY_POOLS={"p": [p.url for p in proxies.values()]},
            PROXY_POOL_DEFAULT="p",
            FETCH_SESSION_PROFILES=profiles,
        ) as env:
            keys = keys_for(env["settings"]["REDIS_KEY_PREFIX"], env["redis"])
            # a crawl whose two possible sessions (one per proxy) are two different browsers
            for n in range(100):
                crawlid = f"sess{n}"
                session = keys.proxy_session("link", "fetchapp", crawlid, "localhost", None)
                expected = {peer: session_profile(f"{session}|{p.id}", profiles) for peer, p in proxies.items()}
                if len(set(expected.values())) == 2:
                    break
            seed(
                env["settings"],
                env["redis"],
                appid="fetchapp",
                crawlid=crawlid,
                url=site.url("/s/0"),
                maxdepth=1,
                sticky="domain",
            )
            env["collector"].wait_for(crawlid, 5, timeout=40)
            items = env["collector"].settle(crawlid, 1.5)
    finally:
        for proxy in proxies.values():
            proxy.stop()
    assert sorted((i["url"], i.get("status_code")) for i in items) == [
        (site.url(p), 200) for p in ("/s/0", *(f"/s/0/{i}" for i in range(1, 5)))
    ], [(i["url"], i.get("error")) for i in items]
    hits = site.hits("/s/")
    assert all(h.header("proxy-authorization") is None for h in hits)  # never to the site
    assert all(a.authorization for p in proxies.values() for a in p.asked), "a CONNECT without credentials"
    assert banned and {h.peer for h in hits} == set(proxies), [(h.path, h.peer) for h in hits]  # the ban moved it
    for peer, browser in expected.items():
        through = [h for h in hits if h.peer == peer]
        assert {browser_of(h) for h in through} == {browser}, [(h.path, browser_of(h)) for h in through]
        assert len({h.header("user-agent") for h in through}) == 1
        assert BROWSERS[browser]["user_agent"] in (through[0].header("user-agent") or "")


def test_redirects_go_through_the_frontier_and_robots_txt_is_obeyed(
    chrome: dict[str, Any], site: FingerprintSite
) -> None:
    """curl follows no redirect: Scrapy's redirect middleware queues the target (§10.7), fetched
    impersonated in its turn; a robots.txt ``Disallow`` holds for impersonated pages too."""
    site.pages["/rd/0"] = lambda _h: (302, [("location", "/rd/1"), ("content-type", "text/html")], b"")
    site.page("/rd/1", html(title="landed"))
    crawlid = _crawl(chrome, site.url("/rd/0"))
    (item,) = chrome["collector"].wait_for(crawlid, 1)
    assert item["response_url"] == site.url("/rd/1") and "landed" in item["body"], item
    assert [(h.path, browser_of(h)) for h in site.hits("/rd/")] == [("/rd/0", "chrome"), ("/rd/1", "chrome")]
    # robots.txt of 127.0.0.1 (another site than localhost's, whose robots.txt was read already)
    site.pages["/robots.txt"] = lambda _h: (200, [("content-type", "text/plain")], b"User-agent: *\nDisallow: /no/\n")
    site.page("/no/page", html())
    site.page("/yes/page", html("/no/page"))
    crawlid = _crawl(chrome, site.url("/yes/page", host="127.0.0.1"), maxdepth=1)
    chrome["collector"].wait_for(crawlid, 1)
    assert [i["url"] for i in chrome["collector"].settle(crawlid, 1.5)] == [site.url("/yes/page", host="127.0.0.1")]
    assert site.hits("/no/") == []


def test_certificates_are_checked_by_one_setting_for_both_fetches(
    redis_url: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, site: FingerprintSite
) -> None:
    """DOWNLOAD_VERIFY_CERTIFICATES (Scrapy's) on: the test CA is not trusted, so the plain fetch
    and the impersonated one (the domain's fetch) both refuse the site's certificate."""
    from support.crawler import keys_for

    from crawlhive.redis_monitor.plugins.domain_config import DomainConfigMonitor
    from crawlhive.utils.frontier import FrontierReader

    site.page("/v/page", html())
    scrapy = {"DOWNLOAD_VERIFY_CERTIFICATES": True}
    with _module(
        redis_url, kafka_bootstrap, tmp_path_factory, "ver", SCRAPY_SETTINGS=scrapy, ROBOTSTXT_OBEY=False
    ) as env:
        client, settings = env["redis"], env["settings"]
        keys = keys_for(settings["REDIS_KEY_PREFIX"], client)
        monitor = DomainConfigMonitor(client, keys, FrontierReader.from_settings(client, settings))
        update = {"uuid": "u2", "appid": "fetchapp", "domain": "127.0.0.1", "action": "domain-update", "hits": 100}
        monitor.handle("domain-config", {**update, "window": 1, "scale": 1.0, "fetch": "impersonate"})
        plain_id = _crawl(env, site.url("/v/page"))
        impersonated_id = _crawl(env, site.url("/v/page", host="127.0.0.1"))
        (plain,) = env["collector"].wait_for(plain_id, 1)
        (impersonated,) = env["collector"].wait_for(impersonated_id, 1)
    assert plain["_topic"].endswith(".dead_letter") and "certificate verify failed" in plain["error"], plain
    assert impersonated["_topic"].endswith(".dead_letter"), impersonated
    assert "(60)" in impersonated["error"] and "certificate" in impersonated["error"], impersonated
    assert site.hits("/v/") == []  # neither handshake finished


def test_a_crawl_s_own_fetch_wins(plain: dict[str, Any], site: FingerprintSite) -> None:
    """A crawl's ``fetch`` wins over FETCH (plain here): its pages climb the ladder."""
    wall("/own/0", site)
    crawlid = _crawl(plain, site.url("/own/0"), fetch="auto")
    (item,) = plain["collector"].wait_for(crawlid, 1)
    assert item["status_code"] == 200 and item["fetch"] == "impersonate", item
