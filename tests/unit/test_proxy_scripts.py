"""The proxy and adaptive-throttle scripts on a real Redis (docs/contract.md §21.2-21.4): least
recently used healthy proxy, rests after PROXY_BAN_THRESHOLD bans doubling to the cap, waiting
when every proxy rests, a domain-update's pool winning, sticky sessions, and the throttle rule
slowed and regained."""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from crawlhive.redis_monitor.plugins.domain_config import DomainConfigMonitor
from crawlhive.redis_monitor.plugins.info import InfoMonitor
from crawlhive.rest.cluster import ClusterView
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.scripts import scripts
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import FrontierReader
from crawlhive.utils.state.proxies import proxy_overview

IDS = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]
STATE_TTL_MS = 86_400_000


def choose(
    client: redis.Redis,
    keys: Keys,
    domain: str,
    pool: str = "p",
    crawl_pool: str = "p",
    sticky: bool = False,
    updates: bool = True,
    crawlid: str = "c",
) -> list[Any]:
    shard = keys.shard_of(domain)
    reply = scripts(client)["proxy_choose"](
        keys=[
            keys.domain_config(shard),
            keys.proxy_lru(pool, domain),
            keys.proxy_health(pool, domain),
            keys.proxy_session("link", "app", crawlid, domain),
            keys.proxy_waiting(shard),
            keys.proxy_sessions(shard),
            keys.proxy_crawl_health("link", "app", crawlid, pool, domain),
        ],
        args=[domain, crawl_pool, pool, "1" if sticky else "", 3, 60_000, STATE_TTL_MS, domain, "1" if updates else ""]
        + IDS,
    )
    return [r.decode() if isinstance(r, bytes) else r for r in reply]


def report(
    client: redis.Redis,
    keys: Keys,
    domain: str,
    proxy: str,
    outcome: str,
    cooldown_s: float = 60,
    own: bool = False,
    crawlid: str = "c",
) -> int:
    shared = keys.proxy_health("p", domain)
    mine = keys.proxy_crawl_health("link", "app", crawlid, "p", domain)
    return int(
        scripts(client)["proxy_report"](
            keys=[
                mine if own else shared,
                keys.proxy_rests(keys.shard_of(domain)),
                keys.proxy_session("link", "app", crawlid, domain),
                keys.proxy_sessions(keys.shard_of(domain)),
                shared if own else mine,
            ],
            args=[
                proxy,
                outcome,
                3,
                int(cooldown_s * 1e6),
                3600 * 10**6,
                "" if own else f"p|{proxy}|{domain}",
                STATE_TTL_MS,
                "1",
                "p",
            ],
        )
    )


def test_rotation_takes_the_least_recently_used_proxy(redis_client: redis.Redis, keys: Keys) -> None:
    chosen = [choose(redis_client, keys, "a.com")[1] for _ in range(6)]
    assert chosen == IDS + IDS
    # per domain: another domain starts its own rotation
    assert choose(redis_client, keys, "b.com")[1] == IDS[0]


def test_three_bans_in_a_row_rest_a_proxy_for_that_domain_only_doubling(redis_client: redis.Redis, keys: Keys) -> None:
    assert report(redis_client, keys, "a.com", IDS[0], "ban") == 0
    assert report(redis_client, keys, "a.com", IDS[0], "ok") == 0  # a success ends the run
    assert [report(redis_client, keys, "a.com", IDS[0], "ban") for _ in range(3)] == [0, 0, 60_000_000]
    chosen = {choose(redis_client, keys, "a.com")[1] for _ in range(6)}
    assert chosen == set(IDS[1:])  # resting for a.com
    assert IDS[0] in {choose(redis_client, keys, "b.com")[1] for _ in range(3)}  # not for b.com
    rests = redis_client.zrange(keys.proxy_rests(keys.shard_of("a.com")), 0, -1)
    assert rests == [f"p|{IDS[0]}|a.com".encode()]
    # the next rest of the same proxy for the same domain is twice as long
    assert [report(redis_client, keys, "a.com", IDS[0], "ban") for _ in range(3)][-1] == 120_000_000


