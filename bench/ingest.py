"""Ingest benchmark: valid crawl requests per second through one kafka-monitor process.

Starts its own embedded Redis and broker (``app/embedded.py``), produces N valid crawl requests
to ``<prefix>.incoming``, then measures in the same run:

* **consume-only**: a trivial loop in this process (same consumer factory and settings, its own
  consumer group) that polls the same N records, counts them and commits each batch;
* **kafka-monitor**: one ``crawlhive kafka-monitor`` process (``python -m crawlhive.app.cli
  kafka-monitor``) that validates each record and queues it in the Redis frontier.

Both rates are steady-state: from the end of the first batch (so consumer-group join time is left
out) to the N-th record consumed / queued in Redis (polled from the monitor's lifetime
``plugin:ScraperHandler`` counter, which it increments right after each batch's queue writes), and
so is the CPU per record beside each (this process's CPU for consume-only, the monitor process's for
the kafka-monitor; the producer's line counts this process's CPU while it sends). At the end the
queues themselves are counted: all N requests must be queued exactly once.

Run: ``.venv/bin/python bench/ingest.py [--messages N] [--domains D] [--crawls C]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import redis
from benchkit import tree_cpu

from crawlhive.app.embedded import EmbeddedCluster
from crawlhive.kafka_monitor.monitor import COMPONENT
from crawlhive.utils.backends.kafka_clients import ensure_topics, make_consumer, make_producer
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings, env_value

PREFIX = "bench"


@dataclass
class Rate:
    """Records counted from the end of the first batch to the last record."""

    name: str
    records: int
    seconds: float
    wall_s: float
    #: CPU seconds the measured process spent over :attr:`seconds`.
    cpu_s: float = 0.0

    @property
    def per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else float("inf")

    def line(self) -> str:
        return (
            f"{self.name:<14} {self.per_s:>9,.0f} records/s  ({self.records:,} records in {self.seconds:.2f}s steady;"
            f" {self.wall_s:.2f}s from start, group join included); {self.cpu_us:,.1f} CPU us/record"
        )

    @property
    def cpu_us(self) -> float:
        return self.cpu_s / self.records * 1e6 if self.records else 0.0


def requests(count: int, domains: int, crawls: int) -> list[bytes]:
    """*count* valid crawl requests over *domains* domains and *crawls* crawl ids, priorities 1-100."""
    return [
        json.dumps(
            {
                "url": f"http://www.site{i % domains}.com/page/{i}?q={i * 7}",
                "appid": "benchapp",
                "crawlid": f"crawl{i % crawls}",
                "priority": i % 100 + 1,
                "maxdepth": 1,
            }
        ).encode()
        for i in range(count)
    ]


def produce(settings: Settings, messages: list[bytes]) -> tuple[float, float]:
    """Send *messages* to the incoming topic; returns the seconds it took (acks included) and this
    process's CPU seconds meanwhile."""
    producer = make_producer(settings)
    try:
        start, cpu = time.monotonic(), time.process_time()
        topic = settings.topic("incoming")
        for value in messages:
            producer.send(topic, value)
        producer.flush(timeout=120)
        return time.monotonic() - start, time.process_time() - cpu
    finally:
        producer.close(timeout=5)


def consume_only(settings: Settings, expected: int, timeout_s: float = 300.0) -> Rate:
    """The baseline: poll, count and commit, nothing else."""
    consumer = make_consumer(settings, settings.topic("incoming"), group_id=f"{PREFIX}-consume-only")
    try:
        start = time.monotonic()
        deadline = start + timeout_s
        seen, first_at, first_count, first_cpu = 0, 0.0, 0, 0.0
        while seen < expected and time.monotonic() < deadline:
            polled = consumer.poll(timeout_ms=100, max_records=settings.getint("KAFKA_CONSUMER_MAX_POLL_RECORDS"))
            batch = sum(len(records) for records in polled.values())
            if batch:
                consumer.commit()
                seen += batch
                if not first_count:
                    first_at, first_count, first_cpu = time.monotonic(), seen, time.process_time()
        end, cpu = time.monotonic(), time.process_time() - first_cpu
    finally:
        consumer.close(autocommit=False)
    if seen < expected:
        raise SystemExit(f"consume-only loop saw {seen} of {expected} records within {timeout_s:g}s")
    return Rate("consume-only", seen - first_count, end - first_at, end - start, cpu)


