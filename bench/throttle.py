"""Benchmark: politeness accuracy of the cluster-wide throttle (docs/contract.md §3.11).

Four ``crawlhive crawler`` processes crawl one domain (a local site on 127.0.0.1 with a few hundred
pages) under ``hits=20`` per ``window=10`` s for ``--duration`` seconds (default 60), once with
``QUEUE_MODERATED=true`` (the default: starts at least window/hits apart) and once with ``false``
(bursts allowed). The site logs the arrival time of every request; from those it reports:

* **max in any sliding window**: the most fetches that arrived within any 10 s (target <= 20);
* **utilisation**: fetches per full window on average, against 20 (target >= 95 %, i.e. >= 19);
* **robots.txt**: fetches of disallowed paths (every page links to ``/private/…``; target 0).

Arrival times are the site's (the throttle runs on the Redis clock, and a fetch start reaches the
site after connection set-up or reuse), so the sliding maximum is measured with the tolerance
``--jitter`` (default 0.1 s): two starts closer to 10 s apart than that count as in one window
only in the "strict" figure, which is printed too.

Usage: ``.venv/bin/python bench/throttle.py [--duration S] [--crawlers N] [--modes moderated,unmoderated]``.
"""

from __future__ import annotations

import argparse
import bisect
import http.server
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

from crawlhive.app.demo_site import SiteServer
from crawlhive.app.embedded import EmbeddedCluster, free_port
from crawlhive.utils.backends.kafka_clients import ensure_topics
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import Frontier, seed_from_request

HITS, WINDOW_S = 20, 10.0
BRANCHING = 30  # 1 + 30 + 900 pages: more than any run can fetch at 2 pages/s


