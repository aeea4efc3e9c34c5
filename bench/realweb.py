"""Real-web-like crawl benchmark: HTTPS, 500 hosts, ~100 KB pages, redirects and 404s.

Beside the synthetic crawl bench (``bench/crawl.py``: 8 plain-HTTP hosts, 15 KB pages), a site
closer to what a crawler meets on the web, served by a private nginx on loopback:

* **HTTPS** with a self-signed certificate made at bench time (``openssl req -x509``; Scrapy does
  not verify certificates by default, and neither side of the comparison does here);
* **500 hosts**: loopback addresses 127.1.0.1 … 127.1.1.250 (``CRAWLER_ALLOWED_NETWORKS`` lets
  crawlhive fetch them), one TLS handshake per host connection, per-host queues and slots;
* **pages of about 100 KB**: a head with inline CSS and scripts, a header, 40 navigation links, an
  article of paragraphs with inline links, a sidebar, a footer; about 120 links a page, of which
  60 to pages of the same host, 10 to other hosts, 5 redirects (``/r/N`` answers 301 to
  ``/p/N.html``) and 5 dead links (404);
* every host serves the same 200 page files (one directory; links are host-relative, so each host
  has its own 200 URLs and the crawl 100,000 distinct ones, from 20 MB of files).

Measured in the same run, like for like (the approach of ``bench/crawl.py``): plain Scrapy (a
CrawlSpider following every link, Scrapy's scheduler and dupefilter, with crawlhive's
``CONCURRENT_ITEMS``) and one ``crawlhive crawler`` process (link spider, the 500 seeds as one
crawl, unthrottled, robots.txt off, guard on, full items to Kafka), ``--pairs`` times in turn,
each stopping after ``--pages`` responses: pages/s and CPU ms per page of each, and the median
ratio. Then one profiled run of each (``bench/realweb_ext.py`` explains the method) splits the CPU
per page into TLS, download, parse, links, scheduling (Redis for crawlhive), Kafka and other.

Run: ``.venv/bin/python bench/realweb.py [--pages 3000] [--pairs 3] [--conc 32]`` (needs nginx and
openssl: ``apt-get install nginx-light openssl``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchkit import ROOT, bench_settings, crawler_env
from crawl import CRAWLHIVE_ITEMS, commands, redis_cpu_s

from crawlhive.app.embedded import EmbeddedCluster
from crawlhive.utils.backends.redis_clients import keys_from_settings, redis_from_settings, write_pipeline
from crawlhive.utils.frontier import Frontier, seed_from_request

SITE = Path("/tmp/realweb")
#: Where the figures are left for ``bench/pipeline.py`` (same ``make bench`` run).
FIGURES = Path("/tmp/crawlhive-bench/realweb.json")
HOSTS = 500
PAGES = 200
PORT = 8443
WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but have an they"
    " you were her she there been one all we their has would when if so no will more can out up into do any your"
    " market city council report police government school season team player music film company price data study"
    " research health water energy climate election minister court law police officer village history museum"
).split()


def host(i: int) -> str:
    return f"127.1.{i // 250}.{i % 250 + 1}"


def paragraph(rng: random.Random, links: list[str]) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(60, 140))]
    for href in links:
        at = rng.randrange(len(words))
        words[at] = f'<a href="{href}">{words[at]} {rng.choice(WORDS)}</a>'
    return "<p>" + " ".join(words).capitalize() + ".</p>"


def page(n: int, rng: random.Random) -> str:
    """Page *n* of every host (about 100 KB, about 120 links; see the module)."""
    nav = "".join(f'<li><a href="/p/{k}.html">Section {k}</a></li>' for k in range(40))
    inline = [f"/p/{rng.randrange(PAGES)}.html" for _ in range(60)]
    inline += [f"https://{host(rng.randrange(HOSTS))}:{PORT}/p/{rng.randrange(PAGES)}.html" for _ in range(10)]
    inline += [f"/r/{rng.randrange(PAGES)}" for _ in range(5)]
    inline += [f"/gone/{rng.randrange(10**6)}.html" for _ in range(5)]
    rng.shuffle(inline)
    paragraphs = [paragraph(rng, inline[i::75]) for i in range(75)]
    script = "var cfg = {" + ",".join(f'"k{i}": "{rng.choice(WORDS)}{i}"' for i in range(1500)) + "};"
    style = " ".join(f".c{i} {{ margin: {i % 9}px; color: #{i % 4096:03x}; }}" for i in range(500))
    sidebar = "".join(f'<li><a href="/p/{rng.randrange(PAGES)}.html">Related story {k}</a></li>' for k in range(10))
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Story {n}</title>"
        f"<meta name='description' content='Story {n} of the bench site'><style>{style}</style>"
        f"<script>{script}</script></head><body><header><a href='/'>Home</a><nav><ul>{nav}</ul></nav></header>"
        f"<main><article><h1>Story {n}</h1><p class='date'>Published 14 February 2023</p>"
        + "".join(paragraphs)
        + f"</article><aside><ul>{sidebar}</ul></aside></main><footer><p>Footer text, contact, terms.</p>"
        "</footer></body></html>"
    )


def build_site() -> None:
    """The page files, the certificate and nginx's configuration under :data:`SITE`."""
    www = SITE / "www" / "p"
    www.mkdir(parents=True, exist_ok=True)
    rng = random.Random(35)
    for n in range(PAGES):
        (www / f"{n}.html").write_text(page(n, rng))
    (SITE / "www" / "index.html").write_text(page(PAGES, rng))
    if not (SITE / "cert.pem").exists():
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=realweb.bench",
             "-addext", "subjectAltName=" + ",".join(f"IP:{host(i)}" for i in range(HOSTS)),
             "-keyout", str(SITE / "key.pem"), "-out", str(SITE / "cert.pem")],
            check=True, capture_output=True,
        )  # fmt: skip
    (SITE / "logs").mkdir(exist_ok=True)
    listens = "".join(f"    listen {host(i)}:{PORT} ssl;\n" for i in range(HOSTS))
    (SITE / "nginx.conf").write_text(
        f"""worker_processes 2;
pid {SITE}/nginx.pid;
error_log {SITE}/logs/error.log warn;
events {{ worker_connections 8192; multi_accept on; }}
http {{
  access_log off; sendfile on; tcp_nodelay on; keepalive_timeout 65; keepalive_requests 1000000;
  open_file_cache max=5000 inactive=300s; default_type text/html; etag off;
  client_body_temp_path {SITE}/tmp; proxy_temp_path {SITE}/tmp; fastcgi_temp_path {SITE}/tmp;
  uwsgi_temp_path {SITE}/tmp; scgi_temp_path {SITE}/tmp;
  ssl_certificate {SITE}/cert.pem; ssl_certificate_key {SITE}/key.pem;
  ssl_session_cache shared:bench:10m;
  server {{
{listens}    root {SITE}/www;
    location /r/ {{ rewrite ^/r/(\\d+)$ /p/$1.html permanent; }}
    location / {{ try_files $uri $uri/index.html =404; }}
  }}
}}
"""
    )
    (SITE / "tmp").mkdir(exist_ok=True)
    (SITE / "seeds.txt").write_text("".join(f"https://{host(i)}:{PORT}/\n" for i in range(HOSTS)))


