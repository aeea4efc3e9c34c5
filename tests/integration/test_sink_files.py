"""The files sink (docs/contract.md §20.3): gzip JSON Lines and Parquet through fsspec, offset-named
files that appear complete, rolled by size and by time; a sink SIGKILLed mid-stream leaves the
same files as one that was not, and a new group reading everything again writes nothing twice."""

from __future__ import annotations

import gzip
import json
import signal
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.sinks import cleaned, committed, log_of, produce_to_partitions, start_sink, stop_sink, wait_until

from crawlhive.sink.files import parquet_schema
from crawlhive.sink.store import sink_group
from crawlhive.utils.backends.kafka_clients import consumer_lag, ensure_topics
from crawlhive.utils.config.settings import Settings

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 4
PER_FILE = 20
FILES_PER_PARTITION = 12


def _files(root: Path) -> dict[str, Path]:
    """Complete files by their name relative to *root* (hidden temporary files left out)."""
    return {str(p.relative_to(root)): p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")}


def _rows(root: Path) -> int:
    return sum(pq.read_metadata(path).num_rows for path in _files(root).values())


def test_jsonl_files_survive_a_sigkill_and_a_replay_writes_nothing_twice(settings: Settings, tmp_path: Path) -> None:
    source = settings.topic("cleaned")
    ensure_topics(settings, [source, settings.topic("dead_letter")])
    pages = {
        p: [cleaned(f"http://f.example/{p}-{i:05d}") for i in range(PER_FILE * FILES_PER_PARTITION)]
        for p in range(PARTITIONS)
    }
    size = len(json.dumps(pages[0][0]).encode())
    assert {len(json.dumps(v).encode()) for vs in pages.values() for v in vs} == {size}  # one size: files of 20
    # The first half, and 7 records of the next file, before the kill: the sink has written the
    # first half's files and holds the 7 in its buffer (no file until 20, no roll by time), so the
    # kill always lands with records read but not written; the rest follows the kill.
    head = PER_FILE * FILES_PER_PARTITION // 2
    produce_to_partitions(settings, source, {p: values[: head + 7] for p, values in pages.items()})
    out = tmp_path / "out"
    url = f"file://{out}/?format=jsonl"
    roll = {"SINK_ROLL_BYTES": PER_FILE * size, "SINK_ROLL_SECONDS": 3600}
    wanted = {
        f"{source}/{p}/{j * PER_FILE}-{j * PER_FILE + PER_FILE - 1}.jsonl.gz"
        for p in range(PARTITIONS)
        for j in range(FILES_PER_PARTITION)
    }

    victim = start_sink(settings, tmp_path, url, SINK_MAX_POLL_RECORDS=7, **roll)
    try:
        wait_until("the first half's files", lambda: len(_files(out)) >= len(wanted) // 2, process=victim)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
    assert len(_files(out)) == len(wanted) // 2
    group = sink_group(settings.copy_with(SINK_URL=url), url)
    assert committed(settings, source, group) <= len(_files(out)) * PER_FILE  # only what is in files
    produce_to_partitions(settings, source, {p: values[head + 7 :] for p, values in pages.items()})

    second = start_sink(settings, tmp_path, url, **roll)
    try:
        wait_until("every file", lambda: set(_files(out)) == wanted, process=second)
        wait_until("the group's lag to reach 0", lambda: consumer_lag(settings, source, group) == 0, process=second)
    finally:
        stop_sink(second)
    files = _files(out)
    for name, path in files.items():
        topic, partition, span = name.split("/")
        first, last = (int(n) for n in span.removesuffix(".jsonl.gz").split("-"))
        lines = [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]
        assert lines == pages[int(partition)][first : last + 1], name
    assert "WARNING" not in log_of(second) and "Traceback" not in log_of(second)

    # Another group reads everything again, rolling at other offsets: every record is in a file
    # already, so nothing is written (no file touched, none added) and the group still commits all.
    before = {name: (path.stat().st_ino, path.read_bytes()) for name, path in files.items()}
    total = sum(len(values) for values in pages.values())
    replay = start_sink(
        settings, tmp_path, url, SINK_GROUP=f"{group}-replay", SINK_ROLL_BYTES=7 * size, SINK_ROLL_SECONDS=1
    )
    try:
        wait_until(
            "the replay group to commit every record",
            lambda: committed(settings, source, f"{group}-replay") == total,
            process=replay,
        )
        time.sleep(2)  # past a roll by time: a record gathered again would be in a file now
    finally:
        stop_sink(replay)
    after = _files(out)
    assert set(after) == wanted
    for name, path in after.items():
        inode, data = before[name]
        assert path.read_bytes() == data and path.stat().st_ino == inode, name
    assert "WARNING" not in log_of(replay) and "Traceback" not in log_of(replay)


def test_parquet_files_have_the_fixed_schema_and_roll_by_time(settings: Settings, tmp_path: Path) -> None:
    source = settings.topic("cleaned")
    ensure_topics(settings, [source, settings.topic("dead_letter")])
    values = [cleaned(f"http://q.example/{i}", text=f"text {i}") for i in range(40)]
    values[3] = cleaned("http://q.example/3", text="nul \x00 here", published="31/12/2024", status_code="x")
    produce_to_partitions(settings, source, {0: values[:20], 1: values[20:]})
    out = tmp_path / "pq"
    url = f"file://{out}?format=parquet"
    sink = start_sink(settings, tmp_path, url, SINK_ROLL_SECONDS=1)  # 40 small records: rolled by time
    group = sink_group(settings.copy_with(SINK_URL=url), url)
    try:
        # (the embedded broker's end offsets count record batches: the files say when all is there)
        wait_until("every record in a file", lambda: _rows(out) >= 40, process=sink)
        wait_until("the group's lag to reach 0", lambda: consumer_lag(settings, source, group) == 0, process=sink)
    finally:
        stop_sink(sink)
    files = _files(out)
    assert all(name.endswith(".parquet") for name in files)
    tables = {name: pq.read_table(path) for name, path in files.items()}
    assert all(t.schema.equals(parquet_schema()) for t in tables.values())
    rows = sorted((row for t in tables.values() for row in t.to_pylist()), key=lambda r: (r["partition"], r["offset"]))
    assert [(r["partition"], r["offset"]) for r in rows] == [(0, i) for i in range(20)] + [(1, i) for i in range(20)]
    for name, table in tables.items():
        offsets = table.column("offset").to_pylist()
        assert name.endswith(f"/{offsets[0]}-{offsets[-1]}.parquet") and offsets == list(
            range(offsets[0], offsets[-1] + 1)
        )
    odd = rows[3]
    assert odd["text"] == "nul \ufffd here" and odd["published"] is None and odd["status_code"] is None
    assert json.loads(odd["record"]) == values[3]
    first = rows[0]
    assert first["url"] == "http://q.example/0" and first["appid"] == "sapp" and first["status_code"] == 200
    assert first["fetched_at"].isoformat() == "2026-11-25T12:00:00+00:00"
    assert first["published"].isoformat() == "2024-03-05"
