"""Crawl benchmark with a recrawl schedule in the background (docs/contract.md §19.8).

Target: with 1,000,000 pages scheduled and 10,000 of them becoming due per second, the crawl
bench's pages/s drops by at most 10 %.

Needs the bench site served by nginx, as ``bench/crawl.py`` (``make bench`` does both)::

    python3 bench/site.py && bench/nginx.sh start
    .venv/bin/python bench/recrawl_crawl.py [--pairs 3] [--pages 6000] [--scheduled 1000000] [--due-per-s 10000]

On one private Redis and broker, beside a real ``crawlhive redis-monitor`` under a key prefix of
its own (the background crawl's), ``--pairs`` interleaved pairs (the order alternates pair by pair)
of the crawl bench's like-for-like run (``bench/crawl.py``'s ``run_crawlers``: one ``crawlhive
crawler`` process, the 8 seeds as one crawl, ``--pages`` responses):

* **without**: the background crawl's schedule is empty (the redis-monitor runs, idle);
* **with**: once the crawler is polling, the background crawl gets ``--scheduled`` scheduled pages
  (1,000 domains, ~80-character URLs, 32-character ETags, the layout the crawlers' visit ends write,
  written in bulk), their due times spread evenly over ``scheduled / due-per-s`` seconds that start
  when the bench crawl is seeded: the redis-monitor's release (``redis-monitor/plugins/recrawl.py``,
  ``utils/backends/lua/recrawl_release.lua``) moves ``--due-per-s`` pages a second from the schedule into
  the background crawl's frontier queues (of the same spider type, under the background prefix,
  so the bench crawler does not fetch them) while the bench crawl runs.

Each pair prints both pages/s, their ratio, the pages the release moved per second during the
"with" crawl, and the Redis and redis-monitor CPU milliseconds per crawled page; then the median
drop against the 10 % target. The background schedule and its released pages are deleted after
each "with" run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchkit import bench_settings, clear_prefix
from crawl import SEEDS, run_crawlers, service_pids
from memory import CRAWL_DEFAULTS, link_url
from scrapy import Request

from crawlhive.app.embedded import EmbeddedCluster
from crawlhive.crawler.requests import child_request
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings, redis_from_settings
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import OptionSet, seed_from_request
from crawlhive.utils.frontier.model import compact_url
from crawlhive.utils.frontier.recrawl import PageState, SlotEntry, slot_start, state_bucket

#: The background crawl: its key and topic prefix, names, interval.
BG_PREFIX = "benchrcbg"
BG_SPIDER, BG_APPID, BG_CRAWLID = "link", "benchapp", "fresh"
EVERY_S = 100
TARGET_DROP = 0.10
#: Seconds between the end of the background fill and the first due pages (the crawl's seeding).
LEAD_S = 1.0


class BackgroundSchedule:
    """The background crawl's schedule under BG_PREFIX: filled in bulk, released by the redis-monitor."""

    def __init__(self, client: RedisClient, keys: Keys, buckets: int, pages: int, domains: int) -> None:
        self.client = client
        self.keys = keys
        self.buckets = max(1, buckets // keys.shards)  # as Schedule divides them
        self.pages = pages
        self.keep: set[bytes] = set()
        message = {**CRAWL_DEFAULTS, "url": "http://www.site0000.com/", "appid": BG_APPID, "crawlid": BG_CRAWLID}
        message.update(maxdepth=2, recrawl={"every": EVERY_S, "adaptive": True, "min": 60, "max": 800, "until": 0})
        seed = seed_from_request(message, origin="bench/0/0@1714563600000")
        seed.option_set = OptionSet.of(seed)
        # Per page: its URL, domain, schedule fingerprint, queue member and priority, made once.
        # The member of a plain link is "<depth> <option set id> <compact URL>" (FrontierRequest.member),
        # checked here against the real thing for one link of each domain.
        self.rows: list[tuple[str, bytes, bytes, int]] = []
        domain_of: dict[int, tuple[str, int, int]] = {}
        for i in range(pages):
            d = i % domains
            url = link_url(d, i)
            if d not in domain_of:
                link = child_request(seed, Request(url), spider=None)  # type: ignore[arg-type]
                link.option_set = seed.option_set
                domain_of[d] = (link.domain, link.priority, link.depth)
                made = b"%d %s %s" % (link.depth, seed.option_set.id.encode(), compact_url(url, link.domain).encode())
                assert made == link.member(), (made, link.member())
            domain, priority, depth = domain_of[d]
            member = b"%d %s %s" % (depth, seed.option_set.id.encode(), compact_url(url, domain).encode())
            self.rows.append((domain, hashlib.sha256(url.encode()).digest()[:8], member, priority))
        random.Random(7).shuffle(self.rows)

    def fill(self, first_due: int, due_per_s: int) -> None:
        """Schedule every page, due evenly from *first_due* on, *due_per_s* a second: the state,
        slot entries, slot index, due index and counter the visit-end script
        (``utils/backends/lua/recrawl_visit.lua``) writes page by page, written in bulk (the due index last,
        so the release sees the crawl once it is whole)."""
        keys = self.keys
        now = int(time.time())
        ref = keys.crawl_ref(BG_SPIDER, BG_APPID, BG_CRAWLID)
        states: dict[str, dict[bytes, bytes]] = defaultdict(dict)
        slots: dict[tuple[int, int], list[bytes]] = defaultdict(list)
        per_shard: dict[int, int] = defaultdict(int)
        for i, (domain, fp, member, priority) in enumerate(self.rows):
            due = first_due + i // due_per_s
            etag = b'"' + fp.hex().encode() + b"0" * 14 + b'"'
            state = PageState(due, EVERY_S, now, now - 86400, fp[:6], 1, 0, 200, etag)
            shard = keys.shard_of(domain)
            bucket = keys.recrawl_state(BG_SPIDER, BG_APPID, BG_CRAWLID, state_bucket(fp, self.buckets), shard)
            states[bucket][fp] = state.pack()
            slots[(shard, slot_start(due, now))].append(SlotEntry(due, fp, priority, False, domain, member).pack())
            per_shard[shard] += 1
        pipe = self.client.pipeline(transaction=False)
        for n, (bucket, fields) in enumerate(states.items()):
            pipe.hset(bucket, mapping=fields)  # type: ignore[arg-type]
            if n % 1000 == 999:
                pipe.execute()
        firsts: dict[int, int] = {}
        for (shard, start), entries in slots.items():
            slot = keys.recrawl_slot(BG_SPIDER, BG_APPID, BG_CRAWLID, start, shard)
            for chunk in range(0, len(entries), 1000):
                pipe.rpush(slot, *entries[chunk : chunk + 1000])
            pipe.zadd(keys.recrawl_slots(BG_SPIDER, BG_APPID, BG_CRAWLID, shard), {str(start): start})
            firsts[shard] = min(start, firsts.get(shard, start))
            pipe.execute()
        for shard, first in firsts.items():
            pipe.zadd(keys.recrawl_due(shard), {ref: first})
            part = keys.crawl_shard(BG_SPIDER, BG_APPID, BG_CRAWLID, shard)
            pipe.hset(part, "rc-scheduled", per_shard[shard])
            pipe.expire(part, 86400)
        pipe.execute()

    def clear(self) -> None:
        """Delete the schedule and the pages it released, i.e. every key under BG_PREFIX but those
        that were there before the fill (the redis-monitor's own: control stream, heartbeats)."""
        new = [k for k in self.client.scan_iter(match=f"{BG_PREFIX}*", count=10000) if k not in self.keep]
        for first in range(0, len(new), 10000):
            self.client.unlink(*new[first : first + 10000])

    def released(self) -> int:
        """Pages the release moved into the frontier so far (the crawl's ``rc-released`` counters)."""
        return sum(int(self.client.hget(part, "rc-released") or 0) for part in self._parts())

    def scheduled(self) -> int:
        return sum(int(self.client.hget(part, "rc-scheduled") or 0) for part in self._parts())

    def _parts(self) -> list[str]:
        return [self.keys.crawl_shard(BG_SPIDER, BG_APPID, BG_CRAWLID, s) for s in range(self.keys.shards)]


def start_monitor(settings: Settings, work: Path, batch: int) -> subprocess.Popen[bytes]:
    """A ``crawlhive redis-monitor`` on *settings*' Redis, broker and prefixes, RECRAWL_RELEASE_BATCH
    *batch*, other settings at their defaults."""
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS")},
        "REDIS_URL": settings["REDIS_URL"],
        "KAFKA_BOOTSTRAP_SERVERS": ",".join(settings["KAFKA_BOOTSTRAP_SERVERS"]),
        "REDIS_KEY_PREFIX": settings["REDIS_KEY_PREFIX"],
        "KAFKA_TOPIC_PREFIX": settings["KAFKA_TOPIC_PREFIX"],
        "CRAWLHIVE_HOME": str(work),
        "LOG_LEVEL": "WARNING",
        "RECRAWL_RELEASE_BATCH": str(batch),
    }
    log = (work / "redis-monitor.log").open("w")
    command = [sys.executable, "-m", "crawlhive.app.cli", "redis-monitor"]
    return subprocess.Popen(command, env=env, stdout=log, stderr=log)