def run_plain(pages: int, conc: int, out: Path, profile: Path | None) -> dict[str, Any]:
    """Plain Scrapy like for like (this file with ``--plain-child``)."""
    command = [sys.executable, __file__, "--plain-child", "--pages", str(pages), "--conc", str(conc), "--out", str(out)]
    subprocess.run([*command, *(["--profile", str(profile)] if profile else [])], check=True)
    return dict(json.loads(out.read_text()))


def plain_child(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT / "bench" / "baseline"))
    sys.path.insert(0, str(ROOT / "bench"))
    from scrapy.crawler import CrawlerProcess
    from site_spider import SiteSpider

    settings: dict[str, Any] = {
        "LOG_LEVEL": "WARNING", "CONCURRENT_REQUESTS": args.conc, "CONCURRENT_REQUESTS_PER_DOMAIN": args.conc,
        "CONCURRENT_ITEMS": CRAWLHIVE_ITEMS, "DOWNLOAD_DELAY": 0, "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False, "CLOSESPIDER_PAGECOUNT": args.pages, "CLOSESPIDER_TIMEOUT": 600,
        "EXTENSIONS": {"measure.Measure": 0, "realweb_ext.Profile": 1}, "BENCH_OUT": str(args.out),
        "BENCH_PROFILE_OUT": str(args.profile or ""),
    }  # fmt: skip
    process = CrawlerProcess(settings)
    process.crawl(SiteSpider, seeds=str(SITE / "seeds.txt"))
    process.start()


