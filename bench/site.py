#!/usr/bin/env python3
"""The crawl benchmark's target: a generated static site of several hosts, served by nginx.

Shape (what the benchmark's figures depend on, kept fixed so runs and machines compare):

* ``--hosts`` hosts (default 8) on the loopback addresses 127.0.0.2, 127.0.0.3, … port 8080: eight
  download slots for Scrapy and eight domains for crawlhive's frontier and throttle;
* ``--pages`` pages per host (default 2,500), ``/p/<n>.html``, about 15 KB each;
* 20 links per page: the 16 children of page ``n`` in a tree of fan-out 16 (``16n + 1`` … ``16n + 16``,
  so every page of a host is at most 3 links from its page 0), topped up with random pages of the
  same host when a page has fewer children, plus 4 links to random pages of other hosts;
* the seeds (each host's page 0) listed in ``seeds.txt``.

Everything is drawn from seeded random generators: the same arguments give the same site.

Usage: ``python bench/site.py [OUTDIR] [--hosts 8] [--pages 2500] [--port 8080]`` (default OUTDIR
``/tmp/perfsite/www``); then ``bench/nginx.sh start``.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

FAN_OUT = 16
SAME_HOST_LINKS = 16
OTHER_HOST_LINKS = 4
PAGE_BYTES = 15 * 1024
PARAGRAPHS = 24
NAV_LINKS = 8
VOCABULARY = (
    "frontier lease throttle domain crawl seed depth priority queue item firehose broker partition "
    "offset consumer producer monitor heartbeat window backlog spider fetch response header body "
    "anchor canonical fingerprint dedupe retry reclaim politeness robots sitemap budget trap shard "
    "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega north south east west river"
).split()


def address(host: int) -> str:
    """The loopback address of host number *host* (127.0.0.2 for host 0)."""
    return f"127.0.0.{host + 2}"


def links_of(rng: random.Random, host: int, page: int, hosts: int, pages: int, port: int) -> list[str]:
    """The 20 hrefs of one page, in random order."""
    children = [child for child in range(page * FAN_OUT + 1, (page + 1) * FAN_OUT + 1) if child < pages]
    same = children + [rng.randrange(pages) for _ in range(SAME_HOST_LINKS - len(children))]
    hrefs = [f"/p/{target}.html" for target in same]
    for _ in range(OTHER_HOST_LINKS):
        other = rng.choice([h for h in range(hosts) if h != host])
        hrefs.append(f"http://{address(other)}:{port}/p/{rng.randrange(pages)}.html")
    rng.shuffle(hrefs)
    return hrefs


def html_of(rng: random.Random, host: int, page: int, hrefs: list[str]) -> str:
    """A page of about PAGE_BYTES: a title, a navigation list, paragraphs with the other links."""
    top = f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>Site {host}, page {page}</title></head>\n'
    top += f"<body>\n<h1>Site {host}, page {page}</h1>\n"
    nav = "".join(f'<li><a href="{href}">{rng.choice(VOCABULARY)}</a></li>' for href in hrefs[:NAV_LINKS])
    chunks = [top, f'<ul class="nav">{nav}</ul>\n']
    pending = hrefs[NAV_LINKS:]
    budget = (PAGE_BYTES - sum(map(len, chunks)) - 200) // PARAGRAPHS
    for number in range(PARAGRAPHS):
        words: list[str] = []
        length = 0
        while length < budget:
            word = rng.choice(VOCABULARY)
            words.append(word)
            length += len(word) + 1
        if pending and number % 2 == 0:
            at = rng.randrange(len(words))
            words[at] = f'<a href="{pending.pop()}">{words[at]}</a>'
        chunks.append(f"<p>{' '.join(words)}</p>\n")
    chunks += [f'<a href="{href}">next</a>\n' for href in pending]
    chunks.append("</body></html>\n")
    return "".join(chunks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", nargs="?", default="/tmp/perfsite/www")
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--pages", type=int, default=2500, help="pages per host")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    out = Path(args.outdir)
    written = 0
    for host in range(args.hosts):
        folder = out / f"h{host}" / "p"
        folder.mkdir(parents=True, exist_ok=True)
        rng = random.Random(f"crawlhive-bench-{host}")
        for page in range(args.pages):
            text = html_of(rng, host, page, links_of(rng, host, page, args.hosts, args.pages, args.port))
            (folder / f"{page}.html").write_text(text)
            written += len(text)
    (out / "seeds.txt").write_text("".join(f"http://{address(h)}:{args.port}/p/0.html\n" for h in range(args.hosts)))
    total = args.hosts * args.pages
    print(f"{total} pages, {written / 1e6:.1f} MB ({written / total / 1024:.1f} KB a page) in {out}")


if __name__ == "__main__":
    main()
