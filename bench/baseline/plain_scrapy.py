#!/usr/bin/env python3
"""The baseline of the crawl benchmark: plain Scrapy crawling the bench site in this process.

Scrapy's own scheduler and in-memory dupefilter, no download delay, robots.txt off, stopping after
``--pages`` responses (``CLOSESPIDER_PAGECOUNT``); the ``measure.Measure`` extension writes pages/s,
CPU and memory to ``--out`` as JSON. ``--set NAME=VALUE`` adds Scrapy settings (integers parsed).

Usage: ``python bench/baseline/plain_scrapy.py --conc 32 --pages 6000 --out /tmp/plain.json``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scrapy.crawler import CrawlerProcess  # noqa: E402
from site_spider import SiteSpider  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conc", type=int, default=16, help="CONCURRENT_REQUESTS (also per domain)")
    parser.add_argument("--pages", type=int, default=0, help="stop after this many responses")
    parser.add_argument("--out", required=True, help="where to write the measurements (JSON)")
    parser.add_argument("--seeds", default="/tmp/perfsite/www/seeds.txt")
    parser.add_argument("--timeout", type=int, default=600, help="CLOSESPIDER_TIMEOUT, a safety bound")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    settings: dict[str, Any] = {
        "LOG_LEVEL": "INFO",
        "CONCURRENT_REQUESTS": args.conc,
        "CONCURRENT_REQUESTS_PER_DOMAIN": args.conc,
        "DOWNLOAD_DELAY": 0,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "REMOTE_CONTROL_ENABLED": False,
        "CLOSESPIDER_PAGECOUNT": args.pages,
        "CLOSESPIDER_TIMEOUT": args.timeout,
        "EXTENSIONS": {"measure.Measure": 0},
        "BENCH_OUT": args.out,
    }
    for pair in args.set:
        name, _, value = pair.partition("=")
        settings[name] = int(value) if value.lstrip("-").isdigit() else value
    process = CrawlerProcess(settings)
    process.crawl(SiteSpider, seeds=args.seeds)
    process.start()


if __name__ == "__main__":
    main()
