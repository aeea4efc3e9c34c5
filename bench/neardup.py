"""Benchmark: the cost of near-duplicate detection (docs/contract.md §26.1) per record.

* **SimHash** of the main text: the extraction corpus's 120 real pages (``tests/data/extraction``),
  with ``cleaner/plugins/neardup.py simhash`` (numpy) against trafilatura's own ``Simhash`` (the
  same value), milliseconds per record, token hashes cached as in a long-running cleaner.
* **Lookup** in Redis: *N* records of one appid (SimHashes drawn at random, so almost none is a
  near-duplicate: every one is looked up and added) in batches of 50 (a cleaner's poll), records
  a second through ``cleaner_near_duplicates.lua``.
* **Memory**: Redis bytes per stored record (``MEMORY USAGE`` of the appid's index over *N*), with
  URLs of about 80 characters.

Usage: ``.venv/bin/python bench/neardup.py [--records N] [--redis-url URL]`` (default 100,000).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from benchkit import bench_redis, prefixed_redis
from trafilatura.deduplication import Simhash

from crawlhive.cleaner.plugins.neardup import simhash
from crawlhive.utils.backends.scripts import scripts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.corpus import load  # noqa: E402 - the tests' corpus reader

PREFIX = "benchnd"
BATCH = 50


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--redis-url")
    args = parser.parse_args()

    texts = [sample.text for sample in load()]
    for text in texts:  # warm the token hash cache, as a running cleaner has
        simhash(text)
    began = time.perf_counter()
    for _ in range(3):
        for text in texts:
            simhash(text)
    ours_ms = (time.perf_counter() - began) / (3 * len(texts)) * 1000
    began = time.perf_counter()
    for text in texts:
        Simhash(text)
    theirs_ms = (time.perf_counter() - began) / len(texts) * 1000
    print(f"SimHash of the corpus's {len(texts)} pages: {ours_ms:.2f} ms a record (trafilatura's: {theirs_ms:.2f} ms)")

    rng = random.Random(7)
    with bench_redis(args.redis_url) as url, prefixed_redis(url, PREFIX) as (_settings, client, keys):
        script = scripts(client)["cleaner_near_duplicates"]
        index = [keys.near_duplicates("benchapp", 1), keys.near_duplicates("benchapp", 0)]
        began = time.perf_counter()
        found = 0
        for start in range(0, args.records, BATCH):
            batch = []
            for i in range(start, min(start + BATCH, args.records)):
                batch += [
                    f"{rng.getrandbits(64):016x}",
                    "c1",
                    f"https://news.example.com/2026/11/29/article-{i:08d}-a-headline-of-words",
                ]
            replies = script(keys=index, args=[172800, 3, 4, *batch])
            found += sum(1 for reply in replies if int(reply[0]) >= 0)
        took = time.perf_counter() - began
        memory = sum(int(client.memory_usage(key) or 0) for key in index if client.exists(key))
    print(f"lookup and add: {args.records / took:,.0f} records/s in batches of {BATCH} ({found} found near, by chance)")
    print(f"Redis memory: {memory / args.records:.0f} bytes a record ({args.records:,} records of one appid)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
