"""Tenant boundaries of proxies, the adaptive throttle and sticky sessions (docs/contract.md §21),
through the crawler's own middlewares and their Lua scripts on a real Redis (the crawler's asyncio
batcher included): a tenant site of a shared suffix keeps its bans, rests and slow-downs to itself;
a crawl's ``ban_regex`` rests proxies for that crawl alone; the operator's domain pools win; a
``POST`` is never sent again through another proxy; a session's cookies follow cookie-jar rules."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest
import redis
from scrapy import Request
from scrapy.http import HtmlResponse, Response

from crawlhive.crawler import cookies
from crawlhive.crawler.batching import ScriptBatcher
from crawlhive.crawler.leases import LeaseContext
from crawlhive.crawler.proxy import (
    PROXY_USED,
    ProxyMiddleware,
    ProxyResponseMiddleware,
    ProxyState,
    RenderedThroughProxy,
)
from crawlhive.crawler.requests import CONTEXT, FAILURE
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import async_redis_from_settings
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import FrontierRequest, Lease, site_gate
from crawlhive.utils.rules.proxy_pools import ProxyPools

IDS = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]
POOLS = {"p": [f"http://{i}" for i in IDS], "q": ["http://127.0.0.1:9"]}
T = TypeVar("T")


class Leases:
    """What the middlewares call of the lease table: requests given back, with their wait."""

    def __init__(self) -> None:
        self.postponed: list[float] = []

    def postpone(self, context: LeaseContext, wait: float) -> None:
        self.postponed.append(wait)


def run(
    redis_settings: Settings,
    keys: Keys,
    test: Callable[[ProxyState], Awaitable[T]],
    render: bool = False,
    **overrides: Any,
) -> T:
    """*test* on a :class:`ProxyState` over the real Redis of *redis_settings* (the crawler's own
    batcher), with PROXY_POOLS = POOLS and *overrides*; of a rendering crawler with *render*."""
    settings = redis_settings.copy_with(PROXY_POOLS=POOLS, FRONTIER_SHARDS=keys.shards, **overrides)

    async def main() -> T:
        client = async_redis_from_settings(settings)
        runtime = SimpleNamespace(
            keys=keys, batcher=ScriptBatcher(client), leases=Leases(), settings=settings, render=render
        )
        state = ProxyState(runtime, settings, ProxyPools.from_settings(settings))  # type: ignore[arg-type]
        try:
            return await test(state)
        finally:
            await drained(state)
            await client.aclose()

    return asyncio.run(main())


async def drained(state: ProxyState) -> None:
    """Until the calls the middlewares fired without waiting have run."""
    batcher = state.runtime.batcher
    while batcher._pending or batcher._flushing is not None:
        await asyncio.sleep(0.005)


def page(url: str, appid: str = "app", crawlid: str = "c", **fields: Any) -> Request:
    crawl = FrontierRequest(url=url, appid=appid, crawlid=crawlid, **fields)
    return Request(url, meta={CONTEXT: LeaseContext(Lease(b"m", crawl, 0.0))})


async def chosen(state: ProxyState, url: str, crawlid: str = "c", times: int = 6, **fields: Any) -> set[str]:
    """The proxies the choice gives *times* requests for *url* of crawl *crawlid*."""
    middleware = ProxyMiddleware(state)
    found = set()
    for _ in range(times):
        request = page(url, crawlid=crawlid, **fields)
        context = request.meta[CONTEXT]
        result = await middleware._choose(context, *_scope(url), context.request.proxy_pool or "p")
        assert result is not None
        found.add(result[1].id)
    return found


def _scope(url: str) -> tuple[str, str | None]:
    from crawlhive.crawler.proxy import scope_of

    return scope_of(url)


def answer(
    state: ProxyState, request: Request, status: int = 200, body: bytes = b"<html></html>", **headers: Any
) -> Any:
    request.meta[PROXY_USED] = request.meta.get(PROXY_USED) or ("p", IDS[0], 0)
    response = HtmlResponse(request.url, status=status, body=body, headers=headers, request=request)
    return ProxyResponseMiddleware(state).process_response(request, response)


def test_a_tenant_site_s_bans_rest_proxies_for_that_site_not_its_siblings(
    redis_settings: Settings, redis_client: redis.Redis, keys: Keys
) -> None:
    """``mallory.github.io`` answering 403 through a proxy rests it for mallory.github.io; every
    other ``*.github.io`` site still gets it (before: the whole bucket ``github.io`` lost it)."""

    async def test(state: ProxyState) -> tuple[set[str], set[str]]:
        for _ in range(3):  # PROXY_BAN_THRESHOLD
            answer(state, page("http://mallory.github.io/x"), status=403)
        await drained(state)
        return await chosen(state, "http://mallory.github.io/y"), await chosen(state, "http://alice.github.io/")

    mallory, alice = run(redis_settings, keys, test)
    assert mallory == set(IDS[1:])
    assert alice == set(IDS)
    assert not redis_client.hget(keys.proxy_health("p", "github.io"), f"r:{IDS[0]}")
    rests = redis_client.zrange(keys.proxy_rests(keys.shard_of("github.io")), 0, -1)
    assert rests == [f"p|{IDS[0]}|mallory.github.io".encode()]


def test_a_crawl_s_ban_regex_rests_a_proxy_for_that_crawl_only(
    redis_settings: Settings, redis_client: redis.Redis, keys: Keys
) -> None:
    """``ban_regex: ["(?s)."]`` (every page a ban) rests proxies for the crawl that sent it; another
    client's crawl of the same domain keeps every proxy and is never told to wait."""

    async def test(state: ProxyState) -> tuple[set[str], set[str], Any]:
        for proxy in IDS:
            for _ in range(3):
                request = page("http://example.com/a", crawlid="hostile", ban_regex=["(?s)."])
                request.meta[PROXY_USED] = ("p", proxy, 0)
                again = answer(state, request)
                assert isinstance(again, Request)  # switched to another proxy, for that crawl
        await drained(state)
        others = await chosen(state, "http://example.com/b", crawlid="victim")
        mine = state.runtime.leases
        try:
            await chosen(state, "http://example.com/c", crawlid="hostile", times=1)
        except Exception as exc:  # noqa: BLE001 - the IgnoreRequest of a request that waits
            own = exc
        return others, set(mine.postponed), own

    others, postponed, own = run(redis_settings, keys, test)
    assert others == set(IDS)
    assert "every proxy of pool p rests for example.com" in str(own) and postponed
    assert redis_client.zcard(keys.proxy_waiting(keys.shard_of("example.com"))) == 0
    assert redis_client.zcard(keys.proxy_rests(keys.shard_of("example.com"))) == 0
    assert not redis_client.hgetall(keys.proxy_health("p", "example.com"))


