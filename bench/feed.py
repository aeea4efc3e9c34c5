"""Bulk-feed benchmark: crawl requests per second through ``crawlhive feed --file`` (docs/contract.md §14).

Starts its own embedded Redis and broker, writes a file of N lines (URLs over D domains, and every
tenth line a JSON crawl request with options), then measures in the same run:

* **producer only**: a loop in this process producing the same N requests, already encoded, with
  the same producer factory and settings, then waiting for every acknowledgement;
* **feed --file**: one ``crawlhive feed --file`` process, from its start to its exit (reading,
  validating each line as the kafka-monitor would, producing, waiting for every ack).

The run fails unless exactly N records end up on the topic. Target: >= 5,000 requests/s.

Run: ``.venv/bin/python bench/feed.py [--lines N] [--domains D]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from crawlhive.app.embedded import EmbeddedCluster
from crawlhive.utils.backends.kafka_clients import ensure_topics, make_consumer, make_producer
from crawlhive.utils.config.settings import Settings

TARGET_PER_S = 5000


def write_lines(path: Path, lines: int, domains: int) -> list[dict[str, object]]:
    """The file, and the requests its lines stand for (as feed builds them)."""
    requests: list[dict[str, object]] = []
    with path.open("w") as out:
        for i in range(lines):
            url = f"http://site{i % domains}.example/page/{i}"
            if i % 10 == 0:
                request = {"url": url, "priority": 5, "maxdepth": 1, "allowed_domains": [f"site{i % domains}.example"]}
                out.write(json.dumps(request) + "\n")
            else:
                request = {"url": url}
                out.write(url + "\n")
            requests.append({"appid": "bench", "crawlid": "feed", **request})
    return requests


def count_records(settings: Settings, topic: str, expected: int) -> int:
    """Records on *topic*, read from the beginning until *expected* or 5 s without a new one."""
    consumer = make_consumer(settings, topic, group_id=None)
    seen = 0
    try:
        quiet_since = time.monotonic()
        while seen < expected and time.monotonic() - quiet_since < 5:
            batch = sum(len(records) for records in consumer.poll(timeout_ms=200).values())
            if batch:
                seen += batch
                quiet_since = time.monotonic()
    finally:
        consumer.close()
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--domains", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crawlhive-bench-") as workdir, EmbeddedCluster() as cluster:
        path = Path(workdir) / "urls.txt"
        requests = write_lines(path, args.lines, args.domains)
        base = {"KAFKA_BOOTSTRAP_SERVERS": cluster.bootstrap, "REDIS_URL": cluster.redis_url, "CRAWLHIVE_HOME": workdir}

        raw = Settings.from_overrides(**base, KAFKA_TOPIC_PREFIX="benchraw")
        ensure_topics(raw, [raw.topic("incoming")])
        encoded = [json.dumps(r).encode() for r in requests]
        producer = make_producer(raw)
        started = time.monotonic()
        futures = [producer.send(raw.topic("incoming"), value) for value in encoded]
        producer.flush(timeout=120)
        for future in futures:
            future.get(timeout=10)
        raw_s = time.monotonic() - started
        producer.close(timeout=5)
        print(f"producer only      : {args.lines / raw_s:9,.0f} requests/s ({args.lines:,} in {raw_s:.2f}s)")

        fed = Settings.from_overrides(**base, KAFKA_TOPIC_PREFIX="benchfeed")
        ensure_topics(fed, [fed.topic("incoming")])
        env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS")}
        env.update({k: str(v) for k, v in base.items()}, KAFKA_TOPIC_PREFIX="benchfeed")
        command = [sys.executable, "-m", "crawlhive.app.cli", "feed", "--file", str(path)]
        started = time.monotonic()
        done = subprocess.run(
            [*command, "--appid", "bench", "--crawlid", "feed"], env=env, capture_output=True, text=True
        )
        feed_s = time.monotonic() - started
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
        print(done.stderr.strip().splitlines()[-1])
        on_topic = count_records(fed, fed.topic("incoming"), args.lines)
        if on_topic != args.lines:
            print(f"expected {args.lines} records on {fed.topic('incoming')}, found {on_topic}", file=sys.stderr)
            return 1
        rate = args.lines / feed_s
        print(f"feed --file        : {rate:9,.0f} requests/s ({args.lines:,} in {feed_s:.2f}s, process start included)")
        print(f"ratio feed / producer only: {rate / (args.lines / raw_s):.2f}")
        print(f"target >= {TARGET_PER_S:,}/s: {'met' if rate >= TARGET_PER_S else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
