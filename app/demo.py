"""``crawlhive demo``: the whole cluster on a bundled site, one crawl, a progress bar, a summary.

It runs what a user would: a :class:`~crawlhive.app.up.LocalCluster` (private Redis and
broker unless configured, kafka-monitor, redis-monitor, two link crawlers, REST), feeds a crawl of
the demo site (:mod:`crawlhive.app.demo_site`) through Kafka, follows it through Redis and the
output topics until the ``complete`` event, asks ``info`` through Kafka, prints a summary and stops
everything. Throttling stays on, at a demo-friendly 50 fetches per second per domain.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from collections import Counter
from typing import Any

from crawlhive.app.demo_site import DemoSite, expected_pages
from crawlhive.app.up import LocalCluster, backend_lines, loopback_note, wait_ready
from crawlhive.rest.server import rest_url
from crawlhive.utils.backends.kafka_clients import make_consumer, make_producer
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings, redis_from_settings
from crawlhive.utils.config.errors import CrawlhiveError
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.kafka_errors import TopicPartition
from crawlhive.utils.frontier import FrontierReader

#: Seconds the demo waits for the components, then for the crawl, before giving up.
READY_TIMEOUT_S = 60.0
CRAWL_TIMEOUT_S = 100.0
CRAWLERS = 2


class DemoFailed(CrawlhiveError):
    """The demo did not finish; the message says which step."""


def _demo_settings(settings: Settings) -> Settings:
    overrides: dict[str, Any] = {}
    if not settings.is_set("QUEUE_HITS") and not settings.is_set("QUEUE_WINDOW"):
        overrides.update(QUEUE_HITS=50, QUEUE_WINDOW=1.0)
    return settings.copy_with(**overrides) if overrides else settings


def _bar(done: int, total: int, width: int = 30) -> str:
    filled = min(width, int(width * done / total)) if total else 0
    return "[" + "#" * filled + "." * (width - filled) + "]"


def run_demo(settings: Settings, keep_running: bool = False) -> int:
    """Run the demo; returns 0 when the crawl completed (raises :class:`DemoFailed` otherwise)."""
    settings = _demo_settings(settings)
    out = sys.stdout
    with DemoSite() as site:
        print(f"demo site: {', '.join(site.bases)} ({expected_pages()} pages incl. 404s)", file=out, flush=True)
        logs = settings.home / "demo-logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_file = logs / "components.log"
        print(f"component logs: {log_file}", flush=True)
        with LocalCluster(
            settings, {"crawlers": CRAWLERS}, extra_env={"LOG_FILE": str(log_file)}, command="demo"
        ) as cluster:
            live = cluster.settings
            dashboard = f"{rest_url(live.REST_HOST, live.REST_PORT)}/dashboard"
            for line in backend_lines(live, cluster.embedded):
                print(f"cluster: {line}", flush=True)
            if cluster.allows_loopback:
                print(f"cluster: {loopback_note()}", flush=True)
            redis = redis_from_settings(live)
            keys = keys_from_settings(live)
            try:
                _wait_ready(cluster)
                summary = _crawl(cluster, live, redis, keys, site.seed)
            finally:
                redis.close()
            summary["dashboard"], summary["keep_running"] = dashboard, keep_running
            _print_summary(summary)
            if keep_running:
                print(f"--keep-running: dashboard at {dashboard}; Ctrl-C stops everything.", flush=True)
                while True:
                    cluster.supervise_once()
                    time.sleep(0.5)
    return 0


def _wait_ready(cluster: LocalCluster) -> None:
    """Wait until every component has sent a heartbeat, showing progress on a terminal."""

    def show(line: str, ready: bool) -> None:
        if ready:
            print(f"\r{line}   ", flush=True)
        elif sys.stdout.isatty():
            print(f"\r{line}   ", end="", flush=True)

    have = wait_ready(cluster, READY_TIMEOUT_S, show)
    if any(n_live < n for n_live, n in have.values()):
        raise DemoFailed(f"components not up after {READY_TIMEOUT_S:.0f}s: {have}")


def _crawl(cluster: LocalCluster, live: Settings, redis: Any, keys: Keys, seed: str) -> dict[str, Any]:
    crawlid = f"demo-{secrets.token_hex(3)}"
    request = {"url": seed, "appid": "demo", "crawlid": crawlid, "maxdepth": 3, "priority": 50}
    consumer = make_consumer(live, group_id=None)
    producer = make_producer(live)
    topics = [live.topic("outbound_firehose"), live.topic("crawled_firehose"), live.topic("cleaned")]
    try:
        partitions = [TopicPartition(t, p) for t in topics for p in sorted(consumer.partitions_for_topic(t) or [])]
        consumer.assign(partitions)
        consumer.seek_to_end()
        for tp in partitions:
            consumer.position(tp)  # resolve "end" now, before anything is produced
        producer.send(live.topic("incoming"), json.dumps(request).encode()).get(timeout=10)
        print(f"fed crawl {crawlid} of {seed} (maxdepth 3) to {live.topic('incoming')}", flush=True)
        reader = FrontierReader(redis, keys, live.CRAWL_RECORD_TTL)
        codes: Counter[int] = Counter()
        sample: dict[str, Any] | None = None
        cleaned: list[dict[str, Any]] = []  # records of the cleaning stage (§13)
        complete: dict[str, Any] | None = None
        started = time.monotonic()
        total = expected_pages()
        interactive = sys.stdout.isatty()
        next_line = 0.0
        while complete is None:
            for records in consumer.poll(timeout_ms=300).values():
                for record in records:
                    message = json.loads(record.value)
                    if message.get("crawlid") != crawlid:
                        continue
                    if record.topic.endswith("crawled_firehose"):
                        codes[message["status_code"]] += 1
                        if sample is None and message["status_code"] == 200:
                            sample = message
                    elif record.topic.endswith(".cleaned"):
                        cleaned.append(message)
                    elif message.get("action") == "complete":
                        complete = message
            state = reader.crawl_state("link", "demo", crawlid)
            items = sum(codes.values())
            line = (
                f"{_bar(items, total)} crawled {items}/{total}  queued {state.pending}  "
                f"in flight {state.inflight}  failed {state.failed}   "
            )
            if interactive:
                print(f"\r{line}", end="", flush=True)
            elif time.monotonic() >= next_line or complete is not None:
                print(line, flush=True)  # not a terminal: one line every 2 s
                next_line = time.monotonic() + 2.0
            if time.monotonic() - started > CRAWL_TIMEOUT_S:
                raise DemoFailed(f"crawl not complete after {CRAWL_TIMEOUT_S:.0f}s ({items} items so far)")
            cluster.supervise_once()
        elapsed = time.monotonic() - started
        print(flush=True)
        info = _ask(
            consumer,
            producer,
            live,
            {"action": "info", "appid": "demo", "crawlid": crawlid, "spiderid": "link", "uuid": f"info-{crawlid}"},
            cleaned,
        )
        deadline = time.monotonic() + 15
        while not any(c.get("crawlid") == crawlid for c in cleaned) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=300).values():
                cleaned += [json.loads(r.value) for r in records if r.topic.endswith(".cleaned")]
    finally:
        consumer.close()
        producer.close(timeout=5)
    return {
        "crawlid": crawlid,
        "codes": codes,
        "elapsed": elapsed,
        "complete": complete,
        "sample": sample,
        "info": info,
        "cleaned": next((c for c in cleaned if c.get("crawlid") == crawlid and c.get("text")), None),
        "cleaned_topic": live.topic("cleaned"),
    }


def _ask(
    consumer: Any, producer: Any, live: Settings, request: dict[str, Any], cleaned: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """Send *request* through Kafka and return the outbound answer with its uuid (or None in 10 s);
    cleaned records read meanwhile are added to *cleaned*."""
    producer.send(live.topic("incoming"), json.dumps(request).encode()).get(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=300).values():
            for record in records:
                message = json.loads(record.value)
                if record.topic.endswith(".cleaned"):
                    cleaned.append(message)
                elif message.get("uuid") == request["uuid"]:
                    return dict(message)
    return None


def _print_summary(summary: dict[str, Any]) -> None:
    codes: Counter[int] = summary["codes"]
    pages = sum(codes.values())
    print(
        f"\ncrawl {summary['crawlid']} complete: {pages} pages in {summary['elapsed']:.1f}s "
        f"({pages / max(summary['elapsed'], 1e-9):.1f} pages/s)"
    )
    print("status codes: " + ", ".join(f"{code}: {n}" for code, n in sorted(codes.items())))
    print(f"complete event: {json.dumps(summary['complete'])}")
    info = summary["info"]
    print(f"info answer: {json.dumps(info) if info else '(no answer within 10 s)'}")
    sample = summary["sample"]
    if sample:
        shown = {**sample, "body": sample["body"][:80] + "…", "links": sample["links"][:3]}
        print(f"sample item: {json.dumps(shown)}")
    record = summary.get("cleaned")
    if record:
        shown = {**record, "text": (record.get("text") or "")[:80] + "…"}
        print(f"cleaned record ({summary['cleaned_topic']}): {json.dumps(shown, ensure_ascii=False)}")
    else:
        print("cleaned record: none arrived within 15 s (is a cleaner running? crawlhive dump cleaned)")
    print(
        "next: your own Scrapy spiders on the cluster, with an example project to start from: "
        "docs/spiders.md, examples/quotes"
    )
    if not summary.get("keep_running"):
        print(
            "the cluster stops now; run `crawlhive demo --keep-running` to keep it up and explore the dashboard",
            flush=True,
        )
