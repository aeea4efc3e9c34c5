"""Benchmark: Redis memory per scheduled page of a recrawling crawl (docs/contract.md §19.5).

Schedules *N* pages the way crawlers do when their first visits end
(:meth:`crawlhive.utils.frontier.recrawl.Schedule.queue_visit`, pipelined 1,000 at a time): links
of ~80 characters (``bench/memory.py``'s ``link_url``) over *D* domains, each with a 32-character
ETag, a Last-Modified date and a body hash, due at random times within ``every`` (a day), and
reports the growth of ``INFO memory`` ``used_memory`` per page: the packed state, the time slots
holding the URLs and the per-shard due index, everything the schedule writes. Then it releases
10,000 due pages once to show a release's cost.

Usage: ``.venv/bin/python bench/recrawl_memory.py [--pages N] [--domains D] [--cluster]
[--buckets B] [--redis-url URL]`` (defaults 1000000 and 1000; a smaller run keeps 1M's shape with
``--buckets`` scaled down alike). Without ``--redis-url`` a private redis-server is
started (``--cluster``: a local 3-primary Redis Cluster from ``tests/support/redis_cluster.py``, 64 shards).
Target: at most 200 bytes per scheduled page.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit import bench_redis, prefixed_redis  # noqa: E402  (bench/benchkit.py)
from memory import CRAWL_DEFAULTS, link_url, used_memory  # noqa: E402  (bench/memory.py)

from crawlhive.crawler.requests import child_request  # noqa: E402
from crawlhive.utils.backends.redis_types import RedisClient, RedisPipeline  # noqa: E402
from crawlhive.utils.frontier import OptionSet, seed_from_request  # noqa: E402
from crawlhive.utils.frontier.recrawl import (  # noqa: E402
    PageState,
    Schedule,
    SlotEntry,
    VisitResult,
)

PREFIX = "benchrc"
TARGET_PER_PAGE = 200
EVERY_S = 86_400
BATCH = 1000


def fill(
    client: RedisClient, schedule: Schedule, pages: int, domains: int, due_in: tuple[int, int] = (60, EVERY_S)
) -> None:
    """Schedule *pages* pages as their first visits' ends do, due at random *due_in* seconds from now."""
    from scrapy import Request

    message = {**CRAWL_DEFAULTS, "url": "http://www.site0000.com/", "appid": "benchapp", "crawlid": "fresh"}
    message.update(maxdepth=2, recrawl={"every": EVERY_S, "adaptive": True, "min": 10800, "max": 691200, "until": 0})
    seed = seed_from_request(message, origin="bench/0/0@1714563600000")
    seed.option_set = OptionSet.of(seed)
    now = int(time.time())
    rng = random.Random(7)
    keys = schedule.keys
    pipe = None
    for i in range(pages):
        if pipe is None:
            pipe = client.pipeline(transaction=False)
        link = child_request(seed, Request(link_url(i % domains, i)), spider=None)  # type: ignore[arg-type]
        link.option_set = seed.option_set
        fp = hashlib.sha256(link.url.encode()).digest()[:8]
        due = now + rng.randrange(*due_in)
        etag = b'"' + hashlib.md5(link.url.encode()).hexdigest()[:30].encode() + b'"'  # noqa: S324 - an ETag
        state = PageState(due, EVERY_S, now, now - 86400, fp[:6], 1, 0, 200, etag)
        entry = SlotEntry(due, fp, link.priority, False, link.domain, link.member())
        schedule.queue_visit(
            pipe,
            spider="link",
            appid="benchapp",
            crawlid="fresh",
            shard=keys.shard_of(link.domain),
            fingerprint=fp,
            result=VisitResult(1, True, 0, state, "first"),
            entry=entry,
            now=now,
        )
        if (i + 1) % BATCH == 0:
            run_batch(schedule, pipe)
            pipe = None
    if pipe is not None:
        run_batch(schedule, pipe)


def run_batch(schedule: Schedule, pipe: RedisPipeline) -> None:
    """Run the filled *pipe* through the schedule's scripts; a function of its own so that the
    callable the scripts retry on NOSCRIPT returns this batch's pipeline, not a later one."""
    schedule.scripts.execute(lambda: pipe)


def run(url: str, pages: int, domains: int, buckets: int | None = None) -> int:
    overrides = {"RECRAWL_STATE_BUCKETS": buckets} if buckets else {}
    with prefixed_redis(url, PREFIX, **overrides) as (settings, client, keys):
        schedule = Schedule(client, keys, settings.getint("RECRAWL_STATE_BUCKETS"), 604800)
        schedule.scripts.load()
        print(f"Redis {client.info('server')['redis_version']}, {keys.shards} shard(s)")
        sample = link_url(0, 1)
        print(f"{pages:,} scheduled pages over {domains:,} domains; URL {len(sample)} characters, ETag 32")
        before = used_memory(client)
        started = time.perf_counter()
        fill(client, schedule, pages, domains)
        elapsed = time.perf_counter() - started
        per_page = (used_memory(client) - before) / pages
        verdict = "met" if per_page <= TARGET_PER_PAGE else "NOT MET"
        print(
            f"per scheduled page (state, slot, due index) {per_page:8.0f} bytes "
            f"(target <= {TARGET_PER_PAGE}: {verdict}; filled at {pages / elapsed:,.0f} pages/s)"
        )
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", help="an existing, otherwise idle Redis (default: a private redis-server)")
    parser.add_argument("--pages", type=int, default=1_000_000)
    parser.add_argument("--domains", type=int, default=1000)
    parser.add_argument("--cluster", action="store_true", help="a private local Redis Cluster (3 primaries)")
    parser.add_argument(
        "--buckets",
        type=int,
        help="RECRAWL_STATE_BUCKETS (default the setting's); --pages 100000 --buckets 3277 keeps 1M's pages per bucket",
    )
    args = parser.parse_args(argv)
    with bench_redis(args.redis_url, cluster=args.cluster) as url:
        return run(url, args.pages, args.domains, args.buckets)


if __name__ == "__main__":
    sys.exit(main())
