"""Sinks keep their consumer group while they roll large files (issue 43, finding 1).

A ``warc://`` or ``file://`` sink used to encode and write a whole roll on the thread that polls
Kafka: four partitions of ~45 MB rolled together took longer than the poll interval, the group
evicted the sink (``leaving group``, then ``Commit failed: Unknown member``), and the sink read and
wrote the same records again at every roll, its committed offsets never moving. Here each of the
three file formats reads the same ~180 MB of ~0.9 MB crawled pages (4 partitions, rolled by time
when every partition holds ~45 MB, the kafka-monitor's 6 s poll interval): the group's committed
offsets reach the end of the topic, no eviction or failed commit is logged, every page is in
exactly one file, and no file is rewritten once written.

A record sent by reference (``body_ref``) counts its body toward SINK_ROLL_BYTES, and a graceful
stop writes and commits what the sink holds.
"""

from __future__ import annotations

import gzip
import io
import json
import secrets
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from support.sinks import committed, log_of, produce_to_partitions, start_sink, stop_sink, wait_until
from warcio.archiveiterator import ArchiveIterator

from crawlhive.sink.store import sink_group
from crawlhive.utils.backends.blobs import BlobStore
from crawlhive.utils.backends.kafka_clients import ensure_topics
from crawlhive.utils.config.settings import Settings

pytestmark = pytest.mark.timeout(420)

PARTITIONS = 4
PER_PARTITION = 50
PAGE_BYTES = 900_000
#: What the log of a sink that lost its group says (librdkafka's and ours).
EVICTED = ("leaving group", "Commit failed", "UNKNOWN_MEMBER", "left its Kafka group", "MAX_POLL", "MAXPOLL")