def run_crawlhive(
    cluster: EmbeddedCluster, work: Path, tag: str, pages: int, conc: int, profile: Path | None, **overrides: str
) -> dict[str, Any]:
    """One ``crawlhive crawler`` process over the 500 seeds as one crawl (*overrides*: more of its
    settings, such as ``FETCH``: ``bench/fetch.py``)."""
    settings = bench_settings(cluster, work, f"realweb{tag}", ("crawled_firehose", "dead_letter"))
    client = redis_from_settings(settings)
    measure, rtt = work / f"measure-{tag}.json", work / f"rtt-{tag}.json"
    scrapy = {
        "EXTENSIONS": {"measure.Measure": 0, "crawl_ext.RoundTrips": 1, "realweb_ext.Profile": 2},
        "BENCH_OUT": str(measure), "BENCH_RTT_OUT": str(rtt), "BENCH_PROFILE_OUT": str(profile or ""),
        "CLOSESPIDER_PAGECOUNT": pages,
    }  # fmt: skip
    log_level = os.environ.get("RW_LOG", "WARNING")
    env = crawler_env(settings, work, scrapy, CONCURRENT_REQUESTS=str(conc), LOG_LEVEL=log_level, **overrides)
    proc = subprocess.Popen([sys.executable, "-m", "crawlhive.app.cli", "crawler"], env=env)
    try:
        deadline = time.monotonic() + 60
        while client.zcard(keys_from_settings(settings).heartbeat_index("crawler")) < 1:
            if time.monotonic() > deadline:
                raise SystemExit("the crawler did not start")
            time.sleep(0.05)
        before, redis_before = sum(commands(client).values()), redis_cpu_s(client)
        base = {
            "appid": "bench", "crawlid": f"rw{tag}", "spiderid": "link", "priority": 50, "maxdepth": 100,
            "domain_max_pages": None, "allowed_domains": None, "allow_regex": None, "deny_regex": None,
            "deny_extensions": None, "expires": 0, "useragent": None, "cookie": None, "attrs": None,
            "method": "GET", "headers": None, "body": None, "cookies": None,
        }  # fmt: skip
        seeds = (SITE / "seeds.txt").read_text().split()
        pipe = write_pipeline(client)
        Frontier.from_settings(client, settings).push(
            [seed_from_request({**base, "url": u}, f"rw/{tag}/{i}") for i, u in enumerate(seeds)], pipe
        )
        pipe.execute()
        proc.wait(timeout=900)
        result = dict(json.loads(measure.read_text()))
        result["redis_commands_per_page"] = round(
            (sum(commands(client).values()) - before) / max(1, result["pages"]), 1
        )
        result["redis_cpu_ms_per_page"] = round(
            (redis_cpu_s(client) - redis_before) * 1000 / max(1, result["pages"]), 2
        )
        return result
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        client.close()


