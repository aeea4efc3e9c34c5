"""Benchmark: ``info`` on a crawl with 1,000,000 queued requests across 1,000 domains.

Prints the redis-monitor's answer time (``InfoMonitor``: per domain a ``ZCARD`` and the first and
last score, pipelined) beside a naive implementation measured in the same run on the same data,
which reads every queued request (``ZRANGE 0 -1 WITHSCORES`` of each queue, as Scrapy Cluster's
info scanned its queues). The state is written straight into the frontier layout with pipelined
multi-member ``ZADD``\\ s, which is much faster than pushing 1M requests one by one.

Usage: ``.venv/bin/python bench/info.py [--redis-url URL] [--requests N] [--domains D] [--runs R]``.
Without ``--redis-url`` a private redis-server is started (and stopped) on a free port; a Redis
Cluster's URL (a node, or seeds separated by commas) measures the frontier in its 64 shards. The
target is a median under 50 ms for the default sizes (docs/contract.md §18.5: on 3 primaries too).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import cast

from crawlhive.app.embedded import EmbeddedRedis
from crawlhive.redis_monitor.plugins.info import InfoMonitor
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings, redis_from_settings
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import FrontierReader, decode_priority, encode_score
from crawlhive.utils.frontier.model import text

PREFIX = "benchinfo"
SPIDER, APPID, CRAWLID = "link", "benchapp", "big"
ZADD_CHUNK = 1000


def build(client: RedisClient, keys: Keys, requests: int, domains: int) -> float:
    """Write *requests* queued requests of one crawl over *domains* domains; returns requests/s."""
    per_domain = requests // domains
    started = time.perf_counter()
    pipe = client.pipeline(transaction=False)
    seq = 0
    member = keys.crawl_member(APPID, CRAWLID)
    for d in range(domains):
        domain = f"domain{d:04d}.example"
        queue = keys.crawl_queue(SPIDER, APPID, CRAWLID, domain)
        best = None
        for start in range(0, per_domain, ZADD_CHUNK):
            batch = {}
            for i in range(start, min(per_domain, start + ZADD_CHUNK)):
                seq += 1
                score = encode_score(100 - (i % 20) * 10, seq)  # priorities 100 .. -90
                best = score if best is None else min(best, score)
                batch[f'{{"url":"http://{domain}/page/{i}","crawlid":"{CRAWLID}"}}'] = score
            pipe.zadd(queue, batch)
        shard = keys.shard_of(domain)
        pipe.zadd(keys.domain_crawls(SPIDER, domain), {member: best or 0})
        pipe.zadd(keys.domains(SPIDER, shard=shard), {domain: 0})
        pipe.sadd(keys.crawl_domains(SPIDER, APPID, CRAWLID, shard=shard), domain)
        if d % 20 == 19:
            pipe.execute()
    pipe.sadd(keys.app_crawls(SPIDER, APPID), CRAWLID)
    pipe.sadd(keys.active_crawls(), keys.crawl_ref(SPIDER, APPID, CRAWLID))
    pipe.hset(keys.crawl(SPIDER, APPID, CRAWLID), mapping={"appid": APPID, "crawlid": CRAWLID, "spiderid": SPIDER})
    pipe.execute()
    return per_domain * domains / (time.perf_counter() - started)


def naive_info(client: RedisClient, keys: Keys) -> dict[str, dict[str, int]]:
    """Per-domain totals and high/low priority by reading every queued request."""
    domains = sorted(
        text(d)
        for shard in range(keys.shards)
        for d in client.smembers(keys.crawl_domains(SPIDER, APPID, CRAWLID, shard=shard))
    )
    out = {}
    for domain in domains:
        queue = keys.crawl_queue(SPIDER, APPID, CRAWLID, domain)
        entries = cast("list[tuple[bytes, float]]", client.zrange(queue, 0, -1, withscores=True))
        priorities = [decode_priority(score) for _, score in entries]
        if priorities:
            out[domain] = {"total": len(priorities), "high_priority": max(priorities), "low_priority": min(priorities)}
    return out


def timed(func: Callable[[], object], runs: int) -> tuple[float, object]:
    """Median milliseconds of *runs* calls, and the last result."""
    times, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = func()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), result


def run(url: str, requests: int, domains: int, runs: int, naive_runs: int) -> int:
    settings = Settings.from_overrides(
        REDIS_URL=url, REDIS_KEY_PREFIX=PREFIX, FRONTIER_SHARDS=int(os.environ.get("FRONTIER_SHARDS") or 0)
    )
    client = redis_from_settings(settings)
    keys = keys_from_settings(settings)  # 64 shards on a Redis Cluster
    for batch in iter(lambda: list(client.scan_iter(match=f"{PREFIX}:*", count=10000))[:10000], []):
        client.delete(*batch)
    try:
        rate = build(client, keys, requests, domains)
        print(f"built {requests:,} queued requests over {domains:,} domains at {rate:,.0f} requests/s")
        plugin = InfoMonitor(FrontierReader(client, keys, record_ttl_s=3600))
        by_crawl = {"uuid": "b", "appid": APPID, "crawlid": CRAWLID, "spiderid": SPIDER}
        by_app = {"uuid": "b", "appid": APPID, "spiderid": SPIDER}
        ours_ms, answer = timed(lambda: plugin.by_crawlid(by_crawl), runs)
        app_ms, _ = timed(lambda: plugin.by_appid(by_app), runs)
        naive_ms, naive = timed(lambda: naive_info(client, keys), naive_runs)
        assert isinstance(answer, dict) and answer["domains"] == naive, "the two implementations disagree"
        assert answer["total_pending"] == requests // domains * domains
        print(f"info by crawlid (crawlhive):        median {ours_ms:8.1f} ms over {runs} runs")
        print(f"info by appid   (crawlhive):        median {app_ms:8.1f} ms over {runs} runs")
        print(f"info by crawlid (naive full scan):  median {naive_ms:8.1f} ms over {naive_runs} runs")
        verdict = "met" if ours_ms < 50 else "MISSED"
        print(f"ratio naive / crawlhive: {naive_ms / ours_ms:,.0f}x; target < 50 ms: {verdict}")
        return 0 if ours_ms < 50 else 1
    finally:
        for batch in iter(lambda: list(client.scan_iter(match=f"{PREFIX}:*", count=10000))[:10000], []):
            client.delete(*batch)
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", help="an existing Redis (default: start a private redis-server)")
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--domains", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--naive-runs", type=int, default=3)
    args = parser.parse_args(argv)
    if args.redis_url:
        return run(args.redis_url, args.requests, args.domains, args.runs, args.naive_runs)
    with EmbeddedRedis() as server:
        return run(server.url, args.requests, args.domains, args.runs, args.naive_runs)


if __name__ == "__main__":
    sys.exit(main())
