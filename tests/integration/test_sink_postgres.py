"""The PostgreSQL sink (docs/contract.md §20.1, §20.2) on the real PostgreSQL: rows, newest version
wins under redelivery and reordering, dead letters for what it cannot write, a sink SIGKILLed
mid-stream, and PostgreSQL taken away and given back under load."""

from __future__ import annotations

import json
import logging
import secrets
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from support.crawler import Collector
from support.sinks import (
    POSTGRES_URL,
    Relay,
    cleaned,
    committed,
    count,
    log_of,
    pg_table,
    produce,
    rows,
    sink_url,
    start_sink,
    wait_until,
)

from crawlhive.app.up import _status
from crawlhive.sink.store import sink_group, sink_name
from crawlhive.sink.view import metrics, stats_body
from crawlhive.sink.view import rows as sink_rows
from crawlhive.sink.worker import Sink
from crawlhive.utils.backends.kafka_clients import consumer_lag, ensure_topics, make_consumer, make_producer
from crawlhive.utils.backends.redis_clients import keys_from_settings, redis_from_settings
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.state.sinks import COMPONENT, failing_sinks, live_sinks, sink_counter_name

__all__ = ["pg_table"]  # the fixture, imported from support.sinks

pytestmark = pytest.mark.timeout(180)


def _letters(collector: Collector, n: int = 0, timeout: float = 30) -> list[dict[str, Any]]:
    """Every message *collector* read (whatever their crawlid), once there are *n*."""
    deadline = time.monotonic() + timeout
    while True:
        with collector.lock:
            found = [m for batch in collector.messages.values() for m in batch]
        if len(found) >= n or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


class _Rows:
    """The sinks' metric families, as REST's collector yields them."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    def collect(self) -> Any:
        return metrics(sink_rows(self.sink.redis, self.sink.keys, self.sink.stats, 30))


def _drain(sink: Sink, total: int, timeout: float = 60) -> None:
    """Run *sink*'s iterations until it processed *total* records."""
    deadline = time.monotonic() + timeout
    while sink.totals.records < total:
        assert time.monotonic() < deadline, f"sink processed {sink.totals.records} of {total} records"
        sink.run_once()


