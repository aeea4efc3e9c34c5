"""Proxy benchmark: one crawlhive crawler through a pool of 4 local forward proxies, beside the same
crawler fetching directly, same site, same run (docs/contract.md §21; target: within 15 %).

Needs the bench site served by nginx (``make bench`` does both)::

    python3 bench/site.py && bench/nginx.sh start
    .venv/bin/python bench/proxy.py [--pages 6000] [--conc 32] [--pairs 3]

The 4 proxies are nginx too (a second private nginx this script starts and stops: one server per
proxy on 127.0.0.1:18181-18184, forwarding absolute-URL requests to the site with ``proxy_pass``),
so that what is measured is crawlhive's cost of choosing and reporting proxies, not a slow proxy.
Each pair runs the direct crawl, then the proxied one (``proxy_pool`` on every seed, 4 proxies
rotating), each on a fresh key prefix; the figure is the median of the pairs' ratios (proxied /
direct pages per second), with the Redis round trips per page of both.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import crawl
from benchkit import bench_settings

from crawlhive.app.embedded import EmbeddedCluster
from crawlhive.utils.backends.redis_clients import redis_from_settings

PROXY_PORTS = (18181, 18182, 18183, 18184)
#: The target of the figure: the proxied crawl at least this fraction of the direct one.
TARGET = 0.85


def nginx_proxies(work: Path) -> subprocess.Popen[bytes]:
    """A private nginx forwarding absolute-URL requests (what Scrapy sends an HTTP proxy)."""
    nginx = shutil.which("nginx")
    if nginx is None:
        raise SystemExit("nginx is missing: run bench/nginx.sh start once (it installs nginx-light as root)")
    root = work / "proxy-nginx"
    (root / "logs").mkdir(parents=True)
    servers = "\n".join(
        f"  server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass http://$http_host$request_uri; }} }}"
        for port in PROXY_PORTS
    )
    config = root / "nginx.conf"
    config.write_text(
        f"""worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/logs/error.log warn;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  proxy_http_version 1.1;
  proxy_buffering on;
  client_body_temp_path {root}; proxy_temp_path {root}; fastcgi_temp_path {root};
  uwsgi_temp_path {root}; scgi_temp_path {root};
{servers}
}}
"""
    )
    proc = subprocess.Popen([nginx, "-p", str(root), "-c", str(config)])
    time.sleep(0.5)
    return proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=6000)
    parser.add_argument("--conc", type=int, default=32)
    parser.add_argument("--maxdepth", type=int, default=100)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    if not crawl.SEEDS.exists():
        print(f"{crawl.SEEDS} missing: run bench/site.py and bench/nginx.sh start", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp, EmbeddedCluster() as cluster:
        work = Path(tmp)
        proxies = nginx_proxies(work)
        pools = '{"bench": [' + ", ".join(f'"http://127.0.0.1:{p}"' for p in PROXY_PORTS) + "]}"
        try:
            pids = crawl.service_pids(cluster)

            def run(label: str, run: int, proxied: bool) -> dict[str, Any]:
                prefix = f"px{label}{run}"
                settings = bench_settings(cluster, work, prefix, ("crawled_firehose", "dead_letter"))
                client = redis_from_settings(settings)
                saved = os.environ.get("PROXY_POOLS"), os.environ.get("PROXY_POOL_DEFAULT")
                if proxied:  # the crawler's environment (benchkit.crawler_env copies os.environ)
                    os.environ["PROXY_POOLS"], os.environ["PROXY_POOL_DEFAULT"] = pools, "bench"
                try:
                    return crawl.run_crawlers(settings, client, 1, args.pages, args.conc, args.maxdepth, work, pids)
                finally:
                    for name, value in zip(("PROXY_POOLS", "PROXY_POOL_DEFAULT"), saved, strict=True):
                        if value is None:
                            os.environ.pop(name, None)
                        else:
                            os.environ[name] = value
                    client.close()

            ratios = []
            for i in range(args.pairs):
                direct = run("direct", i, False)
                through = run("proxied", i, True)
                ratio = through["pages_per_s"] / direct["pages_per_s"]
                ratios.append(ratio)
                cpu_ratio = through["cpu_ms_per_page"]["crawlers"] / direct["cpu_ms_per_page"]["crawlers"]
                print(
                    f"pair {i + 1}: direct {direct['pages_per_s']:7.1f} pages/s"
                    f" ({direct['redis_round_trips_per_page']} round trips, {direct['cpu_ms_per_page']['crawlers']}"
                    f" CPU ms per page); through 4 proxies {through['pages_per_s']:7.1f} pages/s"
                    f" ({through['redis_round_trips_per_page']} round trips,"
                    f" {through['cpu_ms_per_page']['crawlers']} CPU ms per page): ratio {ratio:.2f},"
                    f" crawler CPU per page x{cpu_ratio:.2f}"
                )
            median = sorted(ratios)[len(ratios) // 2]
            verdict = "ok" if median >= TARGET else "BELOW TARGET"
            summary = f"{median:.2f} of direct (median of {len(ratios)}, target {TARGET})"
            print(f"through a pool of 4 proxies: {summary}: {verdict}")
            return 0 if median >= TARGET else 1
        finally:
            proxies.send_signal(signal.SIGQUIT)
            proxies.wait(10)


if __name__ == "__main__":
    sys.exit(main())
