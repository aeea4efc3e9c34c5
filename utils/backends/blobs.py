"""Large pages by reference (docs/contract.md §20.5): bodies too large for one Kafka message.

A crawled item whose message would exceed KAFKA_PRODUCER_MAX_REQUEST_SIZE is sent with
``"body": null`` and ``"body_ref": {"url", "sha256", "size"}``; the body (the string the item would
have carried, in UTF-8) is a blob named by its SHA-256 in the blob store, BLOB_STORE_URL: any fsspec
URL, by default the folder ``blobs/`` of CRAWLHIVE_HOME (where ``crawlhive up`` keeps its state, so
every process of one machine agrees without a setting). A blob appears whole or not at all
(written under a temporary name, then renamed; an object store's put is atomic).

A spider's own item (§11) too large for one message goes the same way: its envelope carries
``"item": null`` and ``"item_ref"``, and the blob is the item's JSON.

Readers (the cleaner, the sinks, ``crawlhive dump``) call :meth:`BlobStore.resolve`: the blob is
looked up in *their own* store by its hash, never at the URL a record names (a record could name
any file), and its hash and size are checked. The ``url`` of a ``body_ref`` is for people only and
never carries a secret: the store's URL without its user info (``user:password@``), query
(``?sig=…``, ``?sas_token=…``) and fragment (:func:`public_store_url`), so a crawled item never
hands BLOB_STORE_URL's credentials to whoever reads the firehose; references written before, which
may carry them, are still read (by their hash, as ever).

BLOB_STORE_MAX_BYTES caps the store: when a write takes it past the cap, the oldest blobs (by
modification time; a blob written again counts as new) are removed until it fits, and each removed
blob leaves a small marker ``.evicted-<sha256>`` (its time and the cap), so that a reader of a
reference to it reports what happened ("evicted … to keep the store under BLOB_STORE_MAX_BYTES")
rather than a bare "no blob". A writer lists the store when its own count of what it wrote since
its last listing could take the store past the cap, or a minute after its last listing (other
processes write too); every expiry sweep enforces the cap as well. Markers expire with BLOB_TTL.
The eviction is written here: fsspec's caching file systems bound only their own local copies, and
an object store's lifecycle rules expire by age, never by the size of a prefix.

Blobs older than BLOB_TTL are removed by :meth:`BlobStore.expire`, which every long-running process
runs on a thread of its own at start and then at most once an hour
(:meth:`BlobStore.expire_in_background`: the crawlers that write blobs, and the kafka-monitor,
redis-monitor, cleaner and sink loops, so a deployment sweeps whichever of them it runs; several
sweeping one store is harmless). BLOB_TTL 0 turns the sweep off, for an
object store better served by a lifecycle rule of the same age (docs/operations.md).

fsspec is the one library that speaks to local folders and every object store by URL.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import threading
import time
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

import fsspec
from fsspec.implementations.local import LocalFileSystem

from crawlhive.utils.config.errors import CrawlhiveError, SettingsError
from crawlhive.utils.config.log import mask_url

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
#: Seconds between two sweeps of expired blobs by one process.
EXPIRE_EVERY_S = 3600.0
#: Seconds after which a writer lists the store again to enforce BLOB_STORE_MAX_BYTES, even when its
#: own writes alone could not have taken the store past the cap (other processes write too).
CAP_CHECK_EVERY_S = 60.0
#: Share of BLOB_STORE_MAX_BYTES an eviction brings the store down to.
CAP_LOW_WATER = 0.9
#: Name prefix of the marker an evicted blob leaves behind (``.evicted-<sha256>``).
EVICTED = ".evicted-"
#: Permissions of a blob and of the store's folder on a local file system: its owner's only.
FILE_MODE = 0o600
DIR_MODE = 0o700


class BlobError(CrawlhiveError):
    """A record's ``body_ref`` cannot be resolved (malformed, missing blob, wrong hash)."""


def public_store_url(url: str) -> str:
    """*url* without what may be a secret: the user info of each part of an fsspec URL chain
    (``simplecache::s3://key:secret@bucket``), its query and its fragment. What a ``body_ref``
    carries and what messages name; a URL that does not parse is left out (``<BLOB_STORE_URL>``)."""
    parts = []
    for part in url.split("::"):
        try:
            split = urlsplit(part)
            host = split.netloc.rpartition("@")[2]
            parts.append(f"{split.scheme}://{host}{split.path}" if split.scheme else split.path)
        except ValueError:
            return "<BLOB_STORE_URL>"
    return "::".join(parts)


def blob_store_url(settings: Settings) -> str:
    """BLOB_STORE_URL, or ``file://<CRAWLHIVE_HOME>/blobs`` when it is empty (no trailing slash)."""
    url = str(settings.BLOB_STORE_URL or "")
    if not url:
        url = f"file://{(settings.home / 'blobs').resolve()}"
    return url.rstrip("/")


