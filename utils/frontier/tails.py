"""Tail segments (docs/contract.md §23): where a crawl queue keeps its requests beyond its head.

A **segment** holds up to FRONTIER_SEGMENT_SIZE requests of one crawl queue (queue member and
score, exactly as the queue held them), compressed, as one object of the store FRONTIER_TAIL_URL
(any fsspec URL). Redis keeps one pointer per segment in the queue's tail zset
(:meth:`~crawlhive.utils.backends.keys.Keys.tail_queue`): ``<segment id>:<requests>:<bytes>``
scored by the segment's best score. The object's name derives from the shard and the segment id
only (:meth:`TailStore.path`), so a pointer is all a refill or a stop needs.

The format is ours (``CHTS1``, a count, a CRC-32, then zlib of ``score, length, member`` records)
because a segment is read whole by one process and never queried: Parquet or Arrow would add
schema and footer overhead to objects of a few kilobytes, and zlib is in the standard library.
A segment is written whole or not at all (on a local folder a temporary name and a rename, made
durable by one ``syncfs`` per batch of segments, or an ``fsync`` of the file and its folder; an
object store's put is atomic) and its CRC is checked on read.
"""

from __future__ import annotations

import ctypes
import logging
import os
import secrets
import struct
import sys
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

import fsspec
import redis
from fsspec.implementations.local import LocalFileSystem

from crawlhive.utils.config.errors import CrawlhiveError, SettingsError
from crawlhive.utils.config.log import mask_url

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

MAGIC = b"CHTS1\n"
_HEADER = struct.Struct("<II")  # requests, CRC-32 of the uncompressed records
_RECORD = struct.Struct("<qI")  # score, member length
#: zlib level: 1 costs a fifth of the CPU of the default for ~10 % more bytes (URLs of one domain).
ZLIB_LEVEL = 1
#: Microseconds a pop defers a domain whose crawls there have only tails (a refill is under way).
REFILL_WAIT_US = 200_000
#: Segments per folder of the store (a folder per 1,000 consecutive ids).
IDS_PER_FOLDER = 1000


