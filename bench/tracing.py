"""Benchmark: what tracing (docs/contract.md §26.3) costs per page, off and on.

One pipeline of ``crawlhive`` processes (kafka-monitor, crawler, cleaner, a files sink) on an
embedded Redis and broker crawls *N* pages of a local site, each fed as its own crawl request with
a caller's ``traceparent`` header, three times in one run, in turn:

* **off**: no OTEL_* variable (the baseline: what every page costs without tracing);
* **on**: ``OTEL_EXPORTER_OTLP_ENDPOINT`` to an OTLP/HTTP receiver in this process (its decoding
  is this process's CPU, not the pipeline's), ``parentbased_always_on``: every span exported;
* **on, ratio 0**: the same with ``OTEL_TRACES_SAMPLER=traceidratio`` and ``_ARG=0`` on a caller
  whose trace is not sampled: every span built, none exported (but errors: crawlhive keeps them,
  so it records what a sampler drops).

For each, the CPU (user + system) of each process from the first record fed to the last page
stored, per page; then the ratio of each "on" total to "off" (CPU per page: higher = dearer).
The broker's, Redis's and the site's CPU are not counted. Off's figure is the cost without
tracing by construction: what off adds over a build without tracing is one check of a module
global per traced place (measured separately below, in nanoseconds per page).

Usage: ``.venv/bin/python bench/tracing.py [--pages N] [--rounds R]`` (default 300 pages, 1 round
of the three runs).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

import psutil
import redis
from benchkit import bench_settings

from crawlhive.app.embedded import EmbeddedCluster
from crawlhive.utils.backends import tracing
from crawlhive.utils.backends.kafka_clients import make_producer
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.config.settings import Settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.crawler import TestSite, html  # noqa: E402 - the tests' local site
from support.otlp import OtlpReceiver  # noqa: E402 - the tests' OTLP/HTTP receiver

KINDS = ("kafka-monitor", "crawler", "cleaner", "sink")
TEXT = (
    "The river valley holds three old mills, a bridge of grey stone and a market that opens every "
    "Saturday morning; farmers bring apples, cheese and bread to the square. "
) * 12


def tree_cpu(pid: int) -> float:
    """CPU seconds (user and system) of process *pid* and its live children."""
    proc = psutil.Process(pid)
    total = 0.0
    for each in [proc, *proc.children(recursive=True)]:
        try:
            times = each.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def stored(folder: Path) -> int:
    """Records in the files sink's complete files under *folder*."""
    total = 0
    for path in folder.rglob("*.jsonl.gz"):
        try:
            total += gzip.decompress(path.read_bytes()).count(b"\n")
        except (OSError, EOFError):
            continue  # being written
    return total


