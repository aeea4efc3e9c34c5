"""What the cluster's proxies and adaptive throttle look like now (docs/contract.md §21.4, §21.6),
read from Redis for ``stats proxies``, ``/metrics`` and the dashboard.

Every proxy is named ``<host:port>`` (never its URL: no credential leaves the crawler). Reads one
hash (the counters) and, per frontier shard, three sorted sets and one hash (rests, domains
waiting, sessions, slowed domains), all in one pipeline: O(shards + entries), never a ``KEYS`` scan.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.frontier.model import text
from crawlhive.utils.rules.domains import domain_of_host

if TYPE_CHECKING:
    from crawlhive.utils.backends.keys import Keys
    from crawlhive.utils.rules.proxy_pools import ProxyPools

#: Outcomes counted per pool and proxy (crawler/proxy.py).
OUTCOMES = ("ok", "ban")


def _split(member: Any, parts: int) -> list[str] | None:
    pieces = text(member).split("|", parts - 1)
    return pieces if len(pieces) == parts and all(pieces) else None


def proxy_overview(
    redis: RedisClient, keys: Keys, default_window_s: float, pools: ProxyPools | None = None
) -> dict[str, Any]:
    """``{"pools": {pool: {proxy: {"requests": {outcome: n}, "resting": {domain: until}, "sessions": n}}},
    "waiting": {pool: {domain: until}}, "autothrottle": {domain: {"factor", "since"}}}`` (times: epoch
    s; a "domain" is a tenant site of a shared suffix where one was slowed, rested or waited alone).
    *pools* (the configured ones, when known) lists proxies that served nothing yet too.

    The factor of a slowed domain is the one in force now: regained step by step per window of its
    configured limit (its ``domain-update``, else *default_window_s*), as the throttle applies it.

    Raises:
        redis.RedisError: the caller reports it.
    """
    seconds, micros = redis.time()
    now = (
        seconds + micros / 1e6
    )  # the throttle script's clock, to the microsecond (whole seconds erred by up to a window)
    pipe = redis.pipeline(transaction=False)
    pipe.hgetall(keys.proxy_stats())
    for shard in range(keys.shards):
        pipe.zrangebyscore(keys.proxy_rests(shard), now, "+inf", withscores=True)
        pipe.zrangebyscore(keys.proxy_waiting(shard), now, "+inf", withscores=True)
        pipe.zrangebyscore(keys.proxy_sessions(shard), now, "+inf")
        pipe.hgetall(keys.autothrottle(shard))
        pipe.hgetall(keys.domain_config(shard))
    replies = pipe.execute()
    out_pools: dict[str, dict[str, dict[str, Any]]] = {}

    def entry(pool: str, proxy: str) -> dict[str, Any]:
        return out_pools.setdefault(pool, {}).setdefault(
            proxy, {"requests": dict.fromkeys(OUTCOMES, 0), "resting": {}, "sessions": 0}
        )

    for name, proxies in sorted((pools.pools() if pools else {}).items()):
        for proxy in proxies:
            entry(name, proxy.id)
    for field, count in replies[0].items():
        parsed = _split(field, 3)
        if parsed:
            entry(parsed[0], parsed[1])["requests"][parsed[2]] = int(count)
    waiting: dict[str, dict[str, float]] = {}
    slowed: dict[str, dict[str, float]] = {}
    for shard in range(keys.shards):
        rests, waits, sessions, auto, config = replies[1 + 5 * shard : 6 + 5 * shard]
        for member, until in rests:
            parsed = _split(member, 3)
            if parsed:
                entry(parsed[0], parsed[1])["resting"][parsed[2]] = round(until, 3)
        for member, until in waits:
            parsed = _split(member, 2)
            if parsed:
                waiting.setdefault(parsed[0], {})[parsed[1]] = round(until, 3)
        for member in sessions:
            parsed = _split(member, 3)
            if parsed:
                entry(parsed[0], parsed[1])["sessions"] += 1
        by_domain = {text(d): c for d, c in config.items()}
        for domain, value in auto.items():
            # a tenant site of a shared suffix (§21.4) is slowed within its bucket's limit
            cfg = by_domain.get(text(domain)) or by_domain.get(domain_of_host(text(domain)))
            factor = _factor(text(value), now, _window_s(cfg, default_window_s))
            if factor is not None and factor < 1:
                slowed[text(domain)] = {"factor": factor, "since": float(text(value).split()[1]) / 1e6}
    return {"pools": out_pools, "waiting": waiting, "autothrottle": dict(sorted(slowed.items()))}


def _redis_now(redis: RedisClient) -> float:
    """The throttle script's clock, Redis's TIME, to the microsecond (whole seconds erred by up to a
    window in the factor in force)."""
    seconds, micros = redis.time()
    return float(seconds) + float(micros) / 1e6


def _window_s(config: Any, default: float) -> float:
    if config is None:
        return default
    try:
        return float(json.loads(text(config))["window"])
    except (ValueError, KeyError, TypeError):
        return default


def _factor(value: str, now: float, window_s: float) -> float | None:
    """The factor of a ``keys.autothrottle`` value in force at *now* (``utils/backends/lua/lib/throttle.lua``)."""
    try:
        factor, since_us, step = (float(v) for v in value.split())
    except ValueError:
        return None
    if window_s <= 0:
        return 1.0
    regained = step * math.floor(max(now - since_us / 1e6, 0) / window_s)
    return round(min(1.0, factor + regained), 6)


def domain_notes(
    redis: RedisClient, keys: Keys, domains: list[str], default_window_s: float
) -> dict[str, dict[str, Any]]:
    """For ``info`` (§21.3, §21.4): per domain of *domains* that has one, ``proxy_wait_until``
    (epoch s: every proxy of its pool rests, its requests wait) and ``rate_factor`` (the fraction of
    its configured rate the adaptive throttle holds it to). One pipeline, per shard involved.

    Raises:
        redis.RedisError: the caller reports it.
    """
    if not domains:
        return {}
    now = _redis_now(redis)
    shards = sorted({keys.shard_of(d) for d in domains})
    pipe = redis.pipeline(transaction=False)
    for shard in shards:
        mine = [d for d in domains if keys.shard_of(d) == shard]
        pipe.zrangebyscore(keys.proxy_waiting(shard), now, "+inf", withscores=True)
        pipe.hmget(keys.autothrottle(shard), mine)
        pipe.hmget(keys.domain_config(shard), mine)
    replies = pipe.execute()
    notes: dict[str, dict[str, Any]] = {}
    for i, shard in enumerate(shards):
        mine = [d for d in domains if keys.shard_of(d) == shard]
        waits, auto, config = replies[3 * i : 3 * i + 3]
        wanted = set(mine)
        for member, until in waits:
            parsed = _split(member, 2)
            if parsed and parsed[1] in wanted:
                notes.setdefault(parsed[1], {})["proxy_wait_until"] = round(until, 3)
        for domain, value, cfg in zip(mine, auto, config, strict=True):
            if value is None:
                continue
            factor = _factor(text(value), now, _window_s(cfg, default_window_s))
            if factor is not None and factor < 1:
                notes.setdefault(domain, {})["rate_factor"] = factor
    return notes
