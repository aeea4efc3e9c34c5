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
import contextlib
import gzip
import http.server
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import timeit
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis
from benchkit import bench_settings, tree_cpu

from crawlhive.app.embedded import EmbeddedCluster
from crawlhive.utils.backends import tracing
from crawlhive.utils.backends.kafka_clients import make_producer
from crawlhive.utils.backends.keys import Keys

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.otlp import OtlpReceiver  # noqa: E402 - the tests' OTLP/HTTP receiver

KINDS = ("kafka-monitor", "crawler", "cleaner", "sink")
TEXT = (
    "The river valley holds three old mills, a bridge of grey stone and a market that opens every "
    "Saturday morning; farmers bring apples, cheese and bread to the square. "
) * 12


class Site:
    """The bench's pages, ``/p/<i>`` for i below *pages*, each an article of about 2 KB, served
    on 127.0.0.1 by threads of this process."""

    def __init__(self, pages: int) -> None:
        bodies = {
            f"/p/{i}": (
                f"<html><head><title>Page {i}</title></head><body><article><h1>Page {i}</h1>"
                f"<p>{i}: {TEXT}</p></article></body></html>"
            ).encode()
            for i in range(pages)
        }

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                body = bodies.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def stored(folder: Path) -> int:
    """Records in the files sink's complete files under *folder*."""
    total = 0
    for path in folder.rglob("*.jsonl.gz"):
        try:
            total += gzip.decompress(path.read_bytes()).count(b"\n")
        except (OSError, EOFError):
            continue  # being written
    return total


def run(
    cluster: EmbeddedCluster, work: Path, site: Site, pages: int, mode: str, otel: dict[str, str]
) -> dict[str, float]:
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
            producer.send(
                settings.topic("incoming"), json.dumps(request).encode(), headers=[("traceparent", parent.encode())]
            )
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


def spans_per_page_us(pages: int, endpoint: str, sampler: str) -> float:
    """CPU µs (this process, the exporter's thread included) of one page's spans on every process
    kind, made by crawlhive's own code in one process, to the receiver at *endpoint* (another
    process: its decoding is not counted) with *sampler*: the kafka-monitor's, the crawler's six,
    the cleaner's and the sink's, with the headers and the frontier ``trace`` between them."""
    from crawlhive.crawler.trace import PageTrace
    from crawlhive.utils.frontier.model import FrontierRequest

    # a queue that holds the whole run (this loop makes spans faster than any crawler does)
    os.environ.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_TRACES_SAMPLER=sampler, OTEL_BSP_MAX_QUEUE_SIZE=str(20 * pages)
    )
    os.environ["OTEL_TRACES_SAMPLER_ARG"] = "0"
    tracing.configure("bench")
    try:
        tracer = tracing.tracer()
        flag = "00" if "ratio" in sampler else "01"
        started = time.process_time()
        for i in range(pages):
            parent = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-{flag}".encode()
            accept = tracer.start_span(
                "crawlhive.kafka_monitor.accept",
                context=tracing.context_of_headers([("traceparent", parent)]),
                kind=tracing.SpanKind.CONSUMER,
                attributes={"messaging.system": "kafka", "messaging.destination.name": "incoming"},
            )
            trace = tracing.frontier_trace(accept)
            accept.end()
            url = f"http://example.com/p/{i}"
            page = PageTrace.start(
                FrontierRequest(url=url, appid="bench", crawlid="c", domain="example.com", trace=trace), time.time_ns()
            )
            assert page is not None
            page.fetch_started(url)
            page.fetch_ended(status=200)
            page.parsed(1)
            emit, headers = page.emit("crawled_firehose")
            emit.end()
            page.end("crawled")
            clean = tracer.start_span("crawlhive.cleaner.clean", context=tracing.context_of_headers(headers))
            cleaned = tracing.headers_of(clean)
            clean.end()
            tracer.start_span("crawlhive.sink.write", context=tracing.context_of_headers(cleaned)).end()
        tracing.shutdown()  # exports what is left: its CPU counts
        return (time.process_time() - started) / pages * 1e6
    finally:
        tracing.shutdown()
        for name in (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_TRACES_SAMPLER",
            "OTEL_TRACES_SAMPLER_ARG",
            "OTEL_BSP_MAX_QUEUE_SIZE",
        ):
            os.environ.pop(name, None)


