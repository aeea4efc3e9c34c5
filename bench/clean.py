"""Cleaning benchmark: cleaned records per second of ``crawlhive cleaner`` (docs/contract.md §13).

Takes N pages of the bench site (``bench/site.py``: realistic HTML of about 15 KB, navigation,
paragraphs, links), made into crawled items as a crawler sends them, and measures in the same run:

* **bare loop**: the cleaner's steps (extraction, language, dates, PII, validation; the content
  hash) run in this process over the same pages, without Kafka or Redis;
* **1 cleaner**: one ``crawlhive cleaner`` process, already consuming, from the first item produced
  to the N-th cleaned record read from ``<prefix>.cleaned`` (produce, consume, clean, dedupe in
  Redis, produce, commit);
* **2 cleaners**: the same with two processes sharing the topic's partitions.

Targets: 1 cleaner >= 0.8 x the bare loop (the stage adds at most 20 %); 2 cleaners >= 1.6 x one.
On a 2-core machine the broker, Redis and this process share the cores with the cleaners.

Run: ``python3 bench/site.py`` once, then ``.venv/bin/python bench/clean.py [--pages N]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from benchkit import bench_settings

from crawlhive.app.embedded import EmbeddedCluster
from crawlhive.cleaner.page import Page
from crawlhive.cleaner.plugins.dates import DatePlugin
from crawlhive.cleaner.plugins.extract import ExtractPlugin
from crawlhive.cleaner.plugins.language import LanguagePlugin
from crawlhive.cleaner.plugins.pii import PiiPlugin
from crawlhive.cleaner.plugins.validate import ValidatePlugin
from crawlhive.utils.kafka_clients import make_consumer, make_producer
from crawlhive.utils.keys import Keys

SITE = Path("/tmp/perfsite/www")


def items(pages: int) -> list[dict[str, Any]]:
    """Crawled items of the first *pages* bench-site pages."""
    files = sorted(SITE.glob("h*/p/*.html"))[:pages]
    return [
        {
            "appid": "bench",
            "crawlid": "clean",
            "url": f"http://{f.parts[-3]}.bench/p/{f.name}",
            "response_url": f"http://{f.parts[-3]}.bench/p/{f.name}",
            "status_code": 200,
            "status_msg": "OK",
            "response_headers": {"Content-Type": ["text/html; charset=utf-8"]},
            "request_headers": {},
            "body": f.read_text(),
            "encoding": "utf-8",
            "links": [],
            "attrs": None,
            "timestamp": "2026-11-25T12:00:00.000000",
        }
        for f in files
    ]


def bare_loop(records: list[dict[str, Any]]) -> float:
    """Records/s of the cleaner's steps in this process (no Kafka, no Redis)."""
    extract = ExtractPlugin(max_seconds=60.0, max_text_bytes=262144)  # extraction in its child process
    steps = [extract, LanguagePlugin(), DatePlugin(), PiiPlugin(), ValidatePlugin(["text"])]
    try:
        started = time.perf_counter()
        for i, item in enumerate(records):
            page = Page.from_item(item, f"bare/{i}")
            for step in steps:
                step.process(page)
            page.record["content_hash"] = hashlib.sha256((page.record.get("text") or "").encode()).hexdigest()
        return len(records) / (time.perf_counter() - started)
    finally:
        extract.close()


def run_cleaners(cluster: EmbeddedCluster, work: Path, records: list[dict[str, Any]], n: int) -> float:
    """Records/s of *n* cleaner processes, from the first item produced to the last record cleaned."""
    prefix = f"benchclean{n}"
    settings = bench_settings(cluster, work, prefix, ("crawled_firehose", "cleaned", "dead_letter"))
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS")}
    env.update(
        REDIS_URL=cluster.redis_url,
        KAFKA_BOOTSTRAP_SERVERS=cluster.bootstrap,
        REDIS_KEY_PREFIX=prefix,
        KAFKA_TOPIC_PREFIX=prefix,
        CRAWLHIVE_HOME=str(work),
        LOG_LEVEL="WARNING",
    )
    command = [sys.executable, "-m", "crawlhive.app.cli", "cleaner"]
    procs = [subprocess.Popen(command, env=env) for _ in range(n)]
    client = redis.Redis.from_url(cluster.redis_url)
    consumer = make_consumer(settings, settings.topic("cleaned"), group_id=None)
    try:
        deadline = time.monotonic() + 60
        while client.zcard(Keys(prefix).heartbeat_index("cleaner")) < n and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3.0)  # the group's partitions assigned to every member
        producer = make_producer(settings)
        started = time.monotonic()
        for item in records:
            producer.send(settings.topic("crawled_firehose"), json.dumps(item).encode())
        producer.flush(timeout=60)
        producer.close(timeout=5)
        seen = 0
        while seen < len(records) and time.monotonic() - started < 600:
            seen += sum(len(batch) for batch in consumer.poll(timeout_ms=200).values())
        elapsed = time.monotonic() - started
        if seen < len(records):
            raise SystemExit(f"only {seen} of {len(records)} records cleaned")
        return len(records) / elapsed
    finally:
        consumer.close()
        client.close()
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1500)
    args = parser.parse_args()
    if not SITE.exists():
        print(f"{SITE} missing: run python3 bench/site.py", file=sys.stderr)
        return 2
    records = items(args.pages)
    sizes = sorted(len(r["body"]) for r in records)
    print(f"{len(records)} bench-site pages, {sizes[0] // 1024}-{sizes[-1] // 1024} KB")
    bare = bare_loop(records)
    print(f"bare loop (same steps, no Kafka): {bare:7.1f} records/s")
    with tempfile.TemporaryDirectory(prefix="crawlhive-bench-") as tmp, EmbeddedCluster() as cluster:
        one = run_cleaners(cluster, Path(tmp), records, 1)
        print(f"1 cleaner                       : {one:7.1f} records/s")
        two = run_cleaners(cluster, Path(tmp), records, 2)
        print(f"2 cleaners                      : {two:7.1f} records/s")
    print(f"ratio 1 cleaner / bare loop: {one / bare:.2f} (target >= 0.8)")
    print(f"ratio 2 cleaners / 1 cleaner: {two / one:.2f} (target >= 1.6)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