def test_rows_newest_version_wins_and_bad_records_are_dead_letters(
    settings: Settings, pg_table: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Versions of one page out of order leave one row with the newest; a redelivered batch
    changes nothing; not JSON, not an object, no url, a URL too long for the key's index, a
    lone surrogate are dead letters, refused alone (the rest of their batch is written as one
    transaction, not row by row); a NUL character is stored as U+FFFD; offsets are committed to the end."""
    caplog.set_level(logging.INFO, logger="crawlhive")
    url = sink_url(pg_table)
    cfg = settings.copy_with(SINK_URL=url, SINK_MAX_POLL_RECORDS=100)
    source = settings.topic("cleaned")
    ensure_topics(settings, [source, settings.topic("dead_letter")])
    collector = Collector(settings, [settings.topic("dead_letter")])
    records: list[Any] = [
        cleaned("http://a.example/1", "2026-11-25T12:00:02.000000", title="second"),
        cleaned("http://a.example/1", "2026-11-25T12:00:03.000000", title="newest"),
        cleaned("http://a.example/1", "2026-11-25T12:00:01.000000", title="first"),
        cleaned("http://a.example/2", text="zero \x00 byte", published="not a date", status_code=10**12),
        cleaned("http://b.example/" + secrets.token_hex(5000)),  # too long for the key's btree index
        b"not json",
        [1, 2],
        {"appid": "sapp", "crawlid": "c1"},
        cleaned("http://c.example/1", title="\ud800 a lone surrogate"),  # JSON, but not Unicode text
    ]
    produce(settings, source, records)
    sink = Sink.from_settings(cfg)
    try:
        assert sink.start()
        _drain(sink, len(records))
        # Six page records, two refused (a key too long, a lone surrogate); the versions of
        # a.example/1 are spread over partitions, so how many replaced a row and how many came
        # after a newer one depends on the order.
        assert sink.totals.dead_letters == 5
        assert sink.totals.written + sink.totals.duplicates == 4 and sink.totals.written >= 2
        duplicates, written = sink.totals.duplicates, sink.totals.written
        table = rows(pg_table)
        assert [r["url"] for r in table] == ["http://a.example/1", "http://a.example/2"]
        first, second = table
        assert first["title"] == "newest" and first["record"]["title"] == "newest"
        assert first["fetched_at"].isoformat() == "2026-11-25T12:00:03+00:00"
        assert first["published"].isoformat() == "2024-03-05" and first["status_code"] == 200
        assert second["text"] == "zero \ufffd byte" and second["published"] is None and second["status_code"] is None
        assert committed(settings, source, sink.group) == len(records)
        letters = _letters(collector, 5)
        assert {letter["stage"] for letter in letters} == {"sink"}
        assert {letter["sink"] for letter in letters} == {sink_name(url)}
        errors = sorted(letter["error"] for letter in letters)
        assert errors[:4] == [
            "not JSON (Expecting value: line 1 column 1 (char 0))",
            "not Unicode text: a string holds a lone surrogate",
            "not a JSON object but list",
            "not a page record: 'url' is not a string",
        ]
        assert errors[4].startswith("the key (appid, crawlid, url) is 10023 bytes, more than the 2600"), errors[4]
        assert not [r for r in caplog.records if "one by one" in r.getMessage()], "a batch was written row by row"
        too_long = next(letter for letter in letters if letter["error"].startswith("the key"))
        assert too_long["url"].startswith("http://b.example/") and too_long["topic"] == source
        assert isinstance(too_long["partition"], int) and isinstance(too_long["offset"], int)

        # Redelivered and older: nothing changes, one row per page; a newer version replaces.
        before = rows(pg_table)
        produce(
            settings,
            source,
            [
                cleaned("http://a.example/1", "2026-11-25T12:00:03.000000", title="newest"),
                cleaned("http://a.example/1", "2026-11-24T00:00:00.000000", title="old"),
                cleaned("http://a.example/2", "2026-11-26T00:00:00.000000", title="later"),
            ],
        )
        _drain(sink, len(records) + 3)
        after = rows(pg_table)
        assert len(after) == 2 and after[0] == before[0]
        assert after[1]["title"] == "later" and after[1]["updated_at"] > before[1]["updated_at"]
        assert (sink.totals.duplicates, sink.totals.written) == (duplicates + 2, written + 1)
        counts = sink.stats.read(COMPONENT, sink_counter_name(sink.name, "written"))
        assert counts["lifetime"] == written + 1

        # stats: sink, /metrics and the dashboard's rows (§20.7)
        sink.beat(force=True)
        body = stats_body(sink.redis, sink.keys, sink.stats, 30)["sinks"][sink.name]
        assert body["written"]["lifetime"] == written + 1 and body["dead_letters"]["lifetime"] == 5
        assert (body["kind"], body["topic"], body["group"], body["processes"], body["lag"]) == (
            "postgresql",
            source,
            sink.group,
            1,
            0,
        )
        registry = CollectorRegistry()
        registry.register(_Rows(sink))
        text = generate_latest(registry).decode()
        assert f'crawlhive_sink_records_total{{kind="written",sink="{sink.name}"}} {written + 1}.0' in text
        assert f'crawlhive_sink_records_total{{kind="dead_letters",sink="{sink.name}"}} 5.0' in text
        assert f'crawlhive_sink_lag{{sink="{sink.name}"}} 0.0' in text
    finally:
        sink.teardown()
        collector.close()
    assert live_sinks(sink.redis, sink.keys, 30) == {}  # a stopped sink withdraws its state
    assert sink_group(cfg, url) == f"{settings['KAFKA_TOPIC_PREFIX']}-sink-{sink_name(url)}"
    assert sink_name(url).startswith("postgresql-")


def test_a_sink_killed_mid_stream_loses_nothing_and_duplicates_no_row(
    settings: Settings, pg_table: str, tmp_path: Path
) -> None:
    """SIGKILL a ``crawlhive sink`` while it writes, start another: every page has its row, once,
    holding the record sent, and the group's offsets reach the end. (20,000 pages: the sink writes
    about 20,000 a second here, and 3,000 were all stored before the check every 0.2 s saw 200.)"""
    pages = 20_000
    url = sink_url(pg_table)
    source = settings.topic("cleaned")
    ensure_topics(settings, [source, settings.topic("dead_letter")])
    produce(settings, source, [cleaned(f"http://k.example/{i}", text=f"page {i}") for i in range(pages)])
    victim = start_sink(settings, tmp_path, url, SINK_MAX_POLL_RECORDS=50)
    try:
        wait_until("the first rows", lambda: count(pg_table) >= 200, process=victim)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
    left = count(pg_table)
    assert left < pages, "the sink finished before it was killed: nothing was tested"
    group = sink_group(settings.copy_with(SINK_URL=url), url)
    assert committed(settings, source, group) <= left  # never committed past what is stored
    second = start_sink(settings, tmp_path, url)
    try:
        wait_until("every page stored", lambda: count(pg_table) == pages, process=second)
        wait_until("the group's lag to reach 0", lambda: consumer_lag(settings, source, group) == 0, process=second)
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
    table = rows(pg_table)
    assert [r["url"] for r in table] == sorted(f"http://k.example/{i}" for i in range(pages))
    assert all(r["text"] == f"page {r['url'].rsplit('/', 1)[1]}" for r in table)
    log = log_of(second)
    assert "Traceback" not in log and "ERROR" not in log and "WARNING" not in log, log


def test_postgresql_unreachable_under_load_loses_nothing_and_commits_nothing(
    settings: Settings, pg_table: str, tmp_path: Path
) -> None:
    """PostgreSQL goes away (every connection cut, nothing listening) while records keep coming:
    the sink backs off naming SINK_URL (password masked), commits nothing past what is stored,
    dead-letters nothing; PostgreSQL back, every record is stored."""
    redis = redis_from_settings(settings)
    keys = keys_from_settings(settings)
    relay = Relay(("127.0.0.1", 5432))
    relay.up()
    base = POSTGRES_URL.replace("postgres@127.0.0.1:5432", f"postgres:s3cret-pw@127.0.0.1:{relay.port}")
    url = sink_url(pg_table, base)
    source = settings.topic("cleaned")
    ensure_topics(settings, [source, settings.topic("dead_letter")])
    collector = Collector(settings, [settings.topic("dead_letter")])
    sink = start_sink(settings, tmp_path, url, SINK_MAX_POLL_RECORDS=20)
    group = sink_group(settings.copy_with(SINK_URL=url), url)
    try:
        produce(settings, source, [cleaned(f"http://d.example/{i}") for i in range(300)])
        wait_until("the first rows", lambda: count(pg_table) >= 100, process=sink)
        relay.down()
        produce(settings, source, [cleaned(f"http://d.example/{i}") for i in range(300, 600)])
        wait_until("the sink to notice", lambda: "PostgreSQL unreachable" in log_of(sink), process=sink)
        # It says so where the cluster's health is read: REST's node_health, `up`'s status line.
        name = sink_name(url)
        failing = failing_sinks(redis, keys, 30)
        assert list(failing) == [name] and "PostgreSQL unreachable" in failing[name], failing
        assert "s3cret-pw" not in failing[name] and "SINK_URL" in failing[name]
        line = _status([], redis, settings, sinks=True)
        assert line.startswith("healthy=False redis=ok") and f"; sink {name} failing: " in line, line
        stored = count(pg_table)
        time.sleep(2)  # records keep arriving while the store is down
        assert count(pg_table) == stored < 600
        assert committed(settings, source, group) <= stored
        relay.up()
        wait_until("every record stored", lambda: count(pg_table) == 600, process=sink)
        wait_until("the failure withdrawn", lambda: not failing_sinks(redis, keys, 30), process=sink)
        assert _status([], redis, settings, sinks=True).startswith("healthy=True")
        wait_until("the group's lag to reach 0", lambda: consumer_lag(settings, source, group) == 0, process=sink)
        sink.send_signal(signal.SIGTERM)
        assert sink.wait(30) == 0
    finally:
        relay.down()
        if sink.poll() is None:
            sink.kill()
            sink.wait()
        collector.close()
    log = log_of(sink)
    assert "s3cret-pw" not in log and "SINK_URL" in log, log
    assert "Traceback" not in log, log
    assert _letters(collector) == []
    assert [r["url"] for r in rows(pg_table)] == sorted(f"http://d.example/{i}" for i in range(600))


def test_the_documented_queries_run_on_a_sinks_table(settings: Settings, pg_table: str) -> None:
    """docs/operations.md ("Sinks"): every example query runs on a table a sink made."""
    import psycopg

    text = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    block = text.split("## Sinks", 1)[1].split("```sql\n", 1)[1].split("```", 1)[0]
    queries = [line for line in block.splitlines() if line.strip() and not line.startswith("--")]
    assert len(queries) == 5
    source = settings.topic("cleaned")
    ensure_topics(settings, [source, settings.topic("dead_letter")])
    produce(
        settings,
        source,
        [
            cleaned("http://127.0.0.1:8000/", text="The river and the salmon", appid="tour", markdown="# River"),
            cleaned("http://127.0.0.1:8000/about.html", appid="tour", content_hash="h-same"),
            cleaned("http://127.0.0.1:8000/copy.html", appid="tour", content_hash="h-same"),
        ],
    )
    sink = Sink.from_settings(settings.copy_with(SINK_URL=sink_url(pg_table)))
    try:
        assert sink.start()
        _drain(sink, 3)
    finally:
        sink.teardown()
    results = []
    with psycopg.connect(POSTGRES_URL) as conn:
        for query in queries:
            results.append(conn.execute(query.replace("crawlhive_pages", pg_table)).fetchall())
    assert len(results[0]) == 3 and results[1] == [("h-same", 2, "http://127.0.0.1:8000/about.html")]
    assert results[2] == [(200, "en", 3)] and results[3] == [("# River", None)]
    assert results[4] == [("http://127.0.0.1:8000/", "title of http://127.0.0.1:8000/")]


def test_lag_counts_every_record_of_the_last_batch(settings: Settings, pg_table: str) -> None:
    """Tansu answers ListOffsets with the base offset of a partition's last record batch plus one
    (20 records sent as one batch count as 1); the sink's lag and ``consumer_lag`` (the cleaners'
    lag in /metrics) take the high watermark of a fetch answer, which counts all 20."""
    from crawlhive.utils.backends.rdkafka import RdKafkaConsumer
    from crawlhive.utils.contract.kafka_errors import TopicPartition

    topic = f"{settings['KAFKA_TOPIC_PREFIX']}.lag-{secrets.token_hex(3)}"
    ensure_topics(settings.copy_with(KAFKA_TOPIC_PARTITIONS=1), [topic, settings.topic("dead_letter")])
    producer = make_producer(settings, linger_ms=2000)
    try:
        for i in range(20):
            producer.send(topic, json.dumps(cleaned(f"http://lag.example/{i}")).encode(), partition=0)
        producer.flush(timeout=20)  # one batch of 20 records
    finally:
        producer.close(timeout=5)
    part = TopicPartition(topic, 0)
    probe: RdKafkaConsumer = make_consumer(settings, group_id=None)
    try:
        listed = probe.end_offsets([part])[part]
    finally:
        probe.close(autocommit=False)
    assert listed < 20, f"the broker answers ListOffsets {listed}: the case this test is about is gone"
    assert consumer_lag(settings, topic, f"never-{secrets.token_hex(3)}") == 20
    sink = Sink.from_settings(settings.copy_with(SINK_URL=sink_url(pg_table), SINK_FROM=topic, SINK_MAX_POLL_RECORDS=5))
    try:
        assert sink.start()
        _drain(sink, 5)
        done = committed(settings, topic, sink.group)
        assert 5 <= done < 20
        assert sink.lag() == 20 - done == consumer_lag(settings, topic, sink.group)
        _drain(sink, 20)
        sink.run_once()  # the last batch committed
        assert sink.lag() == 0 == consumer_lag(settings, topic, sink.group)
    finally:
        sink.teardown()
    assert count(pg_table) == 20


def test_two_batches_written_at_once_over_the_same_pages_never_deadlock(
    settings: Settings, pg_table: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The PostgreSQL store writes two batches at once (PostgresStore.writers, each on a
    connection of its own). Batches of the same 400 pages in opposite orders, each a newer version:
    the two transactions wait for each other's rows but never deadlock (rows are upserted in key
    order), nothing is refused or retried, every page ends with its newest version, and the
    offsets are committed to the end."""
    caplog.set_level(logging.INFO, logger="crawlhive")
    pages = [f"http://o.example/{i:03d}" for i in range(400)]
    records = []
    for version in range(12):
        order = pages if version % 2 else pages[::-1]
        stamp = f"2026-11-25T12:{version:02d}:00.000000"
        records += [cleaned(url, stamp, title=f"v{version}") for url in order]
    topic = settings.topic(f"cleaned-{secrets.token_hex(3)}")
    ensure_topics(settings.copy_with(KAFKA_TOPIC_PARTITIONS=1), [topic, settings.topic("dead_letter")])
    produce(settings, topic, records)
    sink = Sink.from_settings(
        settings.copy_with(SINK_URL=sink_url(pg_table), SINK_FROM=topic, SINK_MAX_POLL_RECORDS=400)
    )
    writing, most = [0], [0]
    lock = threading.Lock()
    write = sink.store.write_prepared

    def counted(prepared: Any) -> Any:  # how many batches are being written at once
        with lock:
            writing[0] += 1
            most[0] = max(most[0], writing[0])
        try:
            time.sleep(0.01)  # (each write long enough for the next to start beside it)
            return write(prepared)
        finally:
            with lock:
                writing[0] -= 1

    monkeypatch.setattr(sink.store, "write_prepared", counted)
    try:
        assert sink.start()
        _drain(sink, len(records))
        sink.finish_inflight()
    finally:
        sink.teardown()
    assert sink.store.writers == 2 and most[0] == 2
    assert sink.totals.dead_letters == 0 and sink.totals.written + sink.totals.duplicates == len(records)
    # no deadlock retried (the sink's own lines: kafka-python's admin client may warn of a slow
    # step of its network loop on a loaded machine, which a real process shows at DEBUG only)
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("crawlhive")]
    assert not warned, caplog.text
    table = rows(pg_table)
    assert [r["url"] for r in table] == pages and {r["title"] for r in table} == {"v11"}
    assert committed(settings, topic, sink.group) == len(records)