def run(cluster: EmbeddedCluster, work: Path, site: TestSite, pages: int, mode: str, otel: dict[str, str]) -> dict[str, float]:
    """CPU ms per page of each process kind for *pages* pages in *mode* (its *otel* variables)."""
    prefix = f"benchtr{mode.replace(' ', '').replace(',', '')}{secrets.token_hex(2)}"
    settings = bench_settings(cluster, work, prefix, ("incoming", "crawled_firehose", "cleaned", "dead_letter"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k not in ("REDIS_URL",)}
    env.update(
        REDIS_URL=cluster.redis_url, KAFKA_BOOTSTRAP_SERVERS=cluster.bootstrap, REDIS_KEY_PREFIX=prefix,
        KAFKA_TOPIC_PREFIX=prefix, CRAWLHIVE_HOME=str(work), LOG_LEVEL="WARNING", QUEUE_HITS="1000000000",
        QUEUE_WINDOW="1", QUEUE_MODERATED="false", ROBOTSTXT_OBEY="false",
        CRAWLER_ALLOWED_NETWORKS='["127.0.0.0/8"]', SINK_ROLL_SECONDS="1", **otel,
    )  # fmt: skip
    out = work / f"files-{prefix}"
    argv = {"sink": ["sink", "--to", f"file://{out}/?format=jsonl"]}
    procs = {
        kind: subprocess.Popen(
            [sys.executable, "-m", "crawlhive.app.cli", *argv.get(kind, [kind])],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(work / f"{prefix}-{kind}.log").open("w"),
        )
        for kind in KINDS
    }
    client = redis.Redis.from_url(cluster.redis_url)
    try:
        keys = Keys(prefix)
        deadline = time.monotonic() + 120
        while not all(client.zcard(keys.heartbeat_index(k)) for k in KINDS):
            if time.monotonic() > deadline:
                raise SystemExit(f"{mode}: the processes did not start; see {work}/{prefix}-*.log")
            time.sleep(0.2)
        time.sleep(3.0)  # consumer groups joined
        sampled = "00" if "ratio" in mode else "01"
        before = {kind: tree_cpu(p.pid) for kind, p in procs.items()}
        producer = make_producer(settings)
        for i in range(pages):
            request = {"url": site.url(f"/p/{i}"), "appid": "bench", "crawlid": f"t{i % 10}", "maxdepth": 0}
            parent = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-{sampled}"
            producer.send(settings.topic("incoming"), json.dumps(request).encode(), headers=[("traceparent", parent.encode())])
        producer.flush(timeout=60)
        producer.close(timeout=5)
        started = time.monotonic()
        while stored(out) < pages:
            if time.monotonic() - started > 600:
                raise SystemExit(f"{mode}: only {stored(out)} of {pages} pages stored; see {work}/{prefix}-*.log")
            time.sleep(0.2)
        took = time.monotonic() - started
        return {kind: 1000 * (tree_cpu(p.pid) - before[kind]) / pages for kind, p in procs.items()} | {"wall": took}
    finally:
        client.close()
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def off_checks_ns() -> float:
    """Nanoseconds of the checks tracing-off adds to a page's way (one per traced place: intake,
    lease, finish, emit, clean, sink; the crawler's fetch middleware is not even installed)."""
    context: Any = type("Context", (), {"trace": None})()
    request: Any = type("Request", (), {"trace": None})()

    def page() -> None:
        for _ in range(2):
            if tracing.ON:
                pass
        for _ in range(4):
            if context.trace is not None or request.trace is not None:
                pass

    n = 200_000
    return min(timeit.repeat(page, number=n, repeat=5)) / n * 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    site = TestSite()
    site.start()
    for i in range(args.pages):
        site.page(f"/p/{i}", html(title=f"Page {i}", extra=f"<article><h1>Page {i}</h1><p>{i}: {TEXT}</p></article>"))
    results: dict[str, list[dict[str, float]]] = {}
    try:
        with (
            tempfile.TemporaryDirectory(prefix="crawlhive-bench-") as tmp,
            EmbeddedCluster() as cluster,
            OtlpReceiver() as receiver,
        ):
            modes = {
                "off": {},
                "on": {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_TRACES_SAMPLER": "parentbased_always_on"},
                "on, ratio 0": {
                    "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                    "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                    "OTEL_TRACES_SAMPLER_ARG": "0",
                },
            }
            for round_ in range(args.rounds):
                for mode, otel in modes.items():
                    before = len(receiver.snapshot())
                    figures = run(cluster, Path(tmp), site, args.pages, mode, otel)
                    results.setdefault(mode, []).append(figures)
                    spans = len(receiver.snapshot()) - before
                    per = ", ".join(f"{k} {figures[k]:.2f}" for k in KINDS)
                    print(
                        f"round {round_ + 1} {mode:12s}: {sum(figures[k] for k in KINDS):6.2f} CPU ms a page ({per});"
                        f" {figures['wall']:.1f} s; {spans / args.pages:.1f} spans a page received"
                    )
    finally:
        site.stop()

    def median(mode: str, kind: str) -> float:
        values = sorted(r[kind] for r in results[mode])
        return values[len(values) // 2]

    off = sum(median("off", k) for k in KINDS)
    for mode in ("on", "on, ratio 0"):
        total = sum(median(mode, k) for k in KINDS)
        kinds = ", ".join(f"{k} +{median(mode, k) - median('off', k):.2f}" for k in KINDS)
        print(f"{mode}: {total:.2f} CPU ms a page against off's {off:.2f}: ratio {total / off:.2f} ({kinds} ms)")
    print(f"off: the checks on a page's way take {off_checks_ns():.0f} ns a page (nothing else runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