def test_a_tenant_site_s_429_slows_that_site_down_not_its_bucket(
    redis_settings: Settings, redis_client: redis.Redis, keys: Keys
) -> None:
    """The adaptive throttle halves ``mallory.github.io``'s own rate: the site gate spaces its
    fetches; ``alice.github.io`` and the bucket ``github.io`` keep theirs."""

    async def test(state: ProxyState) -> None:
        response = answer(state, page("http://mallory.github.io/x"), status=429)
        assert isinstance(response, Response)

    run(redis_settings, keys, test, PROXY_BAN_STATUSES=[403], QUEUE_HITS=60, QUEUE_WINDOW=60.0)
    slowed = redis_client.hgetall(keys.autothrottle(keys.shard_of("github.io")))
    assert list(slowed) == [b"mallory.github.io"]
    assert float(slowed[b"mallory.github.io"].split()[0]) == 0.5
    gate = [site_gate(redis_client, keys, "github.io", "mallory.github.io", 60, 60.0) for _ in range(2)]
    assert gate[0] == 0 and 1.5 < gate[1] <= 2.0  # one fetch per 2 s: half of 60 per minute
    assert [site_gate(redis_client, keys, "github.io", "alice.github.io", 60, 60.0) for _ in range(3)] == [0, 0, 0]