@dataclass(frozen=True, slots=True)
class TailLimits:
    """When a crawl queue spills to its tail and when its head is refilled (the pop script asks
    for both with these thresholds; the redis-monitors' mover applies them)."""

    enabled: bool = False
    """FRONTIER_TAIL_URL is set: queues have tails."""
    head_size: int = 64
    """FRONTIER_HEAD_SIZE."""
    segment_size: int = 128
    """FRONTIER_SEGMENT_SIZE."""

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        return cls(
            bool(str(settings.FRONTIER_TAIL_URL or "").strip()),
            max(0, settings.FRONTIER_HEAD_SIZE),
            max(1, settings.FRONTIER_SEGMENT_SIZE),
        )

    @property
    def refill_below(self) -> int:
        """A head with fewer requests (and a tail) is refilled."""
        return max(1, self.head_size // 2)

    @property
    def spill_min(self) -> int:
        """Least requests beyond its head that a hot queue spills (so segments are not tiny)."""
        return max(1, min(self.segment_size, max(self.head_size, 1)) // 2)

    @property
    def spill_above(self) -> int:
        """A hot queue with more requests than this is spilled down to its head: a head just refilled
        (under :attr:`refill_below`, plus a segment) is not, so no queue goes back and forth."""
        return max(self.head_size + self.spill_min, self.refill_below + self.segment_size)


class TailError(CrawlhiveError):
    """A segment object is not a segment (truncated, corrupt, another format)."""


def encode_segment(rows: list[tuple[bytes, int]]) -> bytes:
    """The object of a segment holding *rows* (queue member, integer score), in order."""
    parts = []
    for member, score in rows:
        parts.append(_RECORD.pack(score, len(member)))
        parts.append(member)
    body = b"".join(parts)
    return MAGIC + _HEADER.pack(len(rows), zlib.crc32(body)) + zlib.compress(body, ZLIB_LEVEL)


def decode_segment(data: bytes) -> list[tuple[bytes, int]]:
    """The rows of a segment object (:func:`encode_segment`).

    Raises:
        TailError: *data* is not a whole segment.
    """
    head = len(MAGIC) + _HEADER.size
    if not data.startswith(MAGIC) or len(data) < head:
        raise TailError("not a crawlhive tail segment")
    count, crc = _HEADER.unpack_from(data, len(MAGIC))
    try:
        body = zlib.decompress(data[head:])
    except zlib.error as exc:
        raise TailError(f"corrupt tail segment: {exc}") from exc
    if zlib.crc32(body) != crc:
        raise TailError("corrupt tail segment: CRC mismatch")
    rows = []
    offset = 0
    for _ in range(count):
        if offset + _RECORD.size > len(body):
            raise TailError("truncated tail segment")
        score, length = _RECORD.unpack_from(body, offset)
        offset += _RECORD.size
        rows.append((body[offset : offset + length], score))
        offset += length
    if offset != len(body):
        raise TailError("tail segment longer than its count")
    return rows


def tail_member(segment_id: str, requests: int, size: int) -> str:
    """The pointer a tail zset holds for a segment."""
    return f"{segment_id}:{requests}:{size}"


def parse_tail_member(member: str | bytes) -> tuple[str, int, int]:
    """``<segment id>:<requests>:<bytes>`` -> its parts.

    Raises:
        ValueError: not a tail member.
    """
    text = member.decode() if isinstance(member, bytes) else member
    segment_id, requests, size = text.rsplit(":", 2)
    if not segment_id or "/" in segment_id:
        raise ValueError(f"not a tail member: {text!r}")
    return segment_id, int(requests), int(size)


def _write_renamed(path: str, data: bytes, *, sync: bool) -> None:
    """Write *data* to a temporary name beside *path* (synced with *sync*) and rename it to *path*
    (the folder exists; its own sync is the caller's)."""
    temporary = f"{path}.tmp-{secrets.token_hex(4)}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            if sync:
                out.flush()
                os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _find_syncfs() -> Any:
    """libc's ``syncfs`` (Linux), or None. The standard library has ``os.sync`` (every file system
    of the machine) and ``os.fsync`` (one file) but not ``syncfs``, and no package wraps it; one
    ``syncfs`` after a batch of segments costs a fifth of a ``fsync`` per segment here."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function


_SYNCFS = _find_syncfs()


def _syncfs(folder: str) -> None:
    """Flush the file system holding *folder* (data and metadata) to its disk.

    Raises:
        OSError: the flush failed (since Linux 5.8 ``syncfs`` reports write-back errors).
    """
    fd = os.open(folder, os.O_RDONLY)
    try:
        if _SYNCFS(fd) != 0:
            number = ctypes.get_errno()
            raise OSError(number, f"syncfs {folder}: {os.strerror(number)}")
    finally:
        os.close(fd)


class TailStore:
    """The segments of one cluster (REDIS_KEY_PREFIX) under one fsspec URL."""

    def __init__(self, url: str, prefix: str) -> None:
        self.url = url.rstrip("/")
        self.public_url = mask_url(self.url)
        self.fs, root = fsspec.core.url_to_fs(self.url)
        self.local = isinstance(self.fs, LocalFileSystem)
        self.root = f"{root.rstrip('/')}/{prefix}"

    @classmethod
    def from_settings(cls, settings: Settings) -> Self | None:
        """The store of FRONTIER_TAIL_URL, or None when it is empty (queues keep no tails).

        Raises:
            SettingsError: fsspec has no file system for the URL, or its package is missing.
        """
        url = str(settings.FRONTIER_TAIL_URL or "").strip()
        if not url:
            return None
        try:
            return cls(url, settings.REDIS_KEY_PREFIX)
        except (ImportError, ValueError) as exc:
            raise SettingsError(f"FRONTIER_TAIL_URL {mask_url(url)}: {exc}") from exc

    def path(self, shard: int, segment_id: str) -> str:
        """Where segment *segment_id* of *shard* is (``<root>/<prefix>/<shard>/<folder>/<id>.seg``)."""
        number = segment_id.partition(".")[0]
        folder = int(number) // IDS_PER_FOLDER if number.isdigit() else 0
        return f"{self.root}/{shard}/{folder}/{segment_id}.seg"

    def write(self, path: str, data: bytes) -> None:
        """Store *data* at *path* durably (:meth:`write_many` of one object).

        Raises:
            OSError: the store refused the write or cannot be reached.
        """
        self.write_many([(path, data)])

    def write_many(self, objects: list[tuple[str, bytes]]) -> None:
        """Store every ``(path, data)`` of *objects*, durably before this returns. On a local folder
        each is written to a temporary name and renamed, then one ``syncfs`` makes them all durable
        (where there is none, or for one object, each is synced, then each folder); on an object
        store each put is atomic, and fsspec sends them concurrently where its file system can.

        Raises:
            OSError: the store refused a write or cannot be reached (some objects may be written:
                no pointer names them, and :meth:`TailMover.sweep` deletes them).
        """
        if not objects:
            return
        folders = sorted({path.rsplit("/", 1)[0] for path, _ in objects})
        if not self.local:
            for folder in folders:
                self.fs.makedirs(folder, exist_ok=True)
            self.fs.pipe(dict(objects))
            return
        for folder in folders:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        if len(objects) > 1 and _SYNCFS is not None:
            for path, data in objects:
                _write_renamed(path, data, sync=False)
            devices = {os.stat(folder).st_dev: folder for folder in folders}
            for folder in devices.values():  # one sync per file system: every object's data, name, folder
                _syncfs(folder)
            return
        for path, data in objects:
            _write_renamed(path, data, sync=True)
        for folder in folders:
            dir_fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def read(self, path: str) -> bytes:
        """The object at *path*.

        Raises:
            FileNotFoundError: no such segment.
            OSError: the store cannot be reached.
        """
        data = self.read_many([path])[0]
        if data is None:
            raise FileNotFoundError(path)
        return data

    def read_many(self, paths: list[str]) -> list[bytes | None]:
        """The objects at *paths*, in order; None for one that does not exist. fsspec fetches them
        concurrently where its file system can.

        Raises:
            OSError: the store cannot be reached.
        """
        if self.local:
            found: list[bytes | None] = []
            for path in paths:
                try:
                    with open(path, "rb") as handle:
                        found.append(handle.read())
                except FileNotFoundError:
                    found.append(None)
            return found
        got = self.fs.cat(list(paths), on_error="return")
        if not isinstance(got, dict):  # one path: fsspec answers its bytes
            got = {paths[0]: got}
        found = []
        for path in paths:
            if path not in got:  # never taken for "missing": that would drop the segment's requests
                raise OSError(f"{path}: the store's answer does not name it")
            value = got[path]
            if isinstance(value, FileNotFoundError):
                found.append(None)
            elif isinstance(value, BaseException):
                raise OSError(f"{path}: {value}") from value
            else:
                found.append(bytes(value))
        return found

    def delete(self, paths: Iterable[str]) -> None:
        """Remove *paths*; one already gone is fine. An error is logged, not raised: a segment no
        pointer names is never read again (it only takes room until removed by hand)."""
        for path in paths:
            try:
                self.fs.rm_file(path)
            except FileNotFoundError:
                continue
            except OSError as exc:
                logger.warning(
                    "could not delete tail segment %s of FRONTIER_TAIL_URL %s: %s", path, self.public_url, exc
                )


class StoreHealth:
    """Whether the tail store answered its last use, for one of its users (the tail mover, the
    Bloom compactor): **one** WARNING naming FRONTIER_TAIL_URL when it stops answering (saying what
    *waits* meanwhile), one INFO when it answers again.

    Attributes:
        reason: why it did not answer (None while it does).
        errors: failed uses so far.
    """

    def __init__(self, store: TailStore, waits: str) -> None:
        self.store = store
        self.waits = waits
        self.reason: str | None = None
        self.errors = 0

    def down(self, exc: BaseException) -> None:
        """A use failed with *exc*."""
        self.errors += 1
        if self.reason is None:
            logger.warning(
                "frontier tail store FRONTIER_TAIL_URL %s cannot be used (%s): %s until it answers",
                self.store.public_url,
                exc,
                self.waits,
            )
        self.reason = str(exc)

    def up(self) -> bool:
        """A use succeeded; True if the store had not answered before."""
        if self.reason is None:
            return False
        logger.info("frontier tail store FRONTIER_TAIL_URL %s answers again", self.store.public_url)
        self.reason = None
        return True


class Schedule:
    """Something due every *every_s* seconds, first *first_s* after start (a sweep)."""

    def __init__(self, every_s: float, first_s: float = 60.0) -> None:
        self.every_s = every_s
        self._next = time.monotonic() + first_s

    def due(self) -> bool:
        """True (and the next time set) if it is due now."""
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.every_s
        return True

    def sweep_shards(self, shards: int, sweep: Callable[[int], int], down: Callable[[BaseException], None]) -> None:
        """If due, run *sweep* over shards 0 .. *shards* - 1; the store failing stops the round
        (*down* is told: the next is due in *every_s*)."""
        if not self.due():
            return
        for shard in range(shards):
            try:
                sweep(shard)
            except OSError as exc:
                down(exc)
                return


def object_mtime(info: dict[str, Any]) -> float:
    """An fsspec listing entry's modification time (epoch s; local ``mtime``, object stores'
    ``LastModified`` / ``last_modified`` / ``mtime``); 0 when it has none (then it counts as old)."""
    for field_name in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(field_name)
        if value is None:
            continue
        if isinstance(value, int | float):
            return float(value)
        timestamp = getattr(value, "timestamp", None)
        if callable(timestamp):
            return float(timestamp())
    return 0.0


def is_redis_error(exc: BaseException) -> bool:
    """A Redis error, or a lost connection: the loops back off and retry without a traceback."""
    return isinstance(exc, redis.RedisError | ConnectionError | TimeoutError)