def test_when_every_proxy_rests_the_domain_waits_until_the_first_is_back(redis_client: redis.Redis, keys: Keys) -> None:
    for proxy, cooldown in zip(IDS, (30, 10, 20), strict=True):
        for _ in range(3):
            report(redis_client, keys, "a.com", proxy, "ban", cooldown_s=cooldown)
    kind, wait = choose(redis_client, keys, "a.com")
    assert kind == 2 and 9_000_000 < wait <= 10_000_000
    waiting = redis_client.zrange(keys.proxy_waiting(keys.shard_of("a.com")), 0, -1)
    assert waiting == [b"p|a.com"]
    redis_client.hdel(keys.proxy_health("p", "a.com"), f"r:{IDS[1]}")  # its rest is over
    assert choose(redis_client, keys, "a.com")[:2] == [1, IDS[1]]
    assert redis_client.zcard(keys.proxy_waiting(keys.shard_of("a.com"))) == 0


def test_a_domain_update_pool_wins_and_no_pool_is_direct(redis_client: redis.Redis, keys: Keys) -> None:
    assert choose(redis_client, keys, "a.com", pool="", crawl_pool="") == [0]
    config = {"hits": 5, "window": 60, "scale": 1.0, "proxy_pool": "other"}
    redis_client.hset(keys.domain_config(keys.shard_of("a.com")), "a.com", json.dumps(config))
    assert choose(redis_client, keys, "a.com", pool="p", crawl_pool="p") == [3, "other"]
    assert choose(redis_client, keys, "a.com", pool="", crawl_pool="") == [3, "other"]
    assert choose(redis_client, keys, "a.com", pool="other", crawl_pool="")[:2] == [1, IDS[0]]


def test_a_sticky_session_keeps_its_proxy_until_its_count_or_a_ban(redis_client: redis.Redis, keys: Keys) -> None:
    session = keys.proxy_session("link", "app", "c", "a.com")
    first = [choose(redis_client, keys, "a.com", sticky=True)[1] for _ in range(3)]
    assert first == [IDS[0]] * 3  # SESSION_MAX_REQUESTS = 3 here
    jar = {"a.com / sid": ["42", "a.com", False, "/", False, None, "80"]}
    cookies = json.dumps(jar)
    assert scripts(redis_client)["proxy_session_cookies"](keys=[session], args=[IDS[0], cookies, "[]"]) == 1
    assert scripts(redis_client)["proxy_session_cookies"](keys=[session], args=[IDS[1], cookies, "[]"]) == 0
    assert redis_client.pttl(session) > 0
    reply = choose(redis_client, keys, "a.com", sticky=True)  # a fourth request: a new session
    assert reply[1] == IDS[1] and reply[3] == ""
    scripts(redis_client)["proxy_session_cookies"](keys=[session], args=[IDS[1], cookies, "[]"])
    again = choose(redis_client, keys, "a.com", sticky=True)
    assert again[1] == IDS[1] and json.loads(again[3]) == jar
    sessions = keys.proxy_sessions(keys.shard_of("a.com"))
    assert f"p|{IDS[1]}|{session}".encode() in redis_client.zrange(sessions, 0, -1)
    report(redis_client, keys, "a.com", IDS[1], "ban")  # a banned session is dropped with its cookies
    assert not redis_client.exists(session)
    assert f"p|{IDS[1]}|{session}".encode() not in redis_client.zrange(sessions, 0, -1)
    assert choose(redis_client, keys, "a.com", sticky=True)[1] != IDS[1]


def slow(client: redis.Redis, keys: Keys, domain: str, hits: int = 8, window_s: float = 1.0) -> float:
    shard = keys.shard_of(domain)
    reply = scripts(client)["autothrottle_slow"](
        keys=[keys.domain_config(shard), keys.crawl_delay(domain)],
        args=[domain, hits, int(window_s * 1e6), 0.125, 1 / 64, domain],
    )
    return float(reply)