def crawl_beside(
    background: BackgroundSchedule | None, due_per_s: int, fill_s: list[float], run: Any
) -> tuple[dict[str, Any], dict[str, float]]:
    """One bench crawl (*run*: ``run_crawlers`` but for its ``before_seed``), with *background*
    filled once the crawler polls, due from the crawl's seeding on (None: without). *fill_s* holds
    the last fill's duration, from which the first due time is set."""
    seen: dict[str, float] = {}

    def before_seed() -> None:
        assert background is not None
        background.keep = set(background.client.scan_iter(match=f"{BG_PREFIX}*", count=10000))
        started = time.time()
        first_due = int(started + fill_s[0] * 1.2 + LEAD_S) + 1
        background.fill(first_due, due_per_s)
        fill_s[0] = time.time() - started
        seen["late_s"] = max(0.0, time.time() - first_due)  # the fill ran into the due pages
        while time.time() < first_due:
            time.sleep(0.01)
        seen["released"] = background.released()
        seen["at"] = time.monotonic()

    result = run(before_seed if background is not None else None)
    if background is not None:
        span = time.monotonic() - seen["at"]
        seen["released_per_s"] = (background.released() - seen["released"]) / span
        seen["scheduled"] = background.scheduled()
        background.clear()
    return result, seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=6000, help="responses of each bench crawl (default 6000)")
    parser.add_argument("--conc", type=int, default=32)
    parser.add_argument("--maxdepth", type=int, default=100)
    parser.add_argument("--pairs", type=int, default=3, help="interleaved pairs (default 3)")
    parser.add_argument("--scheduled", type=int, default=1_000_000, help="background scheduled pages")
    parser.add_argument("--due-per-s", type=int, default=10_000, help="background pages becoming due a second")
    parser.add_argument("--domains", type=int, default=1000, help="domains of the background crawl")
    parser.add_argument("--release-batch", type=int, help="RECRAWL_RELEASE_BATCH of the redis-monitor")
    args = parser.parse_args()
    if not SEEDS.exists():
        print(f"{SEEDS} missing: run bench/site.py and bench/nginx.sh start", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp, EmbeddedCluster() as cluster:
        work = Path(tmp)
        bg_settings = bench_settings(cluster, work, BG_PREFIX, ("outbound_firehose", "dead_letter"))
        bg_client = redis_from_settings(bg_settings)
        batch = args.release_batch or bg_settings.getint("RECRAWL_RELEASE_BATCH")
        started = time.perf_counter()
        background = BackgroundSchedule(
            bg_client,
            keys_from_settings(bg_settings),
            bg_settings.getint("RECRAWL_STATE_BUCKETS"),
            args.scheduled,
            args.domains,
        )
        print(
            f"background crawl: {args.scheduled:,} pages over {args.domains:,} domains, {args.due_per_s:,} due a"
            f" second (made in {time.perf_counter() - started:.1f} s); redis-monitor RECRAWL_RELEASE_BATCH {batch},"
            f" REDIS_MONITOR_TICK_S {bg_settings.getfloat('REDIS_MONITOR_TICK_S')}",
            flush=True,
        )
        monitor = start_monitor(bg_settings, work, batch)
        pids = {**service_pids(cluster), "redis-monitor": [monitor.pid]}
        try:
            pairs: list[tuple[dict[str, Any], dict[str, Any], dict[str, float]]] = []
            fill_s = [args.scheduled / 50_000]
            for pair in range(args.pairs):
                order = ("without", "with") if pair % 2 == 0 else ("with", "without")
                results: dict[str, dict[str, Any]] = {}
                schedule_seen: dict[str, float] = {}
                for kind in order:
                    settings = bench_settings(
                        cluster, work, f"benchrc{kind}{pair}", ("crawled_firehose", "items", "dead_letter")
                    )
                    client = redis_from_settings(settings)
                    try:
                        results[kind], seen = crawl_beside(
                            background if kind == "with" else None,
                            args.due_per_s,
                            fill_s,
                            lambda hook, settings=settings, client=client: run_crawlers(
                                settings, client, 1, args.pages, args.conc, args.maxdepth, work, pids, before_seed=hook
                            ),
                        )
                        schedule_seen.update(seen)
                    finally:
                        client.close()
                without, with_ = results["without"], results["with"]
                ratio = with_["pages_per_s"] / without["pages_per_s"]
                pairs.append((without, with_, {**schedule_seen, "ratio": ratio}))
                ms = {
                    k: (without["cpu_ms_per_page"][k], with_["cpu_ms_per_page"][k])
                    for k in ("crawlers", "redis", "redis-monitor")
                }
                # Redis CPU the release took per released page: the "with" crawl's Redis CPU less
                # what its pages cost Redis in the "without" one, over the pages released meanwhile
                extra_ms_per_s = (ms["redis"][1] - ms["redis"][0]) * with_["pages_per_s"]
                per_release_us = extra_ms_per_s * 1000 / max(1.0, schedule_seen["released_per_s"])
                pairs[-1][2]["redis_us_per_released"] = per_release_us
                pairs[-1][2]["crawler_cpu_ratio"] = ms["crawlers"][1] / ms["crawlers"][0]
                print(
                    f"pair {pair + 1} ({' then '.join(order)}): without {without['pages_per_s']:7.1f} pages/s,"
                    f" with {with_['pages_per_s']:7.1f} pages/s: ratio {ratio:.3f}; released"
                    f" {schedule_seen['released_per_s']:,.0f} pages/s of the background schedule during the crawl"
                    f" ({schedule_seen['scheduled']:,} scheduled at its end); CPU ms per crawled page without/with:"
                    f" crawler {ms['crawlers'][0]:.2f}/{ms['crawlers'][1]:.2f},"
                    f" Redis {ms['redis'][0]:.2f}/{ms['redis'][1]:.2f},"
                    f" redis-monitor {ms['redis-monitor'][0]:.2f}/{ms['redis-monitor'][1]:.2f};"
                    f" the release: {per_release_us:.1f} us of Redis CPU per released page",
                    flush=True,
                )
        finally:
            monitor.terminate()
            code = monitor.wait(30)
            log = (work / "redis-monitor.log").read_text()
            clear_prefix(bg_client, BG_PREFIX)
            bg_client.close()
        if code != 0 or "ERROR" in log or "Traceback" in log:
            print(f"the redis-monitor exited {code}:\n{log[-3000:]}", file=sys.stderr)
            return 1
        ratios = sorted(p[2]["ratio"] for p in pairs)
        median = ratios[len(ratios) // 2]
        drop = 1 - median
        rates = sorted(p[2]["released_per_s"] for p in pairs)
        costs = sorted(p[2]["redis_us_per_released"] for p in pairs)
        cpu = sorted(p[2]["crawler_cpu_ratio"] for p in pairs)
        verdict = "met" if drop <= TARGET_DROP else "NOT MET"
        print(
            f"pages/s with {args.scheduled:,} scheduled and {args.due_per_s:,} due a second / without: median"
            f" {median:.3f} of {len(ratios)} interleaved pairs ({', '.join(f'{r:.3f}' for r in ratios)}):"
            f" drop {drop:.1%} (target <= {TARGET_DROP:.0%}: {verdict}); released"
            f" {', '.join(f'{r:,.0f}' for r in rates)} pages/s; Redis CPU per released page"
            f" {', '.join(f'{c:.1f}' for c in costs)} us ({costs[len(costs) // 2] * args.due_per_s / 1e4:.1f} % of"
            f" one Redis core at {args.due_per_s:,} a second); the crawler's CPU per page with / without: median"
            f" {cpu[len(cpu) // 2]:.3f} ({', '.join(f'{c:.3f}' for c in cpu)})"
        )
        print(json.dumps({"pairs": pairs}, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
