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

Then, on **real pages** (the extraction corpus of ``tests/data/extraction/``, or ``--corpus DIR``
in the layout of a public article-extraction benchmark), in CPU time (the machine is shared, so
wall time is noise), as interleaved pairs in the same run:

* **bare trafilatura**: ``trafilatura.extract(html, url=url)`` with its defaults, in this process;
* **cleaner steps**: extraction (its child process), language, dates, PII, the content hash, CPU of
  this process and of the extraction child together;
* **crawlhive cleaner**: one ``crawlhive cleaner`` process (started once, already consuming)
  cleaning the pages as crawled items through Kafka and Redis, CPU of the process and its
  extraction child (JSON, Kafka, dedupe included), per record; in every pair, each pair's records
  a crawl of their own (none a duplicate of an earlier pair's), so its figure is a median too.

Printed: records per CPU-second of each and the ratios to bare trafilatura (target >= 1.2: the
cleaner costs less than the extraction it wraps), with the token F1 of both on the corpus (the
cleaner's at most 0.01 below).

From start (issue 50): a ``crawlhive cleaner`` process against a bare trafilatura process over the
same real pages, wall time from each one's start (target >= 1.5), and the cleaner's first cleaned
record (target <= 1.5 s). Beside the latter: a bare consumer of a new group's first record on the
same broker, which holds a new group's first join (the embedded broker for half
KAFKA_SESSION_TIMEOUT_MS, which both get as ``crawlhive up`` gives its cleaners:
UP_CLEANER_SESSION_TIMEOUT_MS), and the difference, the cleaner's own share.

Run: ``python3 bench/site.py`` once, then ``.venv/bin/python bench/clean.py [--pages N] [--pairs 3]
[--corpus DIR]`` (``--real-only`` skips the bench-site part).
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
from benchkit import bench_settings, tree_cpu

from crawlhive.app.embedded import EmbeddedCluster
from crawlhive.app.up import UP_CLEANER_SESSION_TIMEOUT_MS
from crawlhive.cleaner.cleaner import Cleaner
from crawlhive.cleaner.page import Page
from crawlhive.cleaner.plugins.dates import DatePlugin
from crawlhive.cleaner.plugins.extract import ExtractPlugin
from crawlhive.cleaner.plugins.language import LanguagePlugin
from crawlhive.cleaner.plugins.pii import PiiPlugin
from crawlhive.cleaner.plugins.validate import ValidatePlugin
from crawlhive.utils.backends.kafka_clients import make_consumer, make_producer
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.config.settings import Settings

SITE = Path("/tmp/perfsite/www")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support import corpus as corpuskit  # noqa: E402 - the corpus and its F1 live beside the extraction-quality test


def corpus_items(samples: list[corpuskit.Sample], crawlid: str) -> list[dict[str, Any]]:
    """The corpus pages as crawled items."""
    return [
        {
            "appid": "bench", "crawlid": crawlid, "url": s.url, "response_url": s.url, "status_code": 200,
            "status_msg": "OK", "response_headers": {"Content-Type": ["text/html; charset=utf-8"]},
            "request_headers": {}, "body": s.html, "encoding": "utf-8", "links": [], "attrs": None,
            "timestamp": "2026-11-25T12:00:00.000000",
        }
        for s in samples
    ]  # fmt: skip


def bare_trafilatura(samples: list[corpuskit.Sample]) -> tuple[float, list[str | None]]:
    """CPU seconds of a bare ``trafilatura.extract`` loop over *samples*, and its texts."""
    import trafilatura

    started = time.process_time()
    texts = [trafilatura.extract(s.html, url=s.url) for s in samples]
    return time.process_time() - started, texts


def cleaner_steps(extract: ExtractPlugin, steps: list[Any], items: list[dict[str, Any]]) -> tuple[float, list[str]]:
    """CPU seconds (this process and the extraction child) of the cleaner's steps over *items*."""
    child = extract.extractor._process
    assert child is not None
    started = time.process_time() + tree_cpu(child.pid)
    texts = []
    for i, item in enumerate(items):
        page = Page.from_item(item, f"bare/{i}")
        for step in [extract, *steps]:
            step.process(page)
        page.record["content_hash"] = hashlib.sha256((page.record.get("text") or "").encode()).hexdigest()
        texts.append(page.record.get("text") or "")
    return time.process_time() + tree_cpu(child.pid) - started, texts


def up_cleaner_env(cluster: EmbeddedCluster, work: Path, prefix: str) -> dict[str, str]:
    """The environment of a ``crawlhive cleaner`` on *cluster* under *prefix*, with the session
    timeout ``crawlhive up`` gives its cleaners."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS")}
    env.update(
        REDIS_URL=cluster.redis_url, KAFKA_BOOTSTRAP_SERVERS=cluster.bootstrap, REDIS_KEY_PREFIX=prefix,
        KAFKA_TOPIC_PREFIX=prefix, CRAWLHIVE_HOME=str(work), LOG_LEVEL="WARNING",
        KAFKA_SESSION_TIMEOUT_MS=str(UP_CLEANER_SESSION_TIMEOUT_MS),
    )  # fmt: skip
    return env


class CleanerProcess:
    """One ``crawlhive cleaner`` process on an embedded broker and Redis, already consuming:
    :meth:`cpu_s` is the CPU seconds it (and its extraction child) spends cleaning a batch of
    records through Kafka and Redis, from their first produced to the last cleaned read."""

    def __init__(self, cluster: EmbeddedCluster, work: Path, tag: str) -> None:
        prefix = f"benchreal{tag}"
        self.settings = bench_settings(cluster, work, prefix, ("crawled_firehose", "cleaned", "dead_letter"))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "crawlhive.app.cli", "cleaner"], env=up_cleaner_env(cluster, work, prefix)
        )
        self.consumer = make_consumer(self.settings, self.settings.topic("cleaned"), group_id=None)
        client = redis.Redis.from_url(cluster.redis_url)
        try:
            deadline = time.monotonic() + 60
            while client.zcard(Keys(prefix).heartbeat_index("cleaner")) < 1 and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            client.close()
        time.sleep(3.0)  # the group's partitions assigned

    def cpu_s(self, records: list[dict[str, Any]]) -> float:
        before = tree_cpu(self.proc.pid)
        producer = make_producer(self.settings)
        for item in records:
            producer.send(self.settings.topic("crawled_firehose"), json.dumps(item).encode())
        producer.flush(timeout=60)
        producer.close(timeout=5)
        seen, started = 0, time.monotonic()
        while seen < len(records) and time.monotonic() - started < 600:
            seen += sum(len(batch) for batch in self.consumer.poll(timeout_ms=200).values())
        if seen < len(records):
            raise SystemExit(f"only {seen} of {len(records)} records cleaned")
        return tree_cpu(self.proc.pid) - before

    def close(self) -> None:
        self.consumer.close()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)


def real_pages(corpus: Path, pairs: int) -> tuple[float, float]:
    """The real-pages part (see the module); returns (cleaner process CPU ms per record, bare ms
    per page), medians of the pairs."""
    samples = corpuskit.load(corpus)
    sizes = sorted(len(s.html) for s in samples)
    print(f"\nreal pages: {len(samples)} of {corpus}, median {sizes[len(sizes) // 2] // 1024} KB")
    items_ = corpus_items(samples, "real")
    extract = ExtractPlugin(max_seconds=60.0, max_text_bytes=262144)
    # A cleaner with masking on, never set up (so never connected): PiiPlugin.from_cleaner reads its settings.
    masking = Cleaner.from_settings(Settings.from_overrides(CLEANER_MASK_PII=True))
    steps = [LanguagePlugin(), DatePlugin(), PiiPlugin.from_cleaner(masking), ValidatePlugin(["text"])]
    # A crawled item over the producer's request size never reaches a cleaner (the crawler
    # dead-letters it): such pages are left out of the process's runs.
    fitting = [item for item in items_ if len(json.dumps(item)) < 900_000]
    ratios, bare_ms, process_ms = [], [], []
    with tempfile.TemporaryDirectory(prefix="crawlhive-bench-") as tmp, EmbeddedCluster() as cluster:
        process = CleanerProcess(cluster, Path(tmp), "1")
        try:
            for pair in range(pairs):
                bare_s, bare_texts = bare_trafilatura(samples)
                steps_s, texts = cleaner_steps(extract, steps, items_)
                # each pair's records a crawl of their own: none is a duplicate of an earlier pair's
                process_s = process.cpu_s([dict(item, crawlid=f"real{pair}") for item in fitting])
                ratios.append(bare_s / steps_s)
                bare_ms.append(1000 * bare_s / len(samples))
                process_ms.append(1000 * process_s / len(fitting))
                print(
                    f"pair {pair + 1}: bare trafilatura {len(samples) / bare_s:6.1f} pages/CPU-s, "
                    f"cleaner steps {len(samples) / steps_s:6.1f} records/CPU-s: ratio {bare_s / steps_s:.2f}; "
                    f"crawlhive cleaner process {process_ms[-1]:.1f} CPU ms per record",
                    flush=True,
                )
        finally:
            extract.close()
            process.close()
    f1, bare_f1 = corpuskit.mean_f1(list(texts), samples), corpuskit.mean_f1(bare_texts, samples)
    print(f"token F1: cleaner {f1:.4f}, bare trafilatura {bare_f1:.4f}")
    ratio = sorted(ratios)[len(ratios) // 2]
    listed = ", ".join(f"{r:.2f}" for r in sorted(ratios))
    print(
        f"cleaner steps / bare trafilatura, CPU per page: median ratio {ratio:.2f} of {len(ratios)} interleaved"
        f" pairs ({listed}; target >= {TARGET}: {'met' if ratio >= TARGET else 'NOT met'}); F1 at most 0.01 below:"
        f" {'met' if f1 >= bare_f1 - 0.01 else 'NOT met'}{' (higher)' if f1 > bare_f1 + 0.01 else ''}"
    )
    bare = sorted(bare_ms)[len(bare_ms) // 2]
    per_page = sorted(process_ms)[len(process_ms) // 2]
    print(
        f"crawlhive cleaner process: {per_page:.1f} CPU ms per record, median of {len(process_ms)} runs interleaved"
        f" with the pairs ({', '.join(f'{ms:.1f}' for ms in sorted(process_ms))}; Kafka, JSON, dedupe included),"
        f" bare trafilatura {bare:.1f}: ratio {bare / per_page:.2f} (target >= {TARGET}:"
        f" {'met' if bare / per_page >= TARGET else 'NOT met'})"
    )
    return per_page, bare


#: The cleaner against a bare default ``trafilatura.extract`` loop, CPU per page (issue 35).
TARGET = 1.2
#: From process start, wall time: the cleaner process against a bare trafilatura process (issue 50).
START_TARGET = 1.5
#: Seconds from the cleaner's start to its first cleaned record (issue 50).
FIRST_RECORD_TARGET_S = 1.5
#: A bare ``trafilatura.extract`` loop as a process of its own, over a JSON Lines file of pages.
BARE_PROCESS = (
    "import json, sys\n"
    "import trafilatura\n"
    "for line in open(sys.argv[1], encoding='utf-8'):\n"
    "    page = json.loads(line)\n"
    "    trafilatura.extract(page['html'], url=page['url'])\n"
)


def bare_process_s(pages: Path) -> float:
    """Wall seconds of a bare trafilatura process over *pages*, from its start to its exit."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", BARE_PROCESS, str(pages)], check=True)
    return time.monotonic() - started