def _page(partition: int, i: int) -> dict[str, Any]:
    """A crawled item (§5) of about PAGE_BYTES whose body compresses as real text does, roughly."""
    url = f"http://roll{partition}.example/p/{i:04d}"
    words = secrets.token_hex(PAGE_BYTES // 4)
    body = "<html><body><p>" + " ".join(words[j : j + 8] for j in range(0, len(words), 8)) + "</p></body></html>"
    return {
        "appid": "rolls",
        "crawlid": "r1",
        "url": url,
        "response_url": url,
        "status_code": 200,
        "status_msg": "OK",
        "response_headers": {"Content-Type": ["text/html; charset=utf-8"]},
        "request_headers": {},
        "body": body,
        "encoding": "utf-8",
        "links": [],
        "attrs": None,
        "timestamp": "2026-11-29T12:00:00.000000",
        "protocol": "HTTP/1.1",
        "original_headers": {},
    }


def _committed_per_partition(settings: Settings, topic: str, group: str) -> list[int]:
    from crawlhive.utils.backends.kafka_clients import make_consumer
    from crawlhive.utils.contract.kafka_errors import TopicPartition

    consumer = make_consumer(settings, group_id=group)
    try:
        return [consumer.committed(TopicPartition(topic, p)) or 0 for p in range(PARTITIONS)]
    finally:
        consumer.close(autocommit=False)


def _complete_files(root: Path, ext: str) -> dict[Path, int]:
    """Complete files (hidden temporaries left out) and their inode numbers."""
    return {p: p.stat().st_ino for p in root.rglob(f"*{ext}") if p.is_file() and not p.name.startswith(".")}


def _urls_in(path: Path, fmt: str) -> list[str]:
    if fmt == "warc":
        records = ArchiveIterator(io.BytesIO(path.read_bytes()))
        return [str(r.rec_headers.get_header("WARC-Target-URI")) for r in records if r.rec_type == "response"]
    if fmt == "parquet":
        return [str(url) for url in pq.read_table(path, columns=["url"]).column("url").to_pylist()]
    return [json.loads(line)["url"] for line in gzip.decompress(path.read_bytes()).splitlines()]


def test_sinks_rolling_45mb_a_partition_keep_their_group_and_archive_each_page_once(
    settings: Settings, tmp_path: Path
) -> None:
    source = settings.topic("crawled_firehose")
    ensure_topics(settings, [source, settings.topic("dead_letter")])
    pages = {p: [_page(p, i) for i in range(PER_PARTITION)] for p in range(PARTITIONS)}
    produce_to_partitions(settings, source, pages)
    wanted = sorted(str(page["url"]) for values in pages.values() for page in values)
    del pages  # 180 MB

    # The kafka-monitor's poll interval and session (the sink's used to be these), rolled by time
    # only, once every partition holds its ~45 MB: the shape that evicted the sink at every roll.
    shape = {
        "SINK_MAX_POLL_INTERVAL_MS": 6000,
        "KAFKA_MAX_POLL_INTERVAL_MS": 5000,
        "KAFKA_SESSION_TIMEOUT_MS": 6000,
        "SINK_ROLL_BYTES": 1024 * 1024 * 1024,
        "SINK_MAX_HELD_BYTES": 1024 * 1024 * 1024,
        "SINK_ROLL_SECONDS": 12,
        "SINK_FROM": "crawled_firehose",
    }
    sinks = {
        "warc": (f"warc://{tmp_path / 'warc'}/", ".warc.gz"),
        "jsonl": (f"file://{tmp_path / 'jsonl'}/?format=jsonl", ".jsonl.gz"),
        "parquet": (f"file://{tmp_path / 'parquet'}/?format=parquet", ".parquet"),
    }
    for fmt, (url, ext) in sinks.items():
        _archive_once(settings, source, url, tmp_path / fmt, ext, shape, wanted)


def _archive_once(
    settings: Settings, source: str, url: str, out: Path, ext: str, shape: dict[str, Any], wanted: list[str]
) -> None:
    """Run the sink of *url* until its group committed every offset and a roll interval more."""
    fmt = "warc" if url.startswith("warc:") else url.rsplit("=", 1)[1]
    group = sink_group(settings.copy_with(SINK_URL=url), url)
    process = start_sink(settings, out.parent, url, **shape)
    first_seen: dict[Path, int] = {}

    def every_offset_committed() -> bool:
        for path, inode in _complete_files(out, ext).items():
            first_seen.setdefault(path, inode)
        return _committed_per_partition(settings, source, group) == [PER_PARTITION] * PARTITIONS

    try:
        wait_until(f"the {fmt} sink's group to commit every offset", every_offset_committed, 240, process)
        # A sink that had lost its group would read and roll the same records again: give it a
        # roll interval and more to do so, watching the files meanwhile.
        deadline = time.monotonic() + shape["SINK_ROLL_SECONDS"] + 3
        while time.monotonic() < deadline:
            assert every_offset_committed(), "the committed offsets moved back"
            time.sleep(0.5)
    finally:
        stop_sink(process)
    log = log_of(process)
    assert not [line for line in log.splitlines() if any(word in line for word in EVICTED)], log[-4000:]
    assert "WARNING" not in log and "Traceback" not in log, log[-4000:]
    files = _complete_files(out, ext)
    assert files == first_seen, "a file was written again after it was complete"
    found = sorted(url for path in files for url in _urls_in(path, fmt))
    assert found == wanted, f"{fmt}: {len(found)} pages archived, {len(set(found))} distinct, {len(wanted)} sent"


def test_a_page_by_reference_counts_its_body_toward_the_roll_and_a_stop_writes_what_is_held(
    settings: Settings, tmp_path: Path
) -> None:
    """Ten cleaned records whose 6 MiB bodies are in the blob store: files roll every 13 MiB of
    bodies (three records each; counted by their ~500-byte messages, none would roll for an hour),
    never more than SINK_MAX_HELD_BYTES held, and the graceful stop writes the tenth and commits it."""
    source = settings.topic("cleaned")
    ensure_topics(settings, [source, settings.topic("dead_letter")])
    blobs = BlobStore.from_settings(settings)
    values = []
    for i in range(10):
        ref = blobs.put(("<p>" + secrets.token_hex(3 * 1024 * 1024) + "</p>").encode())
        url = f"http://ref.example/{i}"
        values.append({"appid": "refs", "crawlid": "r", "url": url, "status_code": 200, "body": None, "body_ref": ref})
    produce_to_partitions(settings, source, {0: values})
    out = tmp_path / "out"
    url = f"file://{out}/?format=jsonl"
    group = sink_group(settings.copy_with(SINK_URL=url), url)
    # At most 20 MiB held: the records come in one poll (their messages are small), the sink takes
    # what fits (three bodies), pauses while their file is written, then takes the next.
    bounds = {"SINK_ROLL_BYTES": 13 * 1024 * 1024, "SINK_MAX_HELD_BYTES": 20 * 1024 * 1024, "SINK_ROLL_SECONDS": 3600}
    process = start_sink(settings, tmp_path, url, **bounds)
    try:
        wait_until("three files of three pages", lambda: len(_complete_files(out, ".jsonl.gz")) == 3, 120, process)
        # A file is complete before its offsets are committed (write, then commit): wait for the
        # commit, then check it stops at the nine written.
        wait_until("nine committed", lambda: committed(settings, source, group) >= 9, 30, process)
        assert committed(settings, source, group) == 9
    finally:
        stop_sink(process)
    files = sorted(_complete_files(out, ".jsonl.gz"), key=lambda p: int(p.name.split("-")[0]))
    assert [p.name for p in files] == ["0-2.jsonl.gz", "3-5.jsonl.gz", "6-8.jsonl.gz", "9-9.jsonl.gz"]
    lines = [json.loads(line) for p in files for line in gzip.decompress(p.read_bytes()).splitlines()]
    assert [line["url"] for line in lines] == [v["url"] for v in values]
    assert all(len(line["body"]) == 6 * 1024 * 1024 + 7 for line in lines)
    assert committed(settings, source, group) == 10
    log = log_of(process)
    assert "WARNING" not in log and "Traceback" not in log, log[-3000:]
