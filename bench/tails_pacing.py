"""Benchmark: does a domain fetching at its full throttled rate ever wait for its tail? (issue 46)

One crawl queue of *N* requests on one domain, with tails (FRONTIER_TAIL_URL: a temporary folder)
and a small head, so the head is refilled from the tail *N* / (head / 2) times. The tail mover runs
as in a redis-monitor (``TailMover.run`` on a thread of its own); a popper leases the domain's
requests as fast as its throttle allows (moderated, ``--rate`` a second) and acks each one, as a
crawler whose fetches take no time would; then the same without tails, the baseline of the same
run. Printed: the throttle interval, the gaps between two consecutive leases (median, 99th
percentile, maximum) and how many were longer than **two** intervals (a slot the domain missed),
with and without tails. Target: no more slots missed with tails than without (docs/contract.md
§23.2: a head is refilled long before it runs dry). Also printed: the requests spilled (and the
spill rate) and refilled, and every request leased exactly once, in order.

Usage: ``.venv/bin/python bench/tails_pacing.py [--requests N] [--rate R] [--head H] [--segment S]
[--redis-url URL]`` (defaults 3000, 100, 32, 32).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from typing import Any

from benchkit import bench_redis, prefixed_redis
from memory import push_all

from crawlhive.utils.frontier import Frontier, FrontierLeaser, FrontierRequest, ThrottleConfig
from crawlhive.utils.frontier.tail_mover import TailMover

PREFIX = "benchpace"
DOMAIN = "paced.example"


def lease_all(url: str, store: str, args: argparse.Namespace, tails: bool) -> dict[str, Any]:
    """Push the queue, let the mover settle (with *tails*), then lease it all at the throttled rate."""
    overrides: dict[str, Any] = {
        "FRONTIER_TAIL_URL": store if tails else "",
        "FRONTIER_HEAD_SIZE": args.head,
        "FRONTIER_SEGMENT_SIZE": args.segment,
        "CRAWL_MAX_PAGES_DEFAULT": 0,
    }
    with prefixed_redis(url, PREFIX, **overrides) as (settings, client, keys):
        urls = [f"http://{DOMAIN}/article/{i:07d}/a-title-of-some-length" for i in range(args.requests)]
        requests = [FrontierRequest(url=u, spiderid="link", appid="bench", crawlid="pace") for u in urls]
        push_all(client, Frontier.from_settings(client, settings), iter(requests))
        mover = TailMover.from_settings(client, settings)
        spill_s = 0.0
        stop = threading.Event()
        thread = None
        if mover is not None:
            began = time.perf_counter()
            while sum(mover.run_once(s) for s in range(keys.shards)):
                pass
            spill_s = time.perf_counter() - began
            thread = threading.Thread(target=mover.run, args=(stop,), daemon=True)
            thread.start()
        leaser = FrontierLeaser.from_settings(client, settings)
        leaser.throttle = ThrottleConfig(
            hits=max(1, int(args.rate)), window_s=1.0, moderated=True, type_enabled=True, egress_id=None
        )
        times: list[float] = []
        served: list[str] = []
        deadline = time.monotonic() + 10 + 3 * args.requests / args.rate
        while len(served) < args.requests and time.monotonic() < deadline:
            outcome = leaser.pop("link")
            if outcome.lease is None:
                time.sleep(min(outcome.wait_s or 0.001, 0.005))
                continue
            times.append(time.perf_counter())
            served.append(outcome.lease.request.url)
            leaser.ack(outcome.lease)
        stop.set()
        if thread is not None:
            thread.join(timeout=10)
    interval = 1.0 / args.rate
    gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False))
    return {
        "in_order": served == urls,
        "leased": len(served),
        "spilled": mover.counts.spilled if mover else 0,
        "spill_s": spill_s,
        "refilled": mover.counts.refilled if mover else 0,
        "segments": mover.counts.segments_read if mover else 0,
        "median_ms": statistics.median(gaps) * 1000 if gaps else 0.0,
        "p99_ms": gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))] * 1000 if gaps else 0.0,
        "max_ms": gaps[-1] * 1000 if gaps else 0.0,
        "missed": sum(1 for g in gaps if g > 2 * interval),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=100.0, help="leases a second the throttle allows")
    parser.add_argument("--head", type=int, default=32, help="FRONTIER_HEAD_SIZE")
    parser.add_argument("--segment", type=int, default=32, help="FRONTIER_SEGMENT_SIZE")
    parser.add_argument("--redis-url")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as store, bench_redis(args.redis_url) as url:
        plain = lease_all(url, store, args, tails=False)
        tailed = lease_all(url, store, args, tails=True)
    print(f"{args.requests} requests on one domain, head {args.head}, segment {args.segment}, rate {args.rate:g}/s")
    rate = tailed["spilled"] / tailed["spill_s"] if tailed["spill_s"] else 0.0
    print(f"spilled {tailed['spilled']} in {tailed['spill_s']:.3f} s ({rate:,.0f} requests/s)")
    print(f"refilled {tailed['refilled']} in {tailed['segments']} segments while leasing")
    print(
        f"throttle interval {1000 / args.rate:.1f} ms; gaps between two leases, slots missed (gaps over two intervals):"
    )
    for name, run in (("without tails", plain), ("with tails", tailed)):
        print(
            f"  {name:14} median {run['median_ms']:.1f} ms, p99 {run['p99_ms']:.1f} ms, max {run['max_ms']:.1f} ms, "
            f"missed {run['missed']}; leased {run['leased']}, in order and each once: {run['in_order']}"
        )
    extra = tailed["missed"] - plain["missed"]
    print(f"slots missed because of tails: {max(0, extra)} (target 0)")
    return 0 if tailed["in_order"] and plain["in_order"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
