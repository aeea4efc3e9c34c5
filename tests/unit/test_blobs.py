"""The blob store of large pages (docs/contract.md §20.5) on a local folder."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from crawlhive.utils.backends.blobs import BlobError, BlobStore, blob_store_url, public_store_url
from crawlhive.utils.config.settings import Settings


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
    from crawlhive.utils.config.errors import SettingsError

    with pytest.raises(SettingsError, match=r"BLOB_STORE_URL nosuchproto://u:\*\*\*@h/b"):
        BlobStore.from_settings(Settings.from_overrides(BLOB_STORE_URL="nosuchproto://u:secret@h/b"))


@pytest.mark.parametrize(
    ("url", "public"),
    [
        ("s3://AKIAKEY:topsecret@bucket/blobs", "s3://bucket/blobs"),
        ("https://user:topsecret@store.example/blobs?sig=topsecret&se=2030#frag", "https://store.example/blobs"),
        ("az://container/blobs?sas_token=topsecret", "az://container/blobs"),
        ("simplecache::sftp://user:topsecret@host:22/blobs", "simplecache::sftp://host:22/blobs"),
        ("file:///var/lib/crawlhive/blobs", "file:///var/lib/crawlhive/blobs"),
    ],
)
def test_the_public_url_of_a_store_has_no_credentials(url: str, public: str) -> None:
    assert public_store_url(url) == public


def test_a_body_ref_never_carries_the_stores_credentials(tmp_path: Path) -> None:
    """BLOB_STORE_URL's user info and query (an object store's key, a signed URL's signature) stay
    out of every body_ref and every message; a reference written before, with them, is still read."""
    store = BlobStore("memory://writer:topsecret@/crawlhive-test-blobs", ttl_s=60)  # (a query: above)
    body = b"<html>" + b"x" * 5000 + b"</html>"
    ref = store.put(body)
    digest = hashlib.sha256(body).hexdigest()
    assert ref == {"url": f"memory:///crawlhive-test-blobs/{digest}", "sha256": digest, "size": len(body)}
    assert "topsecret" not in json.dumps(ref)
    assert store.get(ref) == body
    old_style = {**ref, "url": f"{store.url}/{digest}"}  # what earlier releases wrote
    assert store.resolve({"body": None, "body_ref": old_style})["body"] == body.decode()
    with pytest.raises(BlobError) as missing:
        store.get({"sha256": "1" * 64})
    assert "topsecret" not in str(missing.value) and "memory:///crawlhive-test-blobs" in str(missing.value)


def test_blobs_and_their_folder_are_their_owners_only(tmp_path: Path) -> None:
    store = BlobStore(f"file://{tmp_path}/blobs", ttl_s=60)
    ref = store.put(b"a private page")
    assert (tmp_path / "blobs").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "blobs" / ref["sha256"]).stat().st_mode & 0o777 == 0o600


def _aged(store: BlobStore, root: Path, data: bytes, age_s: float) -> dict[str, object]:
    ref = store.put(data)
    when = time.time() - age_s
    os.utime(root / str(ref["sha256"]), (when, when))
    return ref


def test_past_blob_store_max_bytes_the_oldest_blobs_are_evicted_and_named_so(tmp_path: Path) -> None:
    store = BlobStore(f"file://{tmp_path}", ttl_s=3600, max_bytes=250)
    oldest = _aged(store, tmp_path, b"1" * 100, 300)
    middle = _aged(store, tmp_path, b"2" * 100, 200)
    assert store.get(oldest) == b"1" * 100  # 200 bytes: under the cap
    newest = store.put(b"3" * 100)  # 300 bytes: the oldest goes
    assert not (tmp_path / str(oldest["sha256"])).exists()
    assert store.get(middle) == b"2" * 100 and store.get(newest) == b"3" * 100
    with pytest.raises(BlobError, match=r"was evicted from BLOB_STORE_URL .* under BLOB_STORE_MAX_BYTES") as evicted:
        store.resolve({"url": "http://x/", "body": None, "body_ref": oldest})
    assert f"blob {oldest['sha256']}" in str(evicted.value)
    with pytest.raises(BlobError, match="no blob"):  # never stored: not called evicted
        store.get({"sha256": "2" * 64})
    # Stored again: readable, no longer reported as evicted; the blob just written is never evicted.
    again = store.put(b"1" * 100)
    assert store.get(again) == b"1" * 100
    assert not (tmp_path / f".evicted-{oldest['sha256']}").exists()
    huge = store.put(b"4" * 400)
    assert store.get(huge) == b"4" * 400
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [huge["sha256"]]


def test_the_sweep_enforces_the_cap_on_what_other_processes_wrote(tmp_path: Path) -> None:
    writer = BlobStore(f"file://{tmp_path}", ttl_s=3600, max_bytes=0)  # another process, no cap of its own
    refs = [_aged(writer, tmp_path, bytes([65 + i]) * 100, 100 - i) for i in range(4)]
    sweeper = BlobStore(f"file://{tmp_path}", ttl_s=3600, max_bytes=250)
    assert sweeper.expire(force=True) == 0  # nothing older than BLOB_TTL ...
    gone = [ref for ref in refs if not (tmp_path / str(ref["sha256"])).exists()]
    assert gone == refs[:2]  # ... but the two oldest past the cap
    assert (tmp_path / f".evicted-{refs[0]['sha256']}").exists()
    with pytest.raises(BlobError, match="evicted"):
        sweeper.get(refs[1])
    # The markers expire with BLOB_TTL.
    past = time.time() - 7200
    for ref in refs[:2]:
        os.utime(tmp_path / f".evicted-{ref['sha256']}", (past, past))
    sweeper.expire(force=True)
    assert not list(tmp_path.glob(".evicted-*"))


def test_blob_store_max_bytes_is_read_from_the_settings(tmp_path: Path) -> None:
    from crawlhive.utils.config.errors import SettingsError

    settings = Settings.from_overrides(CRAWLHIVE_HOME=str(tmp_path), BLOB_STORE_MAX_BYTES=1234)
    assert BlobStore.from_settings(settings).max_bytes == 1234
    with pytest.raises(SettingsError, match="BLOB_STORE_MAX_BYTES -1"):
        BlobStore.from_settings(settings.copy_with(BLOB_STORE_MAX_BYTES=-1))
