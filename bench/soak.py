"""Soak: one crawler crawling continuously for ``--minutes`` on one Redis and one broker that keep
everything the earlier crawls left, pages/s and CPU per page printed per ``--window`` (issue 50).

Needs the generated bench site served by nginx (``make bench`` does both)::

    python3 bench/site.py && bench/nginx.sh start
    .venv/bin/python bench/soak.py [--minutes 30] [--window 5] [--conc 32] [--feed-every 15000]

One ``crawlhive crawler`` process (link spider, unthrottled like ``bench/crawl.py``'s) on a private
embedded Redis and broker. The site has 20,000 pages; a new crawl of its 8 seeds (a new crawl id,
so every page is new to it) is fed whenever the crawler has fetched ``--feed-every`` pages since
the last one, so the crawler never runs dry and the cluster accumulates what a long-lived one
does: every crawl's dupefilter and records in Redis, every page on the broker's firehose. Each
window prints the crawler's pages/s, its CPU milliseconds per page (which the machine's other
load does not move much), Redis's and the broker's CPU per page, Redis's memory, the broker's and
the crawler's resident memory, and the load average. The figure: the last window's pages/s
against the first's (target: within 10 %), and the same for the crawler's CPU per page.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from benchkit import bench_settings, crawler_env
from crawl import SEEDS, cpu_s, redis_cpu_s, seed_crawl, service_pids

from crawlhive.app.embedded import EmbeddedCluster
from crawlhive.utils.backends.redis_clients import keys_from_settings, redis_from_settings


def samples(path: Path) -> list[dict[str, Any]]:
    """The crawler's samples so far (``crawl_ext.Sampler``'s lines)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the crawler crawls (default 30)")
    parser.add_argument("--window", type=float, default=5.0, help="minutes per printed window (default 5)")
    parser.add_argument("--conc", type=int, default=32)
    parser.add_argument(
        "--feed-every", type=int, default=15000, help="pages fetched between two new crawls (default 15,000)"
    )
    args = parser.parse_args()
    if not SEEDS.exists():
        print(f"{SEEDS} missing: run bench/site.py and bench/nginx.sh start", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp, EmbeddedCluster(redis=True) as cluster:
        work = Path(tmp)
        settings = bench_settings(cluster, work, "soak", ("crawled_firehose", "items", "dead_letter"))
        client = redis_from_settings(settings)
        out = work / "samples.jsonl"
        scrapy = {"EXTENSIONS": {"crawl_ext.Sampler": 0}, "BENCH_SAMPLES_OUT": str(out), "BENCH_SAMPLE_S": 5}
        environment = crawler_env(settings, work, scrapy, CONCURRENT_REQUESTS=str(args.conc))
        command = [sys.executable, "-m", "crawlhive.app.cli", "crawler", "--spider", "link"]
        proc = subprocess.Popen(command, env=environment)
        broker_pids = service_pids(cluster).get("broker", [])
        try:
            deadline = time.monotonic() + 60
            while client.zcard(keys_from_settings(settings).heartbeat_index("crawler")) < 1:
                if time.monotonic() > deadline or proc.poll() is not None:
                    print("the crawler did not start", file=sys.stderr)
                    return 1
                time.sleep(0.05)
            crawls, fed_at = 1, 0
            seed_crawl(settings, client, "soak0", 100)
            start = time.time()
            window_s = args.window * 60
            windows: list[dict[str, Any]] = []
            mark: dict[str, Any] = {
                "t": start, "pages": 0, "cpu_s": None, "redis": redis_cpu_s(client), "broker": cpu_s(broker_pids)
            }  # fmt: skip
            print(
                f"soak: {args.minutes:g} minutes, windows of {args.window:g}; a new crawl every {args.feed_every:,}"
                " pages",
                flush=True,
            )
            print(
                "window  pages/s  crawler ms/page  Redis ms/page  broker ms/page  Redis MB  broker RSS MB"
                "  crawler RSS MB  crawls  load",
                flush=True,
            )
            wanted = max(1, round(args.minutes / args.window))
            while len(windows) < wanted and time.time() - start < args.minutes * 60 + window_s:
                time.sleep(2)
                if proc.poll() is not None:
                    print(f"the crawler exited ({proc.returncode})", file=sys.stderr)
                    return 1
                seen = samples(out)
                if not seen:
                    continue
                last = seen[-1]
                if mark["cpu_s"] is None:
                    mark["cpu_s"] = seen[0]["cpu_s"]
                if last["pages"] - fed_at >= args.feed_every:
                    seed_crawl(settings, client, f"soak{crawls}", 100)
                    crawls, fed_at = crawls + 1, last["pages"]
                if last["t"] - mark["t"] >= window_s:
                    redis_now, broker_now = redis_cpu_s(client), cpu_s(broker_pids)
                    pages = last["pages"] - mark["pages"]
                    row = {
                        "window": len(windows) + 1,
                        "pages_per_s": pages / (last["t"] - mark["t"]),
                        "crawler_ms": (last["cpu_s"] - mark["cpu_s"]) * 1000 / max(pages, 1),
                        "redis_ms": (redis_now - mark["redis"]) * 1000 / max(pages, 1),
                        "broker_ms": (broker_now - mark["broker"]) * 1000 / max(pages, 1),
                        "redis_mb": client.info("memory")["used_memory"] / 1e6,
                        "broker_rss_mb": sum(psutil.Process(pid).memory_info().rss for pid in broker_pids) / 1e6,
                        "crawler_rss_mb": last["rss_mb"],
                        "crawls": crawls,
                        "load": os.getloadavg()[0],
                    }
                    windows.append(row)
                    print(
                        f"{row['window']:>6}  {row['pages_per_s']:7.1f}  {row['crawler_ms']:15.2f}"
                        f"  {row['redis_ms']:13.2f}  {row['broker_ms']:14.2f}  {row['redis_mb']:8.0f}"
                        f"  {row['broker_rss_mb']:13.0f}  {row['crawler_rss_mb']:14.0f}  {crawls:6}"
                        f"  {row['load']:4.1f}",
                        flush=True,
                    )
                    mark = {
                        "t": last["t"], "pages": last["pages"], "cpu_s": last["cpu_s"],
                        "redis": redis_now, "broker": broker_now,
                    }  # fmt: skip
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
            client.close()
    if len(windows) < 2:
        print("fewer than 2 windows: no figure (run longer, or with a shorter --window)")
        return 0
    first, last_w = windows[0], windows[-1]
    rate = last_w["pages_per_s"] / first["pages_per_s"]
    cost = last_w["crawler_ms"] / first["crawler_ms"]
    print(
        f"last window / first: pages/s {rate:.2f} (target within 10 %: {'met' if rate >= 0.9 else 'NOT met'}),"
        f" crawler CPU per page {cost:.2f}; {sum(1 for _ in windows)} windows, {crawls} crawls fed"
    )
    print(json.dumps({"windows": windows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