def takes(client: redis.Redis, keys: Keys, domain: str, hits: int = 8, window_s: float = 1.0) -> int:
    """Starts the throttle (lib/throttle.lua, as the pop applies it) allows now, up to 20."""
    shard = keys.shard_of(domain)
    taken = 0
    for _ in range(20):
        wait = scripts(client)["throttle_take"](
            keys=[
                keys.throttle(keys.throttle_key(domain, "link")),
                keys.domain_config(shard),
                keys.domain_blacklist(shard),
                keys.crawl_delay(domain),
                keys.domains("link", shard=shard),
            ],
            args=[domain, hits, int(window_s * 1e6), "", 0, 1_000_000],
        )
        if wait != 0:
            break
        taken += 1
    return taken


def test_the_adaptive_throttle_halves_once_per_burst_and_regains_a_step_per_window(
    redis_client: redis.Redis, keys: Keys
) -> None:
    assert takes(redis_client, keys, "a.com") == 8
    assert slow(redis_client, keys, "a.com") == 0.5
    assert slow(redis_client, keys, "a.com") == 0.5  # the same burst: halved once
    assert takes(redis_client, keys, "b.com") == 8  # per domain
    redis_client.delete(keys.throttle(keys.throttle_key("a.com", "link")))
    assert takes(redis_client, keys, "a.com") == 4  # half the configured 8 per window
    field = redis_client.hget(keys.autothrottle(keys.shard_of("a.com")), "a.com")
    factor, since, step = field.decode().split()
    # two windows later it regained two steps: 0.5 + 2 x 0.125
    earlier = int(since) - 2_000_000 - 1
    redis_client.hset(keys.autothrottle(keys.shard_of("a.com")), "a.com", f"{factor} {earlier} {step}")
    redis_client.delete(keys.throttle(keys.throttle_key("a.com", "link")))
    assert takes(redis_client, keys, "a.com") == 6
    # halving again works from the regained rate, never below the floor
    assert slow(redis_client, keys, "a.com") == 0.375
    # the rate is back in full (and the field gone) once the steps reach the configured limit
    redis_client.hset(keys.autothrottle(keys.shard_of("a.com")), "a.com", f"0.5 {int(time.time() * 1e6) - 10**7} 0.125")
    redis_client.delete(keys.throttle(keys.throttle_key("a.com", "link")))
    assert takes(redis_client, keys, "a.com") == 8
    assert redis_client.hget(keys.autothrottle(keys.shard_of("a.com")), "a.com") is None


def test_a_slowed_rate_of_one_hit_lengthens_the_window(redis_client: redis.Redis, keys: Keys) -> None:
    assert slow(redis_client, keys, "a.com", hits=1) == 0.5
    assert takes(redis_client, keys, "a.com", hits=1) == 1
    shard = keys.shard_of("a.com")
    wait = scripts(redis_client)["throttle_take"](
        keys=[
            keys.throttle(keys.throttle_key("a.com", "link")),
            keys.domain_config(shard),
            keys.domain_blacklist(shard),
            keys.crawl_delay("a.com"),
            keys.domains("link", shard=shard),
        ],
        args=["a.com", 1, 1_000_000, "", 0, 1_000_000],
    )
    assert 1_500_000 < wait <= 2_000_000  # one start per two seconds instead of one


def test_info_says_when_a_domain_waits_for_a_proxy_and_how_slowed_it_is(
    redis_client: redis.Redis, keys: Keys, redis_settings: Settings
) -> None:
    info = InfoMonitor(FrontierReader(redis_client, keys, 3600), window_s=1.0)
    entries = {"a.com": {"total": 3}, "b.com": {"total": 1}}
    assert info.with_notes({d: dict(e) for d, e in entries.items()}) == entries  # nothing to say
    for proxy in IDS:
        for _ in range(3):
            report(redis_client, keys, "a.com", proxy, "ban", cooldown_s=30)
    assert choose(redis_client, keys, "a.com")[0] == 2
    slow(redis_client, keys, "b.com")
    noted = info.with_notes({d: dict(e) for d, e in entries.items()})
    assert noted["a.com"]["total"] == 3 and noted["a.com"]["proxy_wait_until"] > time.time() + 25
    assert noted["b.com"] == {"total": 1, "rate_factor": 0.5}
    # GET /crawls/{appid}/{crawlid} adds the same (REST reads them through its ClusterView)
    view = ClusterView(redis_client, redis_settings.copy_with(FRONTIER_SHARDS=keys.shards, QUEUE_WINDOW=1.0), {})
    assert view.domain_notes(["a.com", "b.com", "c.com"]) == {
        "a.com": {"proxy_wait_until": noted["a.com"]["proxy_wait_until"]},
        "b.com": {"rate_factor": 0.5},
    }
    overview = proxy_overview(redis_client, keys, 1.0)
    assert overview["waiting"] == {"p": {"a.com": noted["a.com"]["proxy_wait_until"]}}
    assert overview["autothrottle"]["b.com"]["factor"] == 0.5
    assert set(overview["pools"]["p"]) == set(IDS)
    assert all(list(v["resting"]) == ["a.com"] for v in overview["pools"]["p"].values())


