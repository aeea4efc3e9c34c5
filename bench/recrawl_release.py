"""Benchmark: what releasing due pages costs Redis (docs/contract.md §19.8).

Schedules *N* pages (as ``bench/recrawl_memory.py`` does) all due already, then releases them into
the frontier the way the redis-monitor does (``Schedule.release``, RECRAWL_RELEASE_BATCH at a time
per shard) and reports Redis's CPU time per released page (``INFO cpu``, user + system, of the
Redis process) and the release rate. The share of one Redis core that 10,000 pages becoming due
per second take is that figure × 10,000; compare it with the Redis CPU a crawled page costs
(``bench/crawl.py``; docs/operations.md: 0.19-0.24 ms) to see what the release takes from a crawl
limited by its Redis.

Usage: ``.venv/bin/python bench/recrawl_release.py [--pages N] [--redis-url URL]`` (default 200000).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit import bench_redis, prefixed_redis  # noqa: E402  (bench/benchkit.py)
from recrawl_memory import PREFIX, fill  # noqa: E402  (bench/recrawl_memory.py)

from crawlhive.utils.backends.redis_types import RedisClient  # noqa: E402
from crawlhive.utils.frontier.recrawl import Schedule  # noqa: E402

DUE_PER_S = 10_000


def redis_cpu(client: RedisClient) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def run(url: str, pages: int) -> int:
    with prefixed_redis(url, PREFIX) as (settings, client, keys):
        schedule = Schedule(client, keys, settings.getint("RECRAWL_STATE_BUCKETS"), 604800)
        schedule.scripts.load()
        fill(client, schedule, pages, 1000, due_in=(-120, -1))
        batch = settings.getint("RECRAWL_RELEASE_BATCH")
        cpu = redis_cpu(client)
        started = time.perf_counter()
        released = 0
        while released < pages:
            got = sum(n for shard in range(keys.shards) for _s, _r, n in schedule.release(shard, batch))
            if not got:
                break
            released += got
        elapsed = time.perf_counter() - started
        per_page_us = (redis_cpu(client) - cpu) / max(1, released) * 1e6
        print(f"released {released:,} due pages in {elapsed:.1f} s ({released / elapsed:,.0f}/s wall clock)")
        print(
            f"Redis CPU per released page: {per_page_us:.1f} us; {DUE_PER_S:,} due pages/s take "
            f"{per_page_us * DUE_PER_S / 1e6:.1%} of one Redis core"
        )
        return 0 if released == pages else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", help="an existing, otherwise idle Redis (default: a private redis-server)")
    parser.add_argument("--pages", type=int, default=200_000)
    args = parser.parse_args(argv)
    with bench_redis(args.redis_url) as url:
        return run(url, args.pages)


if __name__ == "__main__":
    sys.exit(main())
