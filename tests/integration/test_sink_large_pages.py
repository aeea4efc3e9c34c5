"""Large pages by reference (docs/contract.md §20.5): a 3 MB page is crawled, emitted with its body
in the blob store, cleaned, stored by every kind of sink (PostgreSQL from cleaned and from the
firehose, JSON Lines files, WARC), and printed whole by ``crawlhive dump``."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest
from support.crawler import CLI, Collector, Crawler, TestSite, crawler_env, redis_for, seed
from support.sinks import POSTGRES_URL, count, pg_table, rows, sink_url, start_sink, wait_until
from warcio.archiveiterator import ArchiveIterator

from crawlhive.utils.backends.kafka_clients import ensure_topics
from crawlhive.utils.config.settings import Settings

__all__ = ["pg_table"]  # the fixture, imported from support.sinks

pytestmark = pytest.mark.timeout(240)


def _big_page(size: int) -> bytes:
    """An article of about *size* bytes whose paragraphs all differ."""
    head = "<html><head><meta charset='utf-8'><title>The long report</title></head>"
    head += "<body><article><h1>The long report</h1>"
    paragraphs = []
    total = len(head)
    i = 0
    while total < size:
        p = f"<p>Paragraph {i} of the long report tells how river number {i} reached the sea after {i % 97} days.</p>\n"
        paragraphs.append(p)
        total += len(p)
        i += 1
    return (head + "".join(paragraphs) + "</article></body></html>").encode()


def test_a_3mb_page_is_emitted_by_reference_cleaned_and_stored(
    settings: Settings, pg_table: str, tmp_path: Path
) -> None:
    page = _big_page(3 * 1024 * 1024)
    digest = hashlib.sha256(page).hexdigest()
    site = TestSite()
    site.start()
    site.page("/big", page)
    topics = [settings.topic(t) for t in ("crawled_firehose", "cleaned", "dead_letter")]
    ensure_topics(settings, topics)
    collector = Collector(settings, topics)
    client = redis_for(settings["REDIS_URL"])
    slow = {"CLEANER_MAX_SECONDS": 90, "CLEANER_MAX_POLL_INTERVAL_MS": 90 * 50 * 1000 + 1000}
    crawler = Crawler(crawler_env(settings), tmp_path)
    try:  # ready before the rest starts (a loaded machine)
        crawler.wait_ready(client, settings["REDIS_KEY_PREFIX"], timeout=120)
    except BaseException:
        crawler.kill()
        collector.close()
        client.close()
        site.stop()
        raise
    cleaner_log = tmp_path / "cleaner.log"
    cleaner = subprocess.Popen([*CLI, "cleaner", "--log-file", str(cleaner_log)], env=crawler_env(settings, **slow))
    pg_url, raw_url = sink_url(pg_table), sink_url(f"{pg_table}_raw")
    files_dir, warc_dir = tmp_path / "files", tmp_path / "warc"
    sinks = [
        start_sink(settings, tmp_path, pg_url),
        start_sink(settings, tmp_path, raw_url, "--from", "crawled_firehose"),
        start_sink(settings, tmp_path, f"file://{files_dir}/", "--from", "crawled_firehose", SINK_ROLL_SECONDS=1),
        start_sink(settings, tmp_path, f"warc://{warc_dir}/", SINK_ROLL_SECONDS=1),
    ]
    try:
        seed(settings, client, appid="big", crawlid="b1", url=site.url("/big"), maxdepth=0)
        [item] = collector.wait_for("b1", 1, timeout=60, topic=topics[0])
        assert item["body"] is None
        assert item["body_ref"]["sha256"] == digest and item["body_ref"]["size"] == len(page)
        assert (tmp_path / "blobs" / digest).read_bytes() == page
        [record] = collector.wait_for("b1", 1, timeout=120, topic=topics[1])
        assert record["title"] == "The long report"
        assert "Paragraph 1 of the long report tells how river number 1 reached the sea" in record["text"]
        wait_until("the cleaned row", lambda: count(pg_table) == 1, timeout=60, process=sinks[0])
        wait_until("the crawled row", lambda: count(f"{pg_table}_raw") == 1, timeout=60, process=sinks[1])
        [row] = rows(pg_table)
        assert row["url"] == site.url("/big") and row["title"] == "The long report"
        [raw] = rows(f"{pg_table}_raw")
        assert raw["record"]["body"] == page.decode() and raw["record"]["body_ref"]["sha256"] == digest
        # the files sink and the WARC sink hold the whole body too
        wait_until("a JSON Lines file", lambda: list(files_dir.rglob("*.jsonl.gz")), timeout=60, process=sinks[2])
        [jsonl] = list(files_dir.rglob("*.jsonl.gz"))
        assert json.loads(gzip.decompress(jsonl.read_bytes()))["body"] == page.decode()
        wait_until("a WARC file", lambda: list(warc_dir.rglob("*.warc.gz")), timeout=60, process=sinks[3])
        [warc] = list(warc_dir.rglob("*.warc.gz"))
        [response] = [
            r.content_stream().read()
            for r in ArchiveIterator(io.BytesIO(warc.read_bytes()), check_digests=True)
            if r.rec_type == "response"
        ]
        assert response == page
        dumped = subprocess.run(
            [*CLI, "dump", "crawled_firehose", "-b", "-n", "1"],
            env=crawler_env(settings),
            capture_output=True,
            timeout=60,
        )
        assert dumped.returncode == 0, dumped.stderr
        assert json.loads(dumped.stdout)["body"] == page.decode()
        assert collector.of("b1", topics[2]) == []
    finally:
        for sink in sinks:
            sink.send_signal(signal.SIGTERM)
        cleaner.send_signal(signal.SIGTERM)
        assert crawler.terminate(timeout=60) == 0, crawler.output()
        for process in [*sinks, cleaner]:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        collector.close()
        client.close()
        site.stop()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {pg_table}_raw")
    output = crawler.output()
    assert "Paragraph 7 of the long report" not in output  # the payload is never logged
    assert "Traceback" not in output and "ERROR" not in output, output[-3000:]
    assert "Traceback" not in cleaner_log.read_text(), cleaner_log.read_text()[-3000:]


@pytest.mark.parametrize("kind", ["redis-monitor", "kafka-monitor", "cleaner", "sink"])
def test_blobs_expire_whichever_processes_run(settings: Settings, tmp_path: Path, kind: str) -> None:
    """A deployment without crawlers still removes blobs older than BLOB_TTL: each worker process
    sweeps the store at start (then at most once an hour), on a thread of its own; a fresh blob and
    a file that is not a blob stay."""
    home = tmp_path / "home"
    blobs = home / "blobs"
    blobs.mkdir(parents=True)
    old, fresh = (hashlib.sha256(body).hexdigest() for body in (b"old body", b"fresh body"))
    (blobs / old).write_bytes(b"old body")
    (blobs / fresh).write_bytes(b"fresh body")
    (blobs / "notes.txt").write_text("not a blob")
    past = time.time() - 7200
    for name in (old, "notes.txt"):
        os.utime(blobs / name, (past, past))
    ensure_topics(settings, [settings.topic(t) for t in ("incoming", "crawled_firehose", "cleaned", "dead_letter")])
    env = crawler_env(settings.copy_with(CRAWLHIVE_HOME=str(home)), BLOB_TTL=3600)
    extra = ["--to", f"file://{tmp_path}/files/"] if kind == "sink" else []
    log = tmp_path / f"{kind}.log"
    process = subprocess.Popen([*CLI, kind, *extra, "--log-file", str(log)], env=env)
    said = "removed 1 blobs older than BLOB_TTL (3600 s)"
    try:
        deadline = time.monotonic() + 90
        while (blobs / old).exists() or not (log.exists() and said in log.read_text()):
            text = log.read_text() if log.exists() else ""
            assert time.monotonic() < deadline, f"{kind} left an expired blob:\n{text[-3000:]}"
            assert process.poll() is None, text[-3000:]
            time.sleep(0.2)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert (blobs / fresh).read_bytes() == b"fresh body" and (blobs / "notes.txt").exists()
    # crawlhive's own lines only: a consumer stopped while it joins its group may log kafka-python's
    # "LeaveGroup request failed" (Tansu answers the join late on a busy machine)
    lines = [line.split(maxsplit=4) for line in log.read_text().splitlines()]
    ours = [line for line in lines if len(line) > 3 and line[3].startswith("crawlhive.")]
    assert ours and not [line for line in ours if line[2] in ("WARNING", "ERROR")], ours
    assert "Traceback" not in log.read_text()