def through_monitor(settings: Settings, expected: int, workdir: str, timeout_s: float = 300.0) -> Rate:
    """One kafka-monitor process; counts what it queued through its ScraperHandler counter."""
    env = {
        **os.environ,
        **{name: env_value(settings[name]) for name in settings if settings.source(name) == "cli"},
        "CRAWLHIVE_HOME": workdir,
    }
    log = open(os.path.join(workdir, "kafka-monitor.log"), "wb")  # closed in the finally below
    proc = subprocess.Popen(
        [sys.executable, "-m", "crawlhive.app.cli", "kafka-monitor"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    client = redis.Redis.from_url(settings["REDIS_URL"])
    counter = keys_from_settings(settings).stats_lifetime(COMPONENT, "plugin:ScraperHandler")
    try:
        start = time.monotonic()
        deadline = start + timeout_s
        queued, first_at, first_count, first_cpu = 0, 0.0, 0, 0.0
        while queued < expected and time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"kafka-monitor exited with {proc.returncode}; see {log.name}")
            queued = int(client.get(counter) or 0)
            if queued and not first_count:
                first_at, first_count, first_cpu = time.monotonic(), queued, tree_cpu(proc.pid)
            time.sleep(0.01)
        end, cpu = time.monotonic(), tree_cpu(proc.pid) - first_cpu
        if queued < expected:
            raise SystemExit(f"kafka-monitor queued {queued} of {expected} within {timeout_s:g}s; see {log.name}")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        log.close()
        client.close()
    if code != 0:
        raise SystemExit(f"kafka-monitor exited with {code} after SIGTERM; see {log.name}")
    return Rate("kafka-monitor", queued - first_count, end - first_at, end - start, cpu)


def count_queued(settings: Settings, count: int, domains: int, crawls: int) -> int:
    """Members across every crawl queue the benchmark's *count* requests can land in."""
    keys = keys_from_settings(settings)
    client = redis.Redis.from_url(settings["REDIS_URL"])
    try:
        pipe = client.pipeline(transaction=False)
        for crawl, domain in sorted({(i % crawls, i % domains) for i in range(count)}):
            pipe.zcard(keys.crawl_queue("link", "benchapp", f"crawl{crawl}", f"site{domain}.com"))
        return sum(pipe.execute())
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=30000, help="crawl requests to send (default 30000)")
    parser.add_argument("--domains", type=int, default=200, help="distinct domains (default 200)")
    parser.add_argument("--crawls", type=int, default=10, help="distinct crawl ids (default 10)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="crawlhive-bench-") as workdir, EmbeddedCluster() as cluster:
        settings = Settings.from_overrides(
            REDIS_URL=cluster.redis_url,
            KAFKA_BOOTSTRAP_SERVERS=cluster.bootstrap,
            KAFKA_TOPIC_PREFIX=PREFIX,
            REDIS_KEY_PREFIX=PREFIX,
            LOG_LEVEL="WARNING",
        )
        ensure_topics(settings, [settings.topic("incoming"), settings.topic("dead_letter")])
        messages = requests(args.messages, args.domains, args.crawls)
        produced_s, produced_cpu = produce(settings, messages)
        print(
            f"produced {len(messages):,} crawl requests in {produced_s:.2f}s ({len(messages) / produced_s:,.0f}/s;"
            f" {produced_cpu / len(messages) * 1e6:,.1f} CPU us/record)"
        )
        baseline = consume_only(settings, len(messages))
        monitor = through_monitor(settings, len(messages), workdir)
        queued = count_queued(settings, len(messages), args.domains, args.crawls)
    print(baseline.line())
    print(monitor.line())
    print(f"ratio          {monitor.per_s / baseline.per_s:>9.2f} (kafka-monitor / consume-only)")
    print(f"queued in Redis: {queued:,} of {len(messages):,}")
    if queued != len(messages):
        print("ERROR: not every request was queued exactly once", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
