"""Rendering benchmark: pages/s of one rendering crawler beside one plain crawler, same site, same run,
and the memory one concurrently rendered page costs (docs/contract.md §15).

Needs the generated bench site served by nginx and Debian's chromium (``make bench`` does both)::

    python3 bench/site.py && bench/nginx.sh start
    .venv/bin/python bench/render.py [--pages 300] [--concurrency 1,4,8]

On a private embedded Redis and broker, in turn:

1. **plain**: one ``crawlhive crawler`` (link spider, CONCURRENT_REQUESTS 32) crawls ``--pages``
   pages of the bench site (8 seeds, every page following its links, unthrottled, robots.txt off);
2. **rendered**: one ``crawlhive crawler --render`` crawls as many pages of a ``render: true`` crawl
   of the same site, once per ``--concurrency`` value (RENDER_CONCURRENCY).

Pages/s run from the first response to the last. CPU is the whole machine's (``/proc/stat``, busy
time of every process: crawler, Playwright's driver, Chromium, Redis, broker, nginx, this script)
over the crawl, per page, i.e. what a page costs the machine. Memory is the PSS
(proportional set size, so pages shared between Chromium's processes count once) of the crawler's
browser processes, sampled every 0.2 s; **memory per concurrent page** is the slope of the peak
browser PSS against RENDER_CONCURRENCY, i.e. what one more page in flight costs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis
from benchkit import bench_settings, crawler_env

from crawlhive.app.embedded import EmbeddedCluster
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.frontier import Frontier, seed_from_request

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "bench" / "baseline"
SEEDS = Path("/tmp/perfsite/www/seeds.txt")
TICK = os.sysconf("SC_CLK_TCK")


def tree(pid: int) -> list[int]:
    """*pid* and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [pid], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def machine_busy_s() -> float:
    """CPU seconds the machine spent busy (every core, every process) since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / TICK  # minus idle and iowait


def pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def is_browser(pid: int) -> bool:
    try:
        return "chrom" in Path(f"/proc/{pid}/comm").read_text()
    except OSError:
        return False


class Sampler:
    """Samples a process tree every 0.2 s for the peak PSS of its browser processes together, and
    the machine's busy CPU time from start to stop."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.busy_at_start = machine_busy_s()
        self.peak_browser_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            browser_kb = 0
            for pid in tree(self.root):
                if is_browser(pid):
                    browser_kb += pss_kb(pid)
            self.peak_browser_kb = max(self.peak_browser_kb, browser_kb)
            self._stop.wait(0.2)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> float:
        """Stops sampling; returns the machine's busy CPU seconds since :meth:`start`."""
        self._stop.set()
        self._thread.join(5)
        return machine_busy_s() - self.busy_at_start


def crawl(
    cluster: EmbeddedCluster, work: Path, prefix: str, pages: int, render: bool, concurrency: int
) -> dict[str, Any]:
    settings = bench_settings(cluster, work, prefix, ("crawled_firehose", "items", "dead_letter"))
    client = redis.Redis.from_url(cluster.redis_url)
    rtt = work / f"{prefix}-rtt.json"
    scrapy = {
        "EXTENSIONS": {"crawl_ext.RoundTrips": 1},
        "BENCH_RTT_OUT": str(rtt),
        "CLOSESPIDER_PAGECOUNT": pages,
        "LOGSTATS_INTERVAL": 3600,
    }
    env = crawler_env(settings, work, scrapy, CONCURRENT_REQUESTS="32", RENDER_CONCURRENCY=str(concurrency))
    command = [sys.executable, "-m", "crawlhive.app.cli", "crawler", *(["--render"] if render else [])]
    proc = subprocess.Popen(command, env=env)
    deadline = time.monotonic() + 60
    while client.zcard(keys_from_settings(settings).heartbeat_index("crawler")) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    sampler = Sampler(proc.pid)
    sampler.start()
    seeds = SEEDS.read_text().split()
    batch = [
        seed_from_request(
            {"url": url, "appid": "bench", "crawlid": prefix, "spiderid": "link", "priority": 1, "maxdepth": 100,
             "domain_max_pages": None, "allowed_domains": None, "allow_regex": None, "deny_regex": None,
             "deny_extensions": None, "expires": 0, "useragent": None, "cookie": None, "attrs": None,
             "method": "GET", "headers": None, "body": None, "cookies": None, "render": render},
            f"bench/{prefix}/{i}",
        )
        for i, url in enumerate(seeds)
    ]  # fmt: skip
    pipe = client.pipeline(transaction=True)
    Frontier.from_settings(client, settings).push(batch, pipe)
    pipe.execute()
    proc.wait(timeout=1800)
    cpu = sampler.stop()
    times = json.loads(rtt.read_text())
    client.close()
    span = max(times["last"] - times["first"], 1e-9)
    return {
        "render": render,
        "concurrency": concurrency if render else 32,
        "pages": times["pages"],
        "pages_per_s": round(times["pages"] / span, 1),
        "cpu_ms_per_page": round(cpu * 1000 / times["pages"], 1),
        "peak_browser_mb": round(sampler.peak_browser_kb / 1024, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--concurrency", default="1,4,8", help="RENDER_CONCURRENCY values to run (comma-separated)")
    args = parser.parse_args()
    if not SEEDS.exists():
        print(f"{SEEDS} missing: run bench/site.py and bench/nginx.sh start", file=sys.stderr)
        return 2
    levels = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory() as tmp, EmbeddedCluster() as cluster:
        work = Path(tmp)
        plain = crawl(cluster, work, "rbplain", args.pages, False, 32)
        print(
            f"plain crawler (CONCURRENT_REQUESTS 32)  : {plain['pages_per_s']:7.1f} pages/s,"
            f" {plain['cpu_ms_per_page']} CPU ms per page (machine)"
        )
        rendered = []
        for level in levels:
            result = crawl(cluster, work, f"rbrender{level}", args.pages, True, level)
            rendered.append(result)
            print(
                f"rendering crawler (RENDER_CONCURRENCY {level}): {result['pages_per_s']:7.1f} pages/s"
                f" ({result['pages_per_s'] / plain['pages_per_s']:.3f} x plain), {result['cpu_ms_per_page']} CPU ms"
                f" per page (machine), browser peak {result['peak_browser_mb']} MB PSS"
            )
        if len(rendered) >= 2:
            low, high = rendered[0], rendered[-1]
            slope = (high["peak_browser_mb"] - low["peak_browser_mb"]) / (high["concurrency"] - low["concurrency"])
            print(
                f"memory per concurrent page: {slope:.1f} MB (browser PSS slope from RENDER_CONCURRENCY"
                f" {low['concurrency']} to {high['concurrency']}); browser at RENDER_CONCURRENCY {low['concurrency']}:"
                f" {low['peak_browser_mb']} MB"
            )
        print(json.dumps({"plain": plain, "rendered": rendered}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
