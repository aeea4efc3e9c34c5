"""Sink benchmark: records/s of the PostgreSQL sink and MB/s of the files sink (docs/contract.md §20).

The same N cleaned records (about 2.5 KB of JSON each: a page's text, title, metadata) are produced
to a topic of an embedded broker first; then, in this process, measured in the same run:

* **bare COPY loop**: psycopg 3 ``COPY`` of the same records (parsed from the same JSON bytes) into
  a table of the same columns and key, one transaction per SINK_MAX_POLL_RECORDS (500): what a
  hand-written loader without Kafka, upserts or dead letters would do;
* **PostgreSQL sink**: a real :class:`~crawlhive.sink.worker.Sink` to ``postgresql://…`` reading the
  topic (Kafka poll on librdkafka and decoding, one ``INSERT … SELECT FROM unnest(…) ON CONFLICT`` transaction
  per batch, two batches at once on two writer threads while the next is polled, offset commit), timed from its
  first batch to its last;
* **a consumer alone**: the sink's consumer (librdkafka, the same adapter and batches) reading
  the topic in a group of its own and doing nothing else: how fast the broker hands one consumer
  its records, the bound on any sink here (printed beside the ratio);
* **files sink**: the same to ``file://…?format=jsonl`` (gzip, 16 MiB files), in MB/s of records as
  received.

Target: the PostgreSQL sink >= 0.8 x the bare loop and >= 5,000 records/s. Needs the PostgreSQL of BENCH_POSTGRES_URL
(default ``postgresql://postgres@127.0.0.1:5432/test``). Wall-clock figures: on a busy machine
compare the ratio, not the absolute numbers.

The sink and the bare loop run as ``--pairs`` interleaved pairs (3), each pair's sink in a group of
its own reading the whole topic again; the figure is the median of the pairs' ratios.

Run: ``.venv/bin/python bench/sink.py [--records N] [--pairs 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from benchkit import bench_settings

from crawlhive.app.embedded import EmbeddedCluster
from crawlhive.sink.postgres import CREATE_TABLE, page_row
from crawlhive.sink.worker import Sink
from crawlhive.utils.backends.kafka_clients import make_consumer, make_producer
from crawlhive.utils.config.settings import Settings

POSTGRES_URL = os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
BATCH = 500
WORDS = "river valley snow salmon season harvest village market bridge harbour winter station".split()


def records(n: int) -> list[bytes]:
    """*n* cleaned records as JSON bytes, each of another page."""
    out = []
    for i in range(n):
        text = " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(300))
        out.append(
            json.dumps(
                {
                    "appid": "bench",
                    "crawlid": "b1",
                    "url": f"http://site-{i % 50}.example/page/{i}.html",
                    "response_url": f"http://site-{i % 50}.example/page/{i}.html",
                    "status_code": 200,
                    "crawled_at": "2026-11-25T12:00:00.000000",
                    "cleaned_at": "2026-11-25T12:00:01.000000",
                    "title": f"Page {i} of the bench site",
                    "description": "A page of the sink benchmark.",
                    "text": text,
                    "language": "en",
                    "published": "2024-03-05",
                    "content_hash": f"{i:064x}",
                    "pii_masked": 0,
                    "attrs": None,
                }
            ).encode()
        )
    return out


CPU: dict[str, float] = {}
#: CPU seconds of the PostgreSQL server process (backend) of each run, when it runs on this machine.
SERVER_CPU: dict[str, float] = {}


def backend_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process *pid* so far, or NaN if it is not on this machine."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bare_copy(values: list[bytes], table: str) -> float:
    """Records/s of a plain psycopg COPY loop of *values* into *table* (same columns and key); its
    CPU seconds in this process go to ``CPU["bare"]``."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(CREATE_TABLE.replace("{table}", table))
        columns = "appid, crawlid, url, fetched_at, status_code, content_hash, title, text, language, published, record"
        pid = conn.info.backend_pid
        started, cpu, server = time.perf_counter(), time.process_time(), backend_cpu(pid)
        for start in range(0, len(values), BATCH):
            with conn.transaction(), conn.cursor() as cur, cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for raw in values[start : start + BATCH]:
                    copy.write_row(page_row(json.loads(raw), raw))
        CPU["bare"] = time.process_time() - cpu
        SERVER_CPU["bare"] = backend_cpu(pid) - server
        return len(values) / (time.perf_counter() - started)


def bare_consume(settings: Settings, total: int, group: str) -> float:
    """Records/s of a consumer alone (the sink's: librdkafka through the same adapter, batches of
    BATCH) reading the topic's *total* records in a new *group*, first batch to last, and doing
    nothing with them: how fast this broker hands one consumer the records, a bound on any sink."""
    consumer = make_consumer(settings, settings.topic("cleaned"), group_id=group, max_poll_records=BATCH)
    try:
        seen = 0
        while seen == 0:
            seen = sum(len(batch) for batch in consumer.poll(timeout_ms=100).values())
        first, started = seen, time.perf_counter()
        while seen < total:
            seen += sum(len(batch) for batch in consumer.poll(timeout_ms=100).values())
        return (seen - first) / (time.perf_counter() - started)
    finally:
        consumer.close()