RECEIVER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from support.otlp import OtlpReceiver
with OtlpReceiver() as receiver:
    print(receiver.endpoint, flush=True)
    for line in sys.stdin:
        time.sleep(1.0)  # the last export has arrived
        print(len(receiver.snapshot()), flush=True)
"""


@contextlib.contextmanager
def receiver_process() -> Iterator[tuple[str, Callable[[], int]]]:
    """An OTLP/HTTP receiver in a process of its own: its endpoint, and how many spans it has."""
    tests = str(Path(__file__).resolve().parents[1] / "tests")
    proc = subprocess.Popen(
        [sys.executable, "-c", RECEIVER, tests], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    endpoint = proc.stdout.readline().strip()

    def count() -> int:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("count\n")
        proc.stdin.flush()
        return int(proc.stdout.readline())

    try:
        yield endpoint, count
    finally:
        proc.stdin.close()
        proc.wait(30)


def off_checks_ns() -> float:
    """Nanoseconds of the checks tracing-off adds to a page's way (one per traced place: intake,
    lease, finish, emit, clean, sink; the crawler's fetch middleware is not even installed)."""
    context: Any = type("Context", (), {"trace": None})()
    request: Any = type("Request", (), {"trace": None})()

    def page() -> None:  # the checks of the kafka-monitor, the crawler (lease, finish, emit), cleaner, sink
        if tracing.ON:
            pass
        if request.trace is not None:
            pass
        if context.trace is not None:
            pass
        if context.trace is not None:
            pass
        if tracing.ON:
            pass
        if tracing.ON:
            pass

    def bare() -> None:  # the baseline: the same call without the checks
        pass

    n = 500_000
    with_checks = min(timeit.repeat(page, number=n, repeat=7)) / n
    without = min(timeit.repeat(bare, number=n, repeat=7)) / n
    return max(0.0, with_checks - without) * 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--spans-only", action="store_true", help="only the in-process figure (no pipeline)")
    args = parser.parse_args()
    site = Site(args.pages)
    results: dict[str, list[dict[str, float]]] = {}
    try:
        with (
            tempfile.TemporaryDirectory(prefix="crawlhive-bench-") as tmp,
            EmbeddedCluster() as cluster,
            OtlpReceiver() as receiver,
        ):
            modes = {
                "off": {},
                "on": {
                    "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                    "OTEL_TRACES_SAMPLER": "parentbased_always_on",
                },
                "on, ratio 0": {
                    "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                    "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                    "OTEL_TRACES_SAMPLER_ARG": "0",
                },
            }
            for sampler in ("parentbased_always_on", "parentbased_traceidratio"):
                with receiver_process() as (endpoint, count):
                    cost = spans_per_page_us(2000, endpoint, sampler)
                    sent = count() / 2000
                print(f"in one process, {sampler}: a page's 9 spans cost {cost:.0f} CPU µs ({sent:.1f} exported)")
            for round_ in range(0 if args.spans_only else args.rounds):
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

    print(f"off: the checks on a page's way take {off_checks_ns():.0f} ns a page (nothing else runs)")
    if args.spans_only:
        return 0
    off = sum(median("off", k) for k in KINDS)
    for mode in ("on", "on, ratio 0"):
        total = sum(median(mode, k) for k in KINDS)
        kinds = ", ".join(f"{k} +{median(mode, k) - median('off', k):.2f}" for k in KINDS)
        print(f"{mode}: {total:.2f} CPU ms a page against off's {off:.2f}: ratio {total / off:.2f} ({kinds} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
