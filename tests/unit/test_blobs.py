"""The blob store of large pages (docs/contract.md §20.5) on a local folder."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from crawlhive.utils.blobs import BlobError, BlobStore, blob_store_url
from crawlhive.utils.settings import Settings


def test_a_body_by_reference_is_read_back_from_the_readers_own_store(tmp_path: Path) -> None:
    store = BlobStore(f"file://{tmp_path}/blobs/", ttl_s=60)
    body = "é" * 1000 + "<html>big</html>"
    ref = store.put(body.encode())
    digest = hashlib.sha256(body.encode()).hexdigest()
    assert ref == {"url": f"file://{tmp_path}/blobs/{digest}", "sha256": digest, "size": len(body.encode())}
    assert (tmp_path / "blobs" / digest).read_bytes() == body.encode()
    assert [p.name for p in (tmp_path / "blobs").iterdir()] == [digest]  # no temporary file left
    assert store.put(body.encode()) == ref  # the same body again: the same blob
    item = {"url": "http://x/", "body": None, "body_ref": ref}
    assert store.resolve(item) == {**item, "body": body}
    assert store.resolve({"body": "inline", "body_ref": ref})["body"] == "inline"
    # The URL a record names is never opened: the blob is looked up by its hash, here.
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / digest).write_bytes(b"secret")
    assert store.resolve({"body": None, "body_ref": {**ref, "url": f"file://{other}/{digest}"}})["body"] == body
    with pytest.raises(BlobError, match="64 lowercase hex"):
        store.resolve({"body": None, "body_ref": {"sha256": "../../etc/passwd"}})
    with pytest.raises(BlobError, match="no blob"):
        store.resolve({"body": None, "body_ref": {"sha256": "0" * 64}})
    (tmp_path / "blobs" / digest).write_bytes(b"tampered")
    with pytest.raises(BlobError, match="does not match"):
        store.get(ref)


def test_blobs_older_than_blob_ttl_are_removed(tmp_path: Path) -> None:
    store = BlobStore(f"file://{tmp_path}", ttl_s=100)
    old, new = store.put(b"old"), store.put(b"new")
    (tmp_path / "unrelated.txt").write_text("kept")
    past = time.time() - 1000
    os.utime(tmp_path / old["sha256"], (past, past))
    os.utime(tmp_path / "unrelated.txt", (past, past))
    assert store.expire() == 1
    assert not (tmp_path / old["sha256"]).exists() and (tmp_path / new["sha256"]).exists()
    assert (tmp_path / "unrelated.txt").exists()
    os.utime(tmp_path / new["sha256"], (past, past))
    assert store.expire() == 0  # at most once an hour
    assert store.expire(force=True) == 1


def test_the_default_store_is_a_folder_of_crawlhive_home(tmp_path: Path) -> None:
    assert blob_store_url(Settings.from_overrides(CRAWLHIVE_HOME=str(tmp_path))) == f"file://{tmp_path}/blobs"
    assert blob_store_url(Settings.from_overrides(BLOB_STORE_URL="s3://b/p/")) == "s3://b/p"


def test_the_background_sweep_runs_when_due_and_blob_ttl_0_keeps_everything(tmp_path: Path) -> None:
    store = BlobStore(f"file://{tmp_path}", ttl_s=100)
    old = store.put(b"old")
    past = time.time() - 1000
    os.utime(tmp_path / old["sha256"], (past, past))
    sweep = store.expire_in_background()
    assert sweep is not None
    sweep.join(30)
    assert not (tmp_path / old["sha256"]).exists()
    assert store.expire_in_background() is None  # the next one in an hour
    keep = BlobStore(f"file://{tmp_path}", ttl_s=0)
    again = keep.put(b"old")
    os.utime(tmp_path / again["sha256"], (past, past))
    assert keep.expire_in_background() is None and keep.expire(force=True) == 0
    assert (tmp_path / again["sha256"]).exists()


def test_a_store_fsspec_cannot_open_names_blob_store_url() -> None:
    from crawlhive.utils.errors import SettingsError

    with pytest.raises(SettingsError, match=r"BLOB_STORE_URL nosuchproto://u:\*\*\*@h/b"):
        BlobStore.from_settings(Settings.from_overrides(BLOB_STORE_URL="nosuchproto://u:secret@h/b"))