class Site:
    """One host: ``/`` -> ``/s<i>/`` -> ``/s<i>/p<j>``; every page links to a disallowed path."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[float, str]] = []
        self.lock = threading.Lock()
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
                pass

            def do_GET(self) -> None:  # noqa: N802 - stdlib's name
                with site.lock:
                    site.arrivals.append((time.time(), self.path))
                if self.path == "/robots.txt":
                    body, kind = b"User-agent: *\nDisallow: /private/\n", "text/plain"
                else:
                    body, kind = site.page(self.path), "text/html"
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = SiteServer(("127.0.0.1", free_port()), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def page(self, path: str) -> bytes:
        if path == "/":
            links = [f"/s{i}/" for i in range(BRANCHING)]
        elif path.count("/") == 2:
            links = [f"{path}p{j}" for j in range(BRANCHING)]
        else:
            links = []
        links.append(f"/private{path}")
        return ("<html><body>" + "".join(f'<a href="{u}">{u}</a>' for u in links) + "</body></html>").encode()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def sliding_max(times: list[float], window: float, jitter: float) -> int:
    """Most of *times* (sorted) within any half-open interval of length ``window - jitter``."""
    best = 0
    for i, start in enumerate(times):
        best = max(best, bisect.bisect_left(times, start + window - jitter) - i)
    return best


def run(
    cluster: EmbeddedCluster, work: Path, moderated: bool, crawlers: int, duration: float, jitter: float
) -> dict[str, Any]:
    tag = "mod" if moderated else "unmod"
    settings = Settings.from_overrides(
        REDIS_URL=cluster.redis_url,
        KAFKA_BOOTSTRAP_SERVERS=cluster.bootstrap,
        REDIS_KEY_PREFIX=f"thr{tag}",
        KAFKA_TOPIC_PREFIX=f"thr{tag}",
        CRAWLHIVE_HOME=str(work),
    )
    ensure_topics(settings, [settings.topic("crawled_firehose"), settings.topic("dead_letter")])
    client = redis.Redis.from_url(cluster.redis_url)
    site = Site()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS")}
    env.update(
        REDIS_URL=cluster.redis_url,
        KAFKA_BOOTSTRAP_SERVERS=cluster.bootstrap,
        REDIS_KEY_PREFIX=settings["REDIS_KEY_PREFIX"],
        KAFKA_TOPIC_PREFIX=settings["KAFKA_TOPIC_PREFIX"],
        CRAWLHIVE_HOME=str(work),
        QUEUE_HITS=str(HITS),
        QUEUE_WINDOW=str(WINDOW_S),
        QUEUE_MODERATED=str(moderated).lower(),
        CONCURRENT_REQUESTS="8",
        CRAWLER_ALLOWED_NETWORKS='["127.0.0.0/8"]',  # the bench site is on loopback
        LOG_LEVEL="WARNING",
    )
    procs = [subprocess.Popen([sys.executable, "-m", "crawlhive.app.cli", "crawler"], env=env) for _ in range(crawlers)]
    try:
        deadline = time.monotonic() + 60
        while client.zcard(keys_from_settings(settings).heartbeat_index("crawler")) < crawlers:
            if time.monotonic() > deadline:
                raise RuntimeError("crawlers did not start")
            time.sleep(0.05)
        message = {
            "appid": "bench", "crawlid": "thr", "spiderid": "link", "priority": 50, "maxdepth": 2,
            "domain_max_pages": None, "allowed_domains": None, "allow_regex": None, "deny_regex": None,
            "deny_extensions": None, "expires": 0, "useragent": None, "cookie": None, "attrs": None,
            "method": "GET", "headers": None, "body": None, "cookies": None,
            "url": f"http://127.0.0.1:{site.port}/",
        }  # fmt: skip
        pipe = client.pipeline(transaction=True)
        Frontier.from_settings(client, settings).push([seed_from_request(message, "bench/thr")], pipe)
        pipe.execute()
        while not [p for _, p in site.arrivals if p != "/robots.txt"]:
            time.sleep(0.01)
        time.sleep(duration)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
        site.close()
        client.close()
    pages = sorted(t for t, p in site.arrivals if p != "/robots.txt")
    t0 = pages[0]
    pages = [t for t in pages if t < t0 + duration]
    full_windows = int(duration // WINDOW_S)
    in_full = [t for t in pages if t < t0 + full_windows * WINDOW_S]
    per_window = [
        sum(1 for t in in_full if t0 + k * WINDOW_S <= t < t0 + (k + 1) * WINDOW_S) for k in range(full_windows)
    ]
    return {
        "mode": "moderated" if moderated else "unmoderated",
        "crawlers": crawlers,
        "fetches": len(pages),
        "max_in_any_window": sliding_max(pages, WINDOW_S, jitter),
        "max_in_any_window_strict": sliding_max(pages, WINDOW_S, 0.0),
        "per_window": per_window,
        "utilisation": round(len(in_full) / (full_windows * HITS), 3),
        "robots_disallowed_fetched": sum(1 for _, p in site.arrivals if p.startswith("/private")),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--crawlers", type=int, default=4)
    parser.add_argument("--modes", default="moderated,unmoderated")
    parser.add_argument("--jitter", type=float, default=0.1)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp, EmbeddedCluster() as cluster:
        for mode in args.modes.split(","):
            result = run(cluster, Path(tmp), mode == "moderated", args.crawlers, args.duration, args.jitter)
            results.append(result)
            ok_max = result["max_in_any_window"] <= HITS
            ok_use = result["utilisation"] >= 0.95
            print(
                f"throttle {result['mode']:11}: {result['crawlers']} crawlers, {result['fetches']} fetches in "
                f"{args.duration:g}s; max in any {WINDOW_S:g}s window {result['max_in_any_window']} "
                f"(strict {result['max_in_any_window_strict']}; target <= {HITS}) {'OK' if ok_max else 'MISS'}; "
                f"utilisation {result['utilisation']:.0%} of {HITS}/window {result['per_window']} "
                f"(target >= 95%) {'OK' if ok_use else 'MISS'}; robots-disallowed fetched "
                f"{result['robots_disallowed_fetched']} (target 0)"
            )
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