def new_group_first_record_s(settings: Settings, topic: str) -> float:
    """Wall seconds a bare consumer of a new group (the cleaner's consumer settings) takes from its
    creation to its first record of *topic*: the broker's share of a cleaner's first record (the
    group join it holds: half KAFKA_SESSION_TIMEOUT_MS on Tansu, ``group.initial.rebalance.delay.ms``
    on Apache Kafka, which docker/docker-compose.yml sets to 0)."""
    started = time.monotonic()
    consumer = make_consumer(settings, topic, group_id=f"{settings.KAFKA_TOPIC_PREFIX}-join-probe")
    try:
        while not consumer.poll(timeout_ms=20):
            if time.monotonic() - started > 60:
                raise SystemExit(f"a new group got no record of {topic} in 60 s")
        return time.monotonic() - started
    finally:
        consumer.close()


def cleaner_from_start(
    cluster: EmbeddedCluster, work: Path, records: list[dict[str, Any]], tag: str
) -> tuple[float, float, float]:
    """Wall seconds from starting a ``crawlhive cleaner`` (its records already in the topic) to its
    first cleaned record, and to its last; and :func:`new_group_first_record_s` on its topic."""
    prefix = f"benchstart{tag}"
    settings = bench_settings(cluster, work, prefix, ("crawled_firehose", "cleaned", "dead_letter")).copy_with(
        KAFKA_SESSION_TIMEOUT_MS=UP_CLEANER_SESSION_TIMEOUT_MS  # as `crawlhive up` runs its cleaners
    )
    producer = make_producer(settings)
    for item in records:
        producer.send(settings.topic("crawled_firehose"), json.dumps(item).encode())
    producer.flush(timeout=60)
    producer.close(timeout=5)
    join = new_group_first_record_s(settings, settings.topic("crawled_firehose"))
    consumer = make_consumer(settings, settings.topic("cleaned"), group_id=None)
    consumer.poll(timeout_ms=500)  # assigned before the cleaner starts
    env = up_cleaner_env(cluster, work, prefix)
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "crawlhive.app.cli", "cleaner"], env=env)
    try:
        seen, first = 0, None
        while seen < len(records) and time.monotonic() - started < 600:
            got = sum(len(batch) for batch in consumer.poll(timeout_ms=20).values())
            if got and first is None:
                first = time.monotonic() - started
            seen += got
        if seen < len(records) or first is None:
            raise SystemExit(f"only {seen} of {len(records)} records cleaned")
        return first, time.monotonic() - started, join
    finally:
        consumer.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def from_start(samples: list[corpuskit.Sample], pairs: int, copies: int) -> None:
    """The cleaner process against a bare trafilatura process on the real pages, each from its
    start (imports, models, the group's join) to its last page, in wall time, as interleaved pairs;
    the pages *copies* times over (each copy a crawl of its own: nothing is a duplicate)."""
    records = [
        {**item, "appid": f"start{copy}"}
        for copy in range(copies)
        for item in corpus_items(samples, f"copy{copy}")
        if len(json.dumps(item)) < 900_000
    ]
    ratios, firsts, joins = [], [], []
    with tempfile.TemporaryDirectory(prefix="crawlhive-bench-") as tmp, EmbeddedCluster() as cluster:
        work = Path(tmp)
        pages = work / "pages.jsonl"
        with pages.open("w", encoding="utf-8") as out:
            for record in records:
                out.write(json.dumps({"url": record["url"], "html": record["body"]}) + "\n")
        for pair in range(pairs):
            bare_s = bare_process_s(pages)
            first, cleaner_s, join = cleaner_from_start(cluster, work, records, str(pair))
            ratios.append(bare_s / cleaner_s)
            firsts.append(first)
            joins.append(join)
            print(
                f"pair {pair + 1}: bare trafilatura process {len(records) / bare_s:6.1f} pages/s from start,"
                f" crawlhive cleaner {len(records) / cleaner_s:6.1f} records/s from start (first record after"
                f" {first:.2f} s; a bare consumer of a new group: {join:.2f} s): ratio {bare_s / cleaner_s:.2f}",
                flush=True,
            )
    ratio, first = sorted(ratios)[len(ratios) // 2], sorted(firsts)[len(firsts) // 2]
    join = sorted(joins)[len(joins) // 2]
    own = sorted(f - j for f, j in zip(firsts, joins, strict=True))[len(firsts) // 2]
    print(
        f"cleaner process / bare trafilatura process, {len(records)} real pages from start, wall time: median"
        f" ratio {ratio:.2f} of {pairs} interleaved pairs ({', '.join(f'{r:.2f}' for r in sorted(ratios))};"
        f" target >= {START_TARGET}: {'met' if ratio >= START_TARGET else 'NOT met'})"
    )
    print(
        f"first cleaned record after {first:.2f} s, median (target <= {FIRST_RECORD_TARGET_S}:"
        f" {'met' if first <= FIRST_RECORD_TARGET_S else 'NOT met'} on this broker); a bare consumer of a new group"
        f" gets its first record after {join:.2f} s here (the broker holds a new group's join: the embedded"
        f" broker half KAFKA_SESSION_TIMEOUT_MS, {UP_CLEANER_SESSION_TIMEOUT_MS} ms for the cleaners of"
        f" `crawlhive up` and here, Apache Kafka group.initial.rebalance.delay.ms, 0 in docker/);"
        f" the cleaner's own share {own:.2f} s, median (target <= {FIRST_RECORD_TARGET_S} where the broker does"
        f" not hold the join: {'met' if own <= FIRST_RECORD_TARGET_S else 'NOT met'})"
    )


#: Where the real-pages figures are left for ``bench/pipeline.py`` (same ``make bench`` run).
FIGURES = Path("/tmp/crawlhive-bench/clean.json")


def save_clean_figures(cleaner_ms: float, bare_ms: float) -> None:
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    FIGURES.write_text(json.dumps({"cleaner_cpu_ms_per_page": cleaner_ms, "bare_trafilatura_cpu_ms_per_page": bare_ms}))


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
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--corpus", type=Path, default=corpuskit.CORPUS)
    parser.add_argument("--real-only", action="store_true")
    parser.add_argument(
        "--start-only", action="store_true", help="only the from-start comparison (cleaner process vs bare process)"
    )
    parser.add_argument(
        "--copies",
        type=int,
        default=8,
        help="times the real pages are cleaned in the from-start part (8: 960 records, the scale of issue 50's"
        " black-box measurement, 905 records from start)",
    )
    args = parser.parse_args()
    if args.start_only:
        from_start(corpuskit.load(args.corpus), args.pairs, args.copies)
        return 0
    if args.real_only:
        save_clean_figures(*real_pages(args.corpus, args.pairs))
        from_start(corpuskit.load(args.corpus), args.pairs, args.copies)
        return 0
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
    save_clean_figures(*real_pages(args.corpus, args.pairs))
    from_start(corpuskit.load(args.corpus), args.pairs, args.copies)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