def split(profile: dict[str, Any], cpu_ms: float) -> str:
    """The CPU per page split by category (shares of the profile, scaled to *cpu_ms*)."""
    categories = profile["categories"]
    main = sum(categories.values())
    threads = profile["other_threads_s"]
    whole = profile["main_thread_s"] + threads
    share_main = profile["main_thread_s"] / whole if whole else 1.0
    parts = {name: cpu_ms * share_main * seconds / main for name, seconds in categories.items()}
    parts["other threads"] = cpu_ms * (1 - share_main)
    order = ("tls", "download", "parse", "links", "scheduling", "kafka", "other", "other threads")
    return ", ".join(f"{name} {parts.get(name, 0.0):.2f}" for name in order)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--conc", type=int, default=32)
    parser.add_argument("--plain-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--profile", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain_child:
        plain_child(args)
        return 0
    build_site()
    subprocess.run(["nginx", "-p", str(SITE), "-c", str(SITE / "nginx.conf")], check=True)
    try:
        with tempfile.TemporaryDirectory(prefix="crawlhive-realweb-") as tmp, EmbeddedCluster() as cluster:
            work = Path(tmp)
            pairs = []
            for run in range(args.pairs):
                plain = run_plain(args.pages, args.conc, work / f"plain-{run}.json", None)
                ours = run_crawlhive(cluster, work, str(run), args.pages, args.conc, None)
                plain_ms = plain["cpu_s"] * 1000 / plain["pages"]
                ours_ms = ours["cpu_s"] * 1000 / ours["pages"]
                pairs.append((ours["pages_per_s"] / plain["pages_per_s"], plain_ms, ours_ms, plain, ours))
                print(
                    f"pair {run + 1}: plain Scrapy {plain['pages_per_s']:6.1f} pages/s, {plain_ms:.2f} CPU ms per page;"
                    f" crawlhive x1 {ours['pages_per_s']:6.1f} pages/s, {ours_ms:.2f} CPU ms per page"
                    f" (Redis {ours['redis_commands_per_page']} commands, {ours['redis_cpu_ms_per_page']} CPU ms"
                    f" per page): ratio {pairs[-1][0]:.2f}"
                )
            ratio, plain_ms, ours_ms, plain, ours = sorted(pairs, key=lambda p: p[0])[len(pairs) // 2]
            plain_profile = work / "plain-profile.json"
            run_plain(args.pages, args.conc, work / "plain-p.json", plain_profile)
            ours_profile = work / "ours-profile.json"
            run_crawlhive(cluster, work, "p", args.pages, args.conc, ours_profile)
            print(f"CPU ms per page, plain Scrapy : {split(json.loads(plain_profile.read_text()), plain_ms)}")
            print(f"CPU ms per page, crawlhive x1: {split(json.loads(ours_profile.read_text()), ours_ms)}")
            listed = ", ".join(f"{p[0]:.2f}" for p in sorted(pairs, key=lambda p: p[0]))
            print(
                f"real-web-like ratio 1 crawlhive process / plain Scrapy: median {ratio:.2f} of {len(pairs)}"
                f" interleaved pairs ({listed}; target >= 3.0: {'met' if ratio >= 3.0 else 'NOT met'}); crawlhive"
                f" {ours['pages_per_s']:.1f} pages/s per"
                f" process, {ours_ms:.2f} CPU ms per page; plain Scrapy {plain['pages_per_s']:.1f}, {plain_ms:.2f}"
            )
            FIGURES.parent.mkdir(parents=True, exist_ok=True)
            FIGURES.write_text(
                json.dumps(
                    {
                        "crawler_cpu_ms_per_page": ours_ms,
                        "redis_cpu_ms_per_page": ours["redis_cpu_ms_per_page"],
                        "plain_scrapy_cpu_ms_per_page": plain_ms,
                        "ratio": ratio,
                    }
                )
            )
    finally:
        pid = int((SITE / "nginx.pid").read_text()) if (SITE / "nginx.pid").exists() else 0
        if pid:
            os.kill(pid, signal.SIGTERM)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