def test_a_domain_update_with_a_pool_is_stored_for_the_choice(redis_client: redis.Redis, keys: Keys) -> None:
    reader = FrontierReader(redis_client, keys, 3600)
    monitor = DomainConfigMonitor(redis_client, keys, reader, pool_updates=True)  # PROXY_POOL_DOMAIN_UPDATES
    request = {"action": "domain-update", "uuid": "u", "appid": "app", "domain": "a.com", "hits": 5, "window": 60}
    answer = monitor.handle("domain-config", {**request, "proxy_pool": "other"})[0]
    assert "error" not in answer.message
    assert choose(redis_client, keys, "a.com", pool="p", crawl_pool="p") == [3, "other"]
    monitor.handle("domain-config", request)  # a domain-update without one: the crawl's pool again
    assert choose(redis_client, keys, "a.com", pool="p", crawl_pool="p")[:2] == [1, IDS[0]]


def test_without_pool_updates_a_domain_update_s_pool_is_neither_stored_nor_obeyed(
    redis_client: redis.Redis, keys: Keys
) -> None:
    """PROXY_POOL_DOMAIN_UPDATES off (the default): a client's domain-update cannot move every
    crawl of a domain to another pool; one stored before the upgrade is ignored by the choice."""
    monitor = DomainConfigMonitor(redis_client, keys, FrontierReader(redis_client, keys, 3600))
    request = {"action": "domain-update", "uuid": "u", "appid": "app", "domain": "a.com", "hits": 5, "window": 60}
    monitor.handle("domain-config", {**request, "proxy_pool": "other"})
    stored = json.loads(redis_client.hget(keys.domain_config(keys.shard_of("a.com")), "a.com"))
    assert stored == {"hits": 5, "window": 60, "scale": 1.0}
    stored["proxy_pool"] = "other"  # as a release that obeyed them stored it
    redis_client.hset(keys.domain_config(keys.shard_of("a.com")), "a.com", json.dumps(stored))
    assert choose(redis_client, keys, "a.com", pool="p", crawl_pool="p", updates=False)[:2] == [1, IDS[0]]
    assert choose(redis_client, keys, "a.com", pool="", crawl_pool="", updates=False) == [0]


def test_a_crawl_s_own_bans_rest_a_proxy_for_that_crawl_only(redis_client: redis.Redis, keys: Keys) -> None:
    """A ban_regex match counts in the crawl's own health (§21.3): after PROXY_BAN_THRESHOLD of them
    the proxy rests for that crawl, while another crawl of the domain still gets it, and no other
    crawl's info or stats say the domain waits."""
    for _ in range(3):
        report(redis_client, keys, "a.com", IDS[0], "ban", own=True, crawlid="mine")
    assert IDS[0] not in {choose(redis_client, keys, "a.com", crawlid="mine")[1] for _ in range(6)}
    assert IDS[0] in {choose(redis_client, keys, "a.com", crawlid="other")[1] for _ in range(3)}
    assert redis_client.zcard(keys.proxy_rests(keys.shard_of("a.com"))) == 0
    for proxy in IDS[1:]:
        for _ in range(3):
            report(redis_client, keys, "a.com", proxy, "ban", own=True, crawlid="mine")
    assert choose(redis_client, keys, "a.com", crawlid="mine")[0] == 2  # every proxy rests for it
    assert redis_client.zcard(keys.proxy_waiting(keys.shard_of("a.com"))) == 0
    assert choose(redis_client, keys, "a.com", crawlid="other")[0] == 1