class BlobStore:
    """Blobs named by their SHA-256 under one fsspec URL (see the module docstring)."""

    def __init__(self, url: str, ttl_s: float, max_bytes: int = 0) -> None:
        self.url = url.rstrip("/")
        #: The store's URL without secrets (:func:`public_store_url`): in references and messages.
        self.public_url = public_store_url(self.url)
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        self.fs, self.root = fsspec.core.url_to_fs(self.url)
        self.local = isinstance(self.fs, LocalFileSystem)
        self._next_sweep = 0.0
        self._sweeper: threading.Thread | None = None
        self._cap_lock = threading.Lock()
        self._next_cap_check = 0.0
        #: Bytes this store object wrote since it last listed the store, plus what the listing found.
        self._estimated_bytes = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """The store of BLOB_STORE_URL.

        Raises:
            SettingsError: fsspec has no file system for the URL, or its package is missing.
        """
        url = blob_store_url(settings)
        if settings.BLOB_STORE_MAX_BYTES < 0:
            raise SettingsError(f"BLOB_STORE_MAX_BYTES {settings.BLOB_STORE_MAX_BYTES}: expected 0 (no cap) or more")
        try:
            return cls(url, settings.BLOB_TTL, settings.BLOB_STORE_MAX_BYTES)
        except (ImportError, ValueError) as exc:
            raise SettingsError(f"BLOB_STORE_URL {mask_url(url)}: {exc}") from exc

    def path(self, sha256: str) -> str:
        return f"{self.root}/{sha256}"

    def put(self, data: bytes) -> dict[str, Any]:
        """Store *data* (unless a blob of the same hash is there) and return its ``body_ref``.

        Raises:
            OSError: the store refused the write (full disk, no permission, unreachable).
        """
        digest = hashlib.sha256(data).hexdigest()
        final = self.path(digest)
        if not self.fs.exists(final):
            if self.local:  # the folder and every blob its owner's only (a page may be private)
                os.makedirs(self.root, mode=DIR_MODE, exist_ok=True)
            else:
                self.fs.makedirs(self.root, exist_ok=True)
            temporary = f"{self.root}/.tmp-{digest}-{secrets.token_hex(4)}"
            if self.local:  # created without group or world bits, before a byte is written
                os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
            with self.fs.open(temporary, "wb") as out:
                out.write(data)
            self.fs.mv(temporary, final)
            if self.fs.exists(self.path(EVICTED + digest)):
                self.fs.rm(self.path(EVICTED + digest))  # stored again: no longer evicted
        else:
            self.fs.touch(final, truncate=False)  # a new reference: its age starts again
        self._after_write(digest, len(data))
        return {"url": f"{self.public_url}/{digest}", "sha256": digest, "size": len(data)}

    def _after_write(self, digest: str, size: int) -> None:
        """Enforce BLOB_STORE_MAX_BYTES after a write of *size* bytes when this process's count
        says the store may be past it, or CAP_CHECK_EVERY_S after the last check (never evicting
        the blob just written)."""
        if self.max_bytes <= 0:
            return
        with self._cap_lock:
            self._estimated_bytes += size
            due = self._estimated_bytes > self.max_bytes or time.monotonic() >= self._next_cap_check
        if due:
            try:
                self.enforce_cap(keep=digest)
            except OSError:  # the blob is stored: the next write or sweep tries the cap again
                logger.warning("could not enforce BLOB_STORE_MAX_BYTES on %s", self.public_url, exc_info=True)

    def enforce_cap(self, keep: str | None = None) -> int:
        """Remove the oldest blobs until the store holds at most BLOB_STORE_MAX_BYTES (never
        *keep*, the blob just written), leaving an ``.evicted-<sha256>`` marker for each; returns
        how many. A blob another process removed first is skipped.

        Raises:
            OSError: the store could not be listed (a writer's caller logs it; the sweep logs it).
        """
        if self.max_bytes <= 0:
            return 0
        with self._cap_lock:
            self._next_cap_check = time.monotonic() + CAP_CHECK_EVERY_S
            entries = self.fs.ls(self.root, detail=True) if self.fs.exists(self.root) else []
            blobs = []
            for entry in entries:
                name = str(entry["name"]).rsplit("/", 1)[-1]
                if _SHA256.match(name):
                    blobs.append((_modified(entry) or 0.0, name, int(entry.get("size") or 0), entry["name"]))
            total = sum(size for _, _, size, _ in blobs)
            evicted = 0
            # Down to a low-water mark, not to the cap: a store kept just under it would be
            # listed again at every write (a listing is linear in the store's size).
            target = self.max_bytes if total <= self.max_bytes else int(self.max_bytes * CAP_LOW_WATER)
            for _, name, size, path in sorted(blobs):
                if total <= target:
                    break
                if name == keep:
                    continue
                try:
                    self.fs.rm(path)
                except FileNotFoundError:
                    total -= size  # another process evicted or expired it first
                    continue
                marker = {"evicted_at": time.time(), "max_bytes": self.max_bytes, "size": size}
                with self.fs.open(self.path(EVICTED + name), "wb") as out:
                    out.write(json.dumps(marker).encode())
                total -= size
                evicted += 1
            self._estimated_bytes = total
        if evicted:
            logger.info(
                "evicted the %d oldest blobs from %s to keep it under BLOB_STORE_MAX_BYTES (%d bytes)",
                evicted,
                self.public_url,
                self.max_bytes,
            )
        return evicted

    def get(self, ref: Any) -> bytes:
        """The bytes of the blob *ref* names, checked against its hash and size.

        Raises:
            BlobError: *ref* is malformed, or its blob is missing or corrupt in this store.
        """
        if not isinstance(ref, dict) or not isinstance(ref.get("sha256"), str) or not _SHA256.match(ref["sha256"]):
            raise BlobError("body_ref: expected an object with a sha256 of 64 lowercase hex digits")
        digest = ref["sha256"]
        try:
            with self.fs.open(self.path(digest), "rb") as blob:
                data: bytes = blob.read()
        except FileNotFoundError as exc:
            evicted = self._eviction(digest)
            if evicted is not None:
                raise BlobError(
                    f"body_ref: blob {digest} was evicted from BLOB_STORE_URL {self.public_url} at {evicted} to keep "
                    "the store under BLOB_STORE_MAX_BYTES (the oldest blobs go first; raise it, or read the "
                    "firehose sooner)"
                ) from exc
            raise BlobError(
                f"body_ref: no blob {digest} in BLOB_STORE_URL {self.public_url} (expired after BLOB_TTL, or a "
                "store that is not shared by every machine and container)"
            ) from exc
        if hashlib.sha256(data).hexdigest() != digest or ref.get("size", len(data)) != len(data):
            raise BlobError(f"body_ref: blob {digest} in {self.public_url} does not match its hash or size")
        return data

    def _eviction(self, digest: str) -> str | None:
        """When the blob *digest* was evicted (ISO 8601, UTC), if its marker says it was."""
        try:
            with self.fs.open(self.path(EVICTED + digest), "rb") as marker:
                when = float(json.loads(marker.read())["evicted_at"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))

    def resolve(self, item: Any) -> Any:
        """*item* with the body its ``body_ref`` names in ``body``, or a spider item's envelope
        (§11) with the item its ``item_ref`` names in ``item`` (a new dict), or *item* itself when
        it carries them.

        Raises:
            BlobError: see :meth:`get`; or the blob of an ``item_ref`` is not JSON.
        """
        if not isinstance(item, dict):
            return item
        if item.get("body") is None and "body_ref" in item:
            return {**item, "body": self.get(item["body_ref"]).decode("utf-8", errors="replace")}
        if item.get("item") is None and "item_ref" in item:
            data = self.get(item["item_ref"])
            try:
                return {**item, "item": json.loads(data)}
            except ValueError as exc:
                raise BlobError(f"item_ref: blob {item['item_ref']['sha256']} is not JSON ({exc})") from exc
        return item

    def expire_in_background(self) -> threading.Thread | None:
        """Start :meth:`expire` on a daemon thread if a sweep is due and none runs (cheap to call
        on every iteration of a loop); the thread, or None."""
        if self.ttl_s <= 0 or time.time() < self._next_sweep:
            return None
        if self._sweeper is not None and self._sweeper.is_alive():
            return None
        self._next_sweep = time.time() + EXPIRE_EVERY_S
        self._sweeper = threading.Thread(target=self.expire, kwargs={"force": True}, name="crawlhive-blob-expiry")
        self._sweeper.daemon = True
        self._sweeper.start()
        return self._sweeper

    def expire(self, now: float | None = None, force: bool = False) -> int:
        """Remove blobs older than BLOB_TTL (at most once per EXPIRE_EVERY_S unless *force*; never
        with BLOB_TTL 0); returns how many. Failures are logged, never raised (the next sweep tries
        again); a blob another process removed first is skipped."""
        now = time.time() if now is None else now
        if self.ttl_s <= 0 or (not force and now < self._next_sweep):
            return 0
        self._next_sweep = now + EXPIRE_EVERY_S
        removed = 0
        try:
            entries = self.fs.ls(self.root, detail=True) if self.fs.exists(self.root) else []
            for entry in entries:
                name = str(entry["name"]).rsplit("/", 1)[-1]
                if not (_SHA256.match(name) or name.startswith((".tmp-", EVICTED))):
                    continue
                modified = _modified(entry)
                if modified is not None and now - modified > self.ttl_s:
                    try:
                        self.fs.rm(entry["name"])
                    except FileNotFoundError:
                        continue  # another process's sweep removed it first
                    removed += 1
        except OSError:
            logger.warning("could not remove expired blobs from BLOB_STORE_URL %s", self.public_url, exc_info=True)
        if removed:
            logger.info("removed %d blobs older than BLOB_TTL (%.0f s) from %s", removed, self.ttl_s, self.public_url)
        try:
            self.enforce_cap()
        except OSError:
            logger.warning("could not enforce BLOB_STORE_MAX_BYTES on %s", self.public_url, exc_info=True)
        return removed


def _modified(entry: dict[str, Any]) -> float | None:
    """An fsspec listing entry's modification time in seconds (local ``mtime``, object stores'
    ``LastModified`` / ``mtime`` datetimes)."""
    value = entry.get("mtime", entry.get("LastModified", entry.get("updated")))
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    timestamp = getattr(value, "timestamp", None)
    return float(timestamp()) if callable(timestamp) else None
