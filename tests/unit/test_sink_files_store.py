"""The file store's rolls on its roller thread (issue 43, finding 1), on a real local folder: what
it holds back while a file is written, the memory bound, what a failed roll leaves, a graceful
flush; the size a record by reference counts; the message of a consumer that lost its group."""

from __future__ import annotations

import gzip
import json
import threading
from pathlib import Path

import pytest

from crawlhive.sink.files import FileStore
from crawlhive.sink.store import SinkRecord
from crawlhive.sink.worker import _ref_size_of_message
from crawlhive.utils.config.errors import BackendUnavailable
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.kafka_errors import CommitFailedError, KafkaError
from crawlhive.utils.process.loop import describe_failure, lost_membership

TOPIC = "t.cleaned"


def _record(partition: int, offset: int, size: int = 100) -> SinkRecord:
    value = {"url": f"http://x.example/{partition}/{offset}"}
    return SinkRecord(TOPIC, partition, offset, value, size, json.dumps(value).encode())


class GatedStore(FileStore):
    """A FileStore whose roller waits at a gate before each file (to see what happens meanwhile)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.gate = threading.Event()
        self.fail = False

    def _put(self, final: str, data: bytes) -> None:
        assert self.gate.wait(10)
        if self.fail:
            raise OSError("disk full")
        super()._put(final, data)


def _store(tmp_path: Path, roll_bytes: int = 300, max_held: int = 0) -> GatedStore:
    store = GatedStore(f"file://{tmp_path}", f"file://{tmp_path}", "jsonl", roll_bytes, 3600.0, max_held)
    store.open()
    return store


def test_a_roll_is_written_off_the_calling_thread_and_held_back_until_it_is_complete(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assigned = {(TOPIC, 0)}
    result = store.write([_record(0, offset) for offset in range(5)])  # rolls at 0-2, gathers 3-4
    assert (result.written, result.buffered) == (0, 5)  # in no file yet
    assert store.held_back(TOPIC, 0) == 0  # the file of 0-2 is not written: nothing committable
    store.tick(assigned)
    assert store.held_back(TOPIC, 0) == 0 and not list(tmp_path.rglob("*.jsonl.gz"))
    store.gate.set()
    store.rolling[0].future.result(10)
    store.tick(assigned)
    assert store.held_back(TOPIC, 0) == 3 and store.take_written() == 3 and store.take_written() == 0
    (path,) = tmp_path.rglob("*.jsonl.gz")
    assert path.name == "0-2.jsonl.gz"
    store.flush()  # a graceful stop writes what is gathered
    assert store.held_back(TOPIC, 0) is None and store.held_records() == 0
    assert sorted(p.name for p in tmp_path.rglob("*.jsonl.gz")) == ["0-2.jsonl.gz", "3-4.jsonl.gz"]
    lines = [json.loads(line) for line in gzip.decompress((path.parent / "3-4.jsonl.gz").read_bytes()).splitlines()]
    assert [line["url"] for line in lines] == ["http://x.example/0/3", "http://x.example/0/4"]
    store.close()


def test_the_store_is_full_at_its_bound_and_rolls_its_largest_partition_early(tmp_path: Path) -> None:
    store = _store(tmp_path, roll_bytes=1000, max_held=500)
    store.gate.set()
    store.write([_record(0, 0, 200), _record(1, 0, 150), _record(1, 1, 150)])
    assert store.room() == 0  # 500 held: full, the sink pauses its partitions
    store.tick({(TOPIC, 0), (TOPIC, 1)})  # nothing rolling: the largest (partition 1, 300) rolls early
    assert [r.key for r in store.rolling] == [(TOPIC, 1)]
    store.rolling[0].future.result(10)
    store.tick({(TOPIC, 0), (TOPIC, 1)})
    assert store.room() == 300 and store.held_back(TOPIC, 1) is None
    assert [p.name for p in tmp_path.rglob("*.jsonl.gz")] == ["0-1.jsonl.gz"]
    store.close()


def test_a_failed_roll_is_reported_and_abandon_rewinds_to_its_first_record(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.gate.set()
    store.write([_record(0, offset) for offset in range(3)])  # 0-2 rolls and is written
    store.rolling[0].future.result(10)
    store.fail = True
    store.write([_record(0, offset) for offset in range(3, 7)])  # 3-5 rolls and fails; 6 gathered
    with pytest.raises(BackendUnavailable, match="disk full.*SINK_URL"):
        for _ in range(100):
            store.tick({(TOPIC, 0)})
            threading.Event().wait(0.05)
    assert store.abandon() == {(TOPIC, 0): 3}  # the written file counts; the failed one is read again
    assert store.held_records() == 0 and store.held_back(TOPIC, 0) is None
    store.close()


def test_a_message_by_reference_counts_the_body_it_names() -> None:
    ref = {"url": "file:///b/x", "sha256": "0" * 64, "size": 6 * 1024 * 1024}
    message = json.dumps({"url": "http://a/", "body": None, "body_ref": ref}).encode()
    assert _ref_size_of_message(message) == 6 * 1024 * 1024
    item = json.dumps({"item": None, "item_ref": {**ref, "size": 7}}).encode()
    assert _ref_size_of_message(item) == 7
    for plain in (b'{"body": "x"}', b"not json", b'"body_ref"', json.dumps({"body_ref": {"size": -5}}).encode()):
        assert _ref_size_of_message(plain) == 0


def test_a_consumer_that_lost_its_group_is_told_so_naming_its_poll_interval() -> None:
    settings = Settings.from_overrides(SINK_MAX_POLL_INTERVAL_MS=6000)
    said = KafkaError("UNKNOWN_MEMBER_ID: Commit failed: Broker: Unknown member")
    assert lost_membership(said) and lost_membership(CommitFailedError("x"))
    text = describe_failure(said, settings, "SINK_MAX_POLL_INTERVAL_MS")
    assert "SINK_MAX_POLL_INTERVAL_MS (6000 ms)" in text and "KAFKA_BOOTSTRAP_SERVERS" not in text
    assert "KAFKA_BOOTSTRAP_SERVERS" in describe_failure(KafkaError("_TRANSPORT: gone"), settings)