def test_the_operator_s_domain_pool_wins_and_a_stored_domain_update_pool_is_ignored(
    redis_settings: Settings, redis_client: redis.Redis, keys: Keys
) -> None:
    stored = {"hits": 5, "window": 60, "scale": 1.0, "proxy_pool": "q"}
    redis_client.hset(keys.domain_config(keys.shard_of("other.com")), "other.com", json.dumps(stored))

    async def test(state: ProxyState) -> tuple[set[str], set[str]]:
        pinned = await chosen(state, "http://www.pinned.com/", proxy_pool="p", times=3)
        other = await chosen(state, "http://other.com/", proxy_pool="p", times=3)
        return pinned, other

    pinned, other = run(redis_settings, keys, test, PROXY_DOMAIN_POOLS={"pinned.com": "q"})
    assert pinned == {"127.0.0.1:9"}  # the operator's pool, over the crawl's
    assert other == set(IDS)  # the crawl's: a client's domain-update does not choose (updates off)


def test_a_post_is_never_sent_again_through_another_proxy(redis_settings: Settings, keys: Keys) -> None:
    async def test(state: ProxyState) -> tuple[Any, Any]:
        post = page("http://example.com/form").replace(method="POST", body=b"order=1")
        get = page("http://example.com/form")
        return answer(state, post, status=403), answer(state, get, status=403)

    post, get = run(redis_settings, keys, test)
    assert isinstance(post, Response) and post.status == 403  # its first answer is the page's
    assert isinstance(get, Request) and get.method == "GET"  # an idempotent request is switched


def test_the_session_jar_sends_a_cookie_only_where_cookie_rules_allow() -> None:
    def set_by(url: str, *headers: str, stored: str = "") -> str:
        changed = cookies.changes(stored, url, [h.encode() for h in headers], "example.com")
        assert changed is not None
        jar = {**json.loads(stored or "{}"), **changed[0]}
        for key in changed[1]:
            jar.pop(key)
        return json.dumps(jar)

    jar = set_by(
        "https://www.example.com:8443/a/page",
        "host=1",
        "wide=2; Domain=example.com; Path=/",
        "deep=3; Path=/a",
        "safe=4; Secure",
        "gone=5; Max-Age=0",
    )

    def sent(url: str) -> set[str]:
        value = cookies.header(jar, url, "example.com")
        return set(value.split("; ")) if value else set()

    # without a Path a cookie belongs to its page's directory, /a
    assert sent("https://www.example.com:8443/a/x") == {"deep=3", "host=1", "safe=4", "wide=2"}
    assert sent("https://www.example.com:8443/b") == {"wide=2"}  # the others: Path /a
    assert sent("https://shop.example.com:8443/a/x") == {"wide=2"}  # the others are host-only
    assert sent("https://www.example.com:9443/a/x") == set()  # another port
    assert sent("http://www.example.com:8443/a/x") == {"deep=3", "host=1", "wide=2"}  # not over http
    # a later answer deletes one (an expiry in the past) and replaces another
    jar = set_by(
        "https://www.example.com:8443/a/", "host=; Max-Age=0", "wide=9; Domain=.example.com; Path=/", stored=jar
    )
    assert sent("https://www.example.com:8443/a/x") == {"deep=3", "safe=4", "wide=9"}
    # a Domain outside the session's scope (or a host's it does not cover) is refused
    assert cookies.changes("", "http://www.example.com/", [b"x=1; Domain=com"], "example.com") is None
    assert cookies.changes("", "http://www.example.com/", [b"x=1; Domain=other.com"], "example.com") is None


