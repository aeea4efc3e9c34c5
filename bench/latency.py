"""Benchmark: first-result latency on an idle cluster.

Starts an embedded Redis and broker, one ``crawlhive kafka-monitor``, one ``crawlhive
redis-monitor`` and one ``crawlhive crawler`` (default settings), and a local site on one loopback
host per run (a domain the throttle has not seen, whose robots.txt is fetched first, as for any new
domain); once everything is idle,
it repeatedly produces a crawl request (a new crawlid each time) to ``<prefix>.incoming`` and
measures the time until that crawl's item is read from ``<prefix>.crawled_firehose`` by a consumer
that is already polling. This is the whole path a user waits for: Kafka -> kafka-monitor ->
Redis frontier -> wake-up of an idle crawler -> fetch -> Kafka -> consumer.

Usage: ``.venv/bin/python bench/latency.py [--runs N] [--gap S]``. Target: median under 500 ms
(our own budget: the broker's fetch wait is 10 ms per hop and a local fetch a few ms; the rest is
process wake-ups and Python).
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import redis

from crawlhive.app.demo_site import SiteServer
from crawlhive.app.embedded import EmbeddedCluster, free_port
from crawlhive.utils.backends.kafka_clients import ensure_topics, make_consumer, make_producer
from crawlhive.utils.config.settings import Settings

TARGET_MEDIAN_S = 0.5


class Page(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - stdlib's name
        body = b"<html><body>hello</body></html>" if self.path != "/robots.txt" else b"User-agent: *\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--gap", type=float, default=1.0, help="idle seconds between two requests")
    args = parser.parse_args()
    # One loopback host per run, so each request is to a domain the throttle has not seen lately
    # (QUEUE_HITS/QUEUE_WINDOW at their defaults space one domain's fetches 6 s apart).
    port = free_port()
    servers = [SiteServer((f"127.0.1.{run + 1}", port), Page) for run in range(args.runs + 1)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    latencies: list[float] = []
    stages: list[tuple[float, float]] = []  # (queued in Redis, acked by the crawler), seconds after produce
    with tempfile.TemporaryDirectory() as tmp, EmbeddedCluster() as cluster:
        settings = Settings.from_overrides(
            REDIS_URL=cluster.redis_url,
            KAFKA_BOOTSTRAP_SERVERS=cluster.bootstrap,
            REDIS_KEY_PREFIX="lat",
            KAFKA_TOPIC_PREFIX="lat",
            CRAWLHIVE_HOME=tmp,
        )
        topics = [settings.topic(t) for t in ("incoming", "crawled_firehose", "outbound_firehose", "dead_letter")]
        ensure_topics(settings, topics)
        env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS")}
        env.update(
            REDIS_URL=cluster.redis_url,
            KAFKA_BOOTSTRAP_SERVERS=cluster.bootstrap,
            REDIS_KEY_PREFIX="lat",
            KAFKA_TOPIC_PREFIX="lat",
            CRAWLHIVE_HOME=tmp,
            CRAWLER_ALLOWED_NETWORKS='["127.0.0.0/8"]',  # the bench site is on loopback
            LOG_LEVEL="WARNING",
        )
        procs = [
            subprocess.Popen([sys.executable, "-m", "crawlhive.app.cli", *cmd], env=env)
            for cmd in (["kafka-monitor"], ["redis-monitor"], ["crawler"])
        ]
        client = redis.Redis.from_url(cluster.redis_url)
        producer = make_producer(settings)
        consumer = make_consumer(settings, settings.topic("crawled_firehose"), group_id=None)
        try:
            deadline = time.monotonic() + 60
            while not all(client.zcard(f"lat:nodes:{c}") for c in ("crawler", "kafka-monitor", "redis-monitor")):
                if time.monotonic() > deadline:
                    raise RuntimeError("components did not start")
                time.sleep(0.05)
            # warm-up: one crawl end to end (the kafka-monitor's group join, robots.txt, connections)
            for run in range(args.runs + 1):
                crawlid = f"lat{run}"
                request = {"url": f"http://127.0.1.{run + 1}:{port}/page", "appid": "bench", "crawlid": crawlid}
                started = time.perf_counter()
                producer.send(settings.topic("incoming"), json.dumps(request).encode())
                producer.flush()
                found = queued = acked = None
                record_key = f"lat:crawl:link:bench:{crawlid}"
                while found is None and time.perf_counter() - started < 60:
                    for records in consumer.poll(timeout_ms=5).values():
                        for record in records:
                            if json.loads(record.value).get("crawlid") == crawlid:
                                found = time.perf_counter() - started
                    if queued is None and client.exists(record_key):
                        queued = time.perf_counter() - started
                    if acked is None and client.hget(record_key, "crawled"):
                        acked = time.perf_counter() - started
                if found is None:
                    raise RuntimeError(f"no item for {crawlid} within 60 s")
                if run:
                    latencies.append(found)
                    stages.append((queued or found, acked or found))
                time.sleep(args.gap)
        finally:
            consumer.close()
            producer.close(timeout=5)
            client.close()
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(30)
            for server in servers:
                server.shutdown()
                server.server_close()
    median = statistics.median(latencies)
    print(
        f"first-result latency (idle cluster, {len(latencies)} runs): median {median * 1000:.0f} ms, "
        f"min {min(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms "
        f"(target median <= {TARGET_MEDIAN_S * 1000:.0f} ms) {'OK' if median <= TARGET_MEDIAN_S else 'MISS'}"
    )
    print(
        f"  stages (median): queued in Redis by the kafka-monitor {statistics.median(q for q, _ in stages) * 1000:.0f}"
        " ms,"
        f" page acked by the crawler {statistics.median(a for _, a in stages) * 1000:.0f} ms, item read"
        f" {median * 1000:.0f} ms after the request was produced"
    )
    print(json.dumps({"latency_s": [round(x, 4) for x in latencies]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
