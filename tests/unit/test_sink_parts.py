"""Parts of the sinks that need no store (docs/contract.md §20): URLs, names, rows."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from crawlhive.sink.postgres import page_row, split_url
from crawlhive.sink.store import sink_group, sink_name, source_topic, store_for
from crawlhive.utils.config.errors import SettingsError
from crawlhive.utils.config.settings import Settings


def test_the_table_comes_from_the_url_and_must_be_an_identifier() -> None:
    assert split_url("postgresql://u:p@h:5/db?table=pages&sslmode=require") == (
        "postgresql://u:p@h:5/db?sslmode=require",
        "pages",
    )
    assert split_url("postgres://h/db")[1] == "crawlhive_pages"
    assert split_url("postgresql://h/db?table=archive.pages")[1] == "archive.pages"
    for bad in ("pages;drop table x", "1pages", "a.b.c", 'pa"ges', "x" * 64):
        with pytest.raises(SettingsError, match="table"):
            split_url(f"postgresql://h/db?table={bad}")


def test_names_groups_and_sources() -> None:
    settings = Settings.from_overrides(KAFKA_TOPIC_PREFIX="p")
    url = "postgresql://u:secret@h/db"
    name = sink_name(url)
    assert name.startswith("postgresql-") and len(name) == len("postgresql-") + 8 and "secret" not in name
    assert sink_name("postgresql://u:other@h/db") != name
    assert sink_group(settings, url) == f"p-sink-{name}"
    assert sink_group(settings.copy_with(SINK_GROUP="mine"), url) == "mine"
    assert source_topic(settings, "cleaned") == "p.cleaned"
    assert source_topic(settings, "crawled_firehose") == "p.crawled_firehose"
    assert source_topic(settings, "other.topic") == "other.topic"
    with pytest.raises(SettingsError, match="--to"):
        store_for(settings, "")
    with pytest.raises(SettingsError, match="no sink for scheme 'mongodb'"):
        store_for(settings, "mongodb://h/db")


def test_a_row_keeps_what_postgresql_can_hold() -> None:
    record = {
        "appid": "a",
        "crawlid": "c",
        "url": "http://x/\x00",
        "timestamp": "2026-01-02T03:04:05.000006",
        "status_code": True,
        "title": ["not", "text"],
        "published": "2024-02-30",
        "k\x00": "v\x00",
    }
    row = page_row(record)
    assert row[:3] == ("a", "c", "http://x/\ufffd")
    assert row[3].isoformat() == "2026-01-02T03:04:05.000006+00:00"
    assert row[4] is None and row[6] is None and row[9] is None
    assert json.loads(row[10])["k\ufffd"] == "v\ufffd"
    with pytest.raises(ValueError, match="'crawlid' is not a string"):
        page_row({"appid": "a", "url": "u"})


def test_a_local_archive_is_not_world_readable(tmp_path: Path) -> None:
    """Files a sink writes to a local folder (and the folders it makes) are its owner's and group's
    only, whatever the umask: the archive holds whatever the crawl fetched."""
    from crawlhive.sink.files import FileStore
    from crawlhive.sink.store import SinkRecord

    old = os.umask(0o002)  # a permissive umask: the modes must not depend on it
    try:
        store = FileStore.from_settings(Settings.from_overrides(SINK_ROLL_BYTES=1), f"file://{tmp_path}/archive/")
        store.open()
        value = {"url": "http://a.example/", "text": "a private page"}
        store.write([SinkRecord("demo.cleaned", 0, 7, value, size=len(json.dumps(value)))])
        store.flush()  # the roll is written on the store's roller thread: wait for it
    finally:
        os.umask(old)
    [written] = list((tmp_path / "archive").rglob("*.jsonl.gz"))
    assert written.stat().st_mode & 0o777 == 0o640
    folders = [tmp_path / "archive", *[p for p in (tmp_path / "archive").rglob("*") if p.is_dir()]]
    assert len(folders) >= 3 and {p.stat().st_mode & 0o777 for p in folders} == {0o750}, folders