def test_a_sticky_session_s_cookie_from_one_port_is_not_sent_to_another(
    redis_settings: Settings, redis_client: redis.Redis, keys: Keys
) -> None:
    """The probe of the review: a cookie set by ``127.0.0.2:P`` went to ``127.0.0.2:Q``. Through the
    middlewares and the session in Redis: it goes back to P only, and not over another path."""

    async def test(state: ProxyState) -> tuple[bytes | None, bytes | None, bytes | None]:
        first = page("http://127.0.0.2:8001/app/login", sticky="domain")
        await ProxyMiddleware(state)._choose(first.meta[CONTEXT], "127.0.0.2", None, "p")
        first.meta[PROXY_USED] = ("p", IDS[0], 0)
        answer(state, first, **{"Set-Cookie": ["sid=abc; Path=/app", "pref=1; Path=/"]})
        await drained(state)
        sent = []
        for url in ("http://127.0.0.2:8001/app/next", "http://127.0.0.2:8002/app/next", "http://127.0.0.2:8001/"):
            request = page(url, sticky="domain")
            result = await ProxyMiddleware(state)._choose(request.meta[CONTEXT], "127.0.0.2", None, "p")
            assert result is not None and result[1].id == IDS[0]  # the session's proxy
            ProxyMiddleware._session_cookies(request, result[3], "127.0.0.2")
            sent.append(request.headers.get(b"Cookie"))
        return sent[0], sent[1], sent[2]

    same, other_port, other_path = run(redis_settings, keys, test)
    assert same is not None and set(same.split(b"; ")) == {b"sid=abc", b"pref=1"}
    assert other_port is None
    assert other_path == b"pref=1"
    session = keys.proxy_session("link", "app", "c", "127.0.0.2")
    assert set(json.loads(redis_client.hget(session, "cookies"))) == {"127.0.0.2 /app sid", "127.0.0.2 / pref"}


def test_a_crawl_s_own_cookie_header_stays_and_the_session_s_is_replaced_on_a_switch() -> None:
    jar = json.dumps({"example.com / sid": ["s1", "example.com", False, "/", False, None, "80"]})
    request = Request("http://example.com/", headers={"Cookie": "mine=1"})
    ProxyMiddleware._session_cookies(request, jar, "example.com")
    assert request.headers.get(b"Cookie") == b"mine=1; sid=s1"
    again = request.replace()  # a switch, or a redirect on the same origin
    ProxyMiddleware._session_cookies(again, "", "example.com")  # the next session has no cookie yet
    assert again.headers.get(b"Cookie") == b"mine=1"


@pytest.mark.parametrize("url", ["http://example.com/", "http://mallory.github.io/"])
def test_scope_names_the_tenant_site_or_the_domain(url: str) -> None:
    expected = {
        "http://example.com/": ("example.com", None),
        "http://mallory.github.io/": ("github.io", "mallory.github.io"),
    }
    assert _scope(url) == expected[url]


def test_a_rendered_page_with_a_pool_is_a_dead_letter_never_a_direct_load(redis_settings: Settings, keys: Keys) -> None:
    """Rendering crawlers' browsers do not go through proxy pools: a page whose pool choice (its
    crawl's, the operator's, PROXY_POOL_DEFAULT) names one ends as a dead letter saying so, instead
    of being loaded from the crawler's own address (before: it was, silently)."""

    async def test(state: ProxyState) -> tuple[str, str | None]:
        middleware = ProxyMiddleware(state)
        pooled = page("http://example.com/", proxy_pool="p")
        try:
            await middleware.process_request(pooled)
            raised = ""
        except RenderedThroughProxy as exc:
            raised = str(exc)
        direct = page("http://other.com/")
        await middleware.process_request(direct)  # no pool: loaded as ever
        return raised, pooled.meta.get(FAILURE)

    raised, failure = run(redis_settings, keys, test, render=True)
    assert "render: true cannot go through a proxy: example.com is fetched through pool p" in raised
    assert failure == raised
    raised, _ = run(redis_settings, keys, test, render=True, PROXY_DOMAIN_POOLS={"example.com": "q"})
    assert "through pool q" in raised