def run_sink(settings: Settings, total: int, total_bytes: int, name: str) -> tuple[float, float]:
    """(records/s, MB/s) of a Sink over *total* records already in its topic, first batch to last."""
    sink = Sink.from_settings(settings)
    try:
        if not sink.start():
            raise SystemExit("the sink did not start")
        while sink.totals.records == 0:
            sink.run_once()
        first = sink.totals.records
        pids = getattr(sink.store, "backend_pids", list)  # its connections' server processes
        server = {pid: backend_cpu(pid) for pid in pids()}
        started, cpu = time.perf_counter(), time.process_time()
        while sink.totals.records < total:
            sink.run_once()
        elapsed = time.perf_counter() - started
        CPU[name] = (time.process_time() - cpu) * total / (total - first)
        ended = {pid: backend_cpu(pid) for pid in pids()}  # (a writer's connection may open after the start)
        if ended:
            spent = sum(seconds - server.get(pid, 0.0) for pid, seconds in ended.items())
            SERVER_CPU[name] = spent * total / (total - first)
        if sink.totals.dead_letters:
            raise SystemExit(f"{sink.totals.dead_letters} dead letters")
    finally:
        sink.teardown()
    done = total - first
    return done / elapsed, total_bytes * done / total / elapsed / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--pairs", type=int, default=3, help="interleaved pairs of the bare loop and the sink")
    args = parser.parse_args()
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=5).close()
    except psycopg.Error as exc:
        print(f"bench/sink.py needs PostgreSQL at {POSTGRES_URL} (BENCH_POSTGRES_URL): {exc}", file=sys.stderr)
        return 2
    values = records(args.records)
    size = sum(len(v) for v in values)
    print(f"{len(values)} cleaned records, {size / len(values) / 1024:.1f} KB each")
    token = secrets.token_hex(4)
    tables: list[str] = []
    ratios, rates, consumed = [], [], []
    try:
        with tempfile.TemporaryDirectory(prefix="crawlhive-bench-") as tmp, EmbeddedCluster() as cluster:
            settings = bench_settings(cluster, Path(tmp), f"benchsink{token}", ("cleaned", "dead_letter"))
            producer = make_producer(settings)
            for value in values:
                producer.send(settings.topic("cleaned"), value)
            producer.flush(timeout=120)
            producer.close(timeout=5)
            common: dict[str, Any] = {"SINK_MAX_POLL_RECORDS": BATCH, "LOG_LEVEL": "WARNING"}
            for pair in range(args.pairs):
                tables += [f"bench_bare_{token}_{pair}", f"bench_sink_{token}_{pair}"]
                bare = bare_copy(values, tables[-2])
                # each pair's sink reads the whole topic again, in a group of its own
                pg = settings.copy_with(
                    SINK_URL=f"{POSTGRES_URL}?table={tables[-1]}", SINK_GROUP=f"bench-{token}-{pair}", **common
                )
                rate, _ = run_sink(pg, len(values), size, "postgresql")
                ratios.append(rate / bare)
                rates.append(rate)
                consumed.append(bare_consume(settings, len(values), f"bench-{token}-{pair}-consume"))
                print(
                    f"pair {pair + 1}: bare psycopg COPY loop {bare:8.0f} records/s, PostgreSQL sink {rate:8.0f}"
                    f" records/s: ratio {rate / bare:.2f}; the broker to a consumer alone {consumed[-1]:8.0f}"
                    " records/s"
                )
            out = Path(tmp) / "files"
            files = settings.copy_with(
                SINK_URL=f"file://{out}/?format=jsonl", SINK_ROLL_BYTES=16 * 1024 * 1024, **common
            )
            file_rate, mbps = run_sink(files, len(values), size, "files")
            print(f"files sink (gzip JSON Lines)    : {file_rate:8.0f} records/s, {mbps:6.1f} MB/s")
        ratio, rate = statistics.median(ratios), statistics.median(rates)
        listed = ", ".join(f"{r:.2f}" for r in sorted(ratios))
        print(
            f"ratio PostgreSQL sink / bare COPY loop: median {ratio:.2f} of {len(ratios)} interleaved pairs ({listed};"
            f" target >= 0.8: {'met' if ratio >= 0.8 else 'NOT met'})"
        )
        print(f"PostgreSQL sink: {rate:.0f} records/s (target >= 5,000), load average {os.getloadavg()[0]:.1f}")
        bound = statistics.median(consumed)
        print(
            f"the broker hands a consumer that does nothing else {bound:.0f} records/s, median: any sink here reads"
            f" at most that; PostgreSQL sink / that bound {rate / bound:.2f}"
        )
        per = {name: seconds * 1e6 / len(values) for name, seconds in CPU.items()}
        print("CPU of this process per record (last pair): " + ", ".join(f"{n} {us:.0f} us" for n, us in per.items()))
        server = {name: seconds * 1e6 / len(values) for name, seconds in SERVER_CPU.items()}
        print(
            "CPU of the PostgreSQL backend per record (last pair): "
            + ", ".join(f"{n} {us:.0f} us" for n, us in server.items())
        )
        if "bare" in CPU and "postgresql" in SERVER_CPU:
            both = (CPU["bare"] + SERVER_CPU["bare"]) / (CPU["postgresql"] + SERVER_CPU["postgresql"])
            print(f"CPU ratio (client + backend) bare loop / PostgreSQL sink: {both:.2f} (the load-free ratio)")
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            for table in tables:
                conn.execute(f"DROP TABLE IF EXISTS {table}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