def test_render_with_a_pool_is_refused_at_intake_naming_why() -> None:
    from crawlhive.utils.contract.validation import Accepted, Rejected
    from crawlhive.utils.process.intake import request_validator

    base = {"url": "http://example.com/", "appid": "app", "crawlid": "c", "render": True}
    pooled = request_validator(Settings.from_overrides(PROXY_POOLS=POOLS))
    refused = pooled.validate({**base, "proxy_pool": "p"})
    assert isinstance(refused, Rejected) and "render: true cannot be sent with proxy_pool" in refused.reason
    assert isinstance(pooled.validate(base), Accepted)  # no pool for it: rendered directly, as ever
    default = request_validator(Settings.from_overrides(PROXY_POOLS=POOLS, PROXY_POOL_DEFAULT="q"))
    refused = default.validate(base)
    assert isinstance(refused, Rejected) and "proxy pool q" in refused.reason and "/render" in refused.reason
    pins = Settings.from_overrides(PROXY_POOLS=POOLS, PROXY_DOMAIN_POOLS={"example.com": "q"})
    assert isinstance(request_validator(pins).validate(base), Rejected)
    assert isinstance(request_validator(pins).validate({**base, "url": "http://other.com/"}), Accepted)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({}, True),
        ({"REST_API_KEY": "k3y-for-rest"}, False),
        ({"REST_API_KEY": "k3y-for-rest", "METRICS_NAMES": True}, True),
    ],
)
def test_metrics_name_tenants_domains_and_proxies_only_where_no_key_guards_the_rest(
    redis_settings: Settings, redis_client: redis.Redis, keys: Keys, overrides: dict[str, Any], named: bool
) -> None:
    """``/metrics`` is the one path REST_API_KEY leaves open (for Prometheus): with a key set it
    names no tenant's domain and no proxy host unless METRICS_NAMES says so (METRICS_NAMES)."""
    from crawlhive.rest.cluster import ClusterView
    from crawlhive.rest.metrics import RestMetrics

    redis_client.zadd(keys.metrics_domains(), {"tenant-secret.example": 5})
    redis_client.hset(keys.proxy_stats(), f"p|{IDS[1]}|ok", 3)
    settings = redis_settings.copy_with(PROXY_POOLS=POOLS, FRONTIER_SHARDS=keys.shards, **overrides)
    text = RestMetrics(ClusterView(redis_client, settings, {}), lambda: 0, lambda: 0).render().decode()
    assert ("tenant-secret.example" in text) is named
    assert (IDS[1] in text) is named
    shown = IDS[1] if named else "2"  # its place in its pool otherwise
    assert f'crawlhive_proxy_requests_total{{outcome="ok",pool="p",proxy="{shown}"}} 3.0' in text


@pytest.mark.parametrize(
    ("url", "scope"),
    [
        ("http://localhost:8000/a", "localhost"),
        ("http://[::1]:8000/a", "::1"),
        ("http://127.0.0.1:8000/a", "127.0.0.1"),
    ],
)
def test_a_host_without_a_dot_keeps_its_session_cookies(url: str, scope: str) -> None:
    """http.cookiejar names a dotless host ``<host>.local`` (and keeps IPv6 brackets): its cookies
    are still within the session's scope, and go back to the same origin only."""
    changed = cookies.changes("", url, [b"sid=1; Path=/"], scope)
    assert changed is not None
    jar = json.dumps(changed[0])
    assert cookies.header(jar, url.replace(":8000/a", ":8000/b"), scope) == "sid=1"
    assert cookies.header(jar, url.replace(":8000/a", ":8001/b"), scope) == ""


def test_without_shared_bans_a_crawl_s_403s_rest_proxies_for_that_crawl_only(
    redis_settings: Settings, redis_client: redis.Redis, keys: Keys
) -> None:
    """PROXY_SHARED_BANS=false: pages that answer 403 to one client's crawl (which it may choose on
    purpose) rest proxies for that crawl alone."""

    async def test(state: ProxyState) -> tuple[set[str], set[str]]:
        for _ in range(3):
            answer(state, page("http://example.com/forbidden", crawlid="hostile"), status=403)
        await drained(state)
        return await chosen(state, "http://example.com/", crawlid="hostile"), await chosen(state, "http://example.com/")

    hostile, other = run(redis_settings, keys, test, PROXY_SHARED_BANS=False)
    assert hostile == set(IDS[1:]) and other == set(IDS)
    assert redis_client.zcard(keys.proxy_rests(keys.shard_of("example.com"))) == 0
