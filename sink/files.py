"""The files sink (docs/contract.md §20.3): gzip JSON Lines or Parquet through fsspec.

``file:///dir/`` or any fsspec URL (``s3://bucket/prefix/`` with ``s3fs`` installed, ``gs://`` with
``gcsfs``, …), with ``?format=jsonl`` (the default: one JSON record a line, gzip) or
``?format=parquet`` (the fixed schema :func:`parquet_schema`, zstd; pyarrow, the optional extra
``crawlhive[parquet]``, imported only when a sink asks for Parquet: :data:`PARQUET_MISSING`).
Records gather per partition and a file is rolled when their bytes reach SINK_ROLL_BYTES (64 MiB)
or its first record is SINK_ROLL_SECONDS old, named ``<topic>/<partition>/<first offset>-<last
offset>.<ext>``. A record sent by reference (``body_ref``) counts the body it holds, not its small message.

**Rolls never block the poll loop.** A file is encoded and written on the store's roller thread,
one file at a time in the order rolled, while the sink goes on polling (a roll of a large WARC
file takes seconds; done on the polling thread it outlasted the group's poll interval, the sink was
evicted and wrote the same files again forever). The records of a file being rolled stay held
(:meth:`FileStore.held_back`) until the file is complete; :meth:`FileStore.tick` collects finished
rolls. What the store holds (gathering and rolling) is bounded by SINK_MAX_HELD_BYTES: past it
:meth:`FileStore.room` is 0 and the sink pauses its partitions, and the largest partition is rolled
early if nothing is rolling.

A file appears complete or not at all: a local file is written under a temporary name, flushed to
disk (fsync) and renamed; elsewhere it is written under a temporary name and moved (an object
store's put is atomic). Only then does the sink commit the offsets it holds: a sink killed before
that leaves the records to the next one. That one reads the names of the partition's files when it
first gets a record of it (:meth:`FileStore.written_ranges`) and skips the records a complete file
already holds (duplicates), so a page is in one file only even when the two processes rolled at
different offsets (a roll by time cuts where the clock says). A graceful stop rolls what is gathered
(:meth:`FileStore.flush`) and commits it.
A local file is created readable by its owner and group only (FILE_MODE), its folders likewise
(DIR_MODE): pages crawled behind a login are no business of the machine's other users.
"""

from __future__ import annotations

import bisect
import gzip
import io
import json
import logging
import os
import re
import secrets
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import parse_qsl, urlencode, urlsplit

import fsspec

from crawlhive.sink.fields import parse_date, parse_time, text_or_none
from crawlhive.sink.store import SinkRecord, Store, WriteResult
from crawlhive.utils.config.errors import BackendUnavailable, MissingExtra, SettingsError
from crawlhive.utils.config.log import mask_url

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

#: Permissions of a local file a sink writes (the page archive) and of the folders it makes.
FILE_MODE = 0o640
DIR_MODE = 0o750

#: SINK_ROLL_BYTES when it is 0, for JSON Lines and Parquet.
DEFAULT_ROLL_BYTES = 64 * 1024 * 1024
FORMATS = {"jsonl": "jsonl.gz", "parquet": "parquet"}

#: What ``?format=parquet`` says where pyarrow is not installed (``make demo`` leaves it out: 170 MB).
PARQUET_MISSING = (
    "SINK_URL (--to): format=parquet needs pyarrow, the optional extra crawlhive[parquet], and it does not "
    "import here ({error}): install it with `make parquet` (in crawlhive's clone) or "
    "`pip install 'crawlhive[parquet]'`, or use format=jsonl"
)


def pyarrow_modules() -> tuple[ModuleType, ModuleType]:
    """``(pyarrow, pyarrow.parquet)``, imported on first use: the extra ``crawlhive[parquet]``.

    Raises:
        MissingExtra: pyarrow is not installed (or does not import); the message names the extra.
    """
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:
        raise MissingExtra(PARQUET_MISSING.format(error=" ".join(str(exc).split())[:200])) from exc
    return pyarrow, pyarrow.parquet


@cache
def parquet_schema() -> Any:
    """The Parquet schema (fixed; docs/contract.md §20.3): where the record came from, the columns of
    the PostgreSQL sink, and the whole record as JSON text (a ``pyarrow.Schema``).

    Raises:
        MissingExtra: pyarrow is not installed.
    """
    pa, _ = pyarrow_modules()
    return pa.schema(
        [
            pa.field("topic", pa.string(), nullable=False),
            pa.field("partition", pa.int32(), nullable=False),
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("appid", pa.string()),
            pa.field("crawlid", pa.string()),
            pa.field("url", pa.string()),
            pa.field("fetched_at", pa.timestamp("us", tz="UTC")),
            pa.field("status_code", pa.int32()),
            pa.field("content_hash", pa.string()),
            pa.field("title", pa.string()),
            pa.field("text", pa.string()),
            pa.field("language", pa.string()),
            pa.field("published", pa.date32()),
            pa.field("record", pa.string(), nullable=False),
        ]
    )


INT32 = 2**31


@dataclass
class Pending:
    """The records of one partition gathered for the next file."""

    first: int
    last: int = -1
    records: list[SinkRecord] = field(default_factory=list)
    size: int = 0
    started: float = field(default_factory=time.monotonic)


@dataclass
class Rolling:
    """A file being written on the roller thread: its partition, records and the write's future."""

    key: tuple[str, int]
    pending: Pending
    future: Future[str]


def split_url(url: str) -> tuple[str, str]:
    """``(fsspec URL without format=, format)``.

    Raises:
        SettingsError: an unknown format.
        MissingExtra: format=parquet without pyarrow installed (checked here, before a sink starts).
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    fmt = next((v for k, v in query if k == "format"), "jsonl")
    if fmt not in FORMATS:
        raise SettingsError(f"SINK_URL (--to): format {fmt[:40]!r}: expected jsonl or parquet")
    if fmt == "parquet":
        pyarrow_modules()
    rest = urlencode([(k, v) for k, v in query if k != "format"])
    base = url.partition("?")[0].partition("#")[0].rstrip("/")  # not urlunsplit: it drops '//' of warc:///
    return (f"{base}?{rest}" if rest else base), fmt


def parquet_row(record: SinkRecord) -> dict[str, Any]:
    """One row of :func:`parquet_schema`."""
    value = record.value
    status = value.get("status_code")
    if not isinstance(status, int) or isinstance(status, bool) or not -INT32 < status < INT32:
        status = None
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        **{name: text_or_none(value.get(name)) for name in ("appid", "crawlid", "url")},
        "fetched_at": parse_time(value.get("crawled_at") or value.get("timestamp")),
        "status_code": status,
        **{name: text_or_none(value.get(name)) for name in ("content_hash", "title", "text", "language")},
        "published": parse_date(value.get("published")),
        "record": _json(record).decode("utf-8", "replace"),
    }


def _json(record: SinkRecord) -> bytes:
    return record.raw if record.raw is not None else json.dumps(record.value, ensure_ascii=False).encode()


class FileStore(Store):
    """Offset-named files under an fsspec URL (see the module docstring)."""

    kind = "file"

    def __init__(
        self, url: str, base: str, fmt: str, roll_bytes: int, roll_seconds: float, max_held_bytes: int = 0
    ) -> None:
        self.url = url
        self.format = fmt
        self.ext = FORMATS[fmt]
        self.roll_bytes = roll_bytes or DEFAULT_ROLL_BYTES
        self.roll_seconds = roll_seconds
        #: Bytes gathered and rolling at most (:meth:`room`; 0: four rolls' worth).
        self.max_held_bytes = max_held_bytes or 4 * self.roll_bytes
        self.fs, self.root = fsspec.core.url_to_fs(base)
        self.local = "file" in _protocols(self.fs)
        self.pending: dict[tuple[str, int], Pending] = {}
        #: Files handed to the roller thread, in the order rolled (it writes them in that order).
        self.rolling: deque[Rolling] = deque()
        #: Per partition, the offset after the last record of its last file.
        self.done: dict[tuple[str, int], int] = {}
        #: Per partition, the offset ranges of the complete files found in the store when it sent
        #: its first record here (merged, sorted): their records are not written again.
        self.existing: dict[tuple[str, int], tuple[list[int], list[int]]] = {}
        self._executor: ThreadPoolExecutor | None = None
        #: Records of the files completed since :meth:`take_written`.
        self._written = 0

    @classmethod
    def from_settings(cls, settings: Settings, url: str) -> Self:
        base, fmt = split_url(url)
        check_roll_settings(settings)
        return cls(url, base, fmt, settings.SINK_ROLL_BYTES, settings.SINK_ROLL_SECONDS, settings.SINK_MAX_HELD_BYTES)

    def _unavailable(self, exc: BaseException) -> BackendUnavailable:
        return BackendUnavailable(
            f"cannot write files ({type(exc).__name__}: {' '.join(str(exc).split())[:300]}); "
            f"check SINK_URL (--to) {mask_url(self.url)}"
        )

    def open(self) -> None:
        try:
            if self.local:
                _makedirs(self.root)
            else:
                self.fs.makedirs(self.root, exist_ok=True)
        except OSError as exc:
            raise self._unavailable(exc) from exc

    @property
    def held_bytes(self) -> int:
        """Bytes of the records gathered and rolling."""
        return sum(p.size for p in self.pending.values()) + sum(r.pending.size for r in self.rolling)

    def held_records(self) -> int:
        return sum(len(p.records) for p in self.pending.values()) + sum(len(r.pending.records) for r in self.rolling)

    def take_written(self) -> int:
        done, self._written = self._written, 0
        return done

    def room(self) -> int:
        """Bytes the store may still take before it holds SINK_MAX_HELD_BYTES."""
        return max(0, self.max_held_bytes - self.held_bytes)

    def write(self, records: list[SinkRecord]) -> WriteResult:
        """Gather *records*; roll each partition's file that reaches SINK_ROLL_BYTES (on the roller
        thread: this returns at once); records a complete file already holds are duplicates.

        Raises:
            BackendUnavailable: the partition's files could not be listed.
        """
        duplicates = 0
        for record in records:
            key = (record.topic, record.partition)
            if self._in_a_file(key, record.offset):
                duplicates += 1
                continue
            pending = self.pending.get(key)
            if pending is None:
                pending = self.pending[key] = Pending(first=record.offset)
            pending.records.append(record)
            pending.last = record.offset
            pending.size += record.size
            if pending.size >= self.roll_bytes:
                self._roll(key)
        return WriteResult(buffered=len(records) - duplicates, duplicates=duplicates)

    def _in_a_file(self, key: tuple[str, int], offset: int) -> bool:
        ranges = self.existing.get(key)
        if ranges is None:
            try:
                ranges = self.existing[key] = _merged(self.written_ranges(key))
            except OSError as exc:
                raise self._unavailable(exc) from exc
        firsts, lasts = ranges
        at = bisect.bisect_right(firsts, offset) - 1
        return at >= 0 and offset <= lasts[at]

    def written_ranges(self, key: tuple[str, int]) -> list[tuple[int, int]]:
        """The (first, last) offsets of *key*'s complete files in the store, read from their names
        (a temporary file starts with a dot and is not one)."""
        topic, partition = key
        folder = f"{self.root}/{topic}/{partition}"
        try:
            names = self.fs.ls(folder, detail=False)
        except FileNotFoundError:
            return []
        pattern = re.compile(r"(\d+)-(\d+)\." + re.escape(self.ext) + "$")
        ranges = []
        for name in names:
            base = str(name).rstrip("/").rsplit("/", 1)[-1]
            found = None if base.startswith(".") else pattern.search(base)
            if found:
                ranges.append((int(found[1]), int(found[2])))
        return ranges

    def held_back(self, topic: str, partition: int) -> int | None:
        key = (topic, partition)
        for rolling in self.rolling:  # in the order rolled: the partition's first is its oldest
            if rolling.key == key:
                return rolling.pending.first
        pending = self.pending.get(key)
        return pending.first if pending is not None else None

    def tick(self, assigned: set[tuple[str, int]]) -> None:
        """Collect finished rolls; forget partitions no longer *assigned*; roll files that are
        SINK_ROLL_SECONDS old; past SINK_MAX_HELD_BYTES with nothing rolling, roll the largest.

        Raises:
            BackendUnavailable: a roll failed (its records stay held; the sink rewinds).
        """
        self._collect(assigned)
        now = time.monotonic()
        for key in list(self.pending):
            if key not in assigned:
                del self.pending[key]  # the partition's next owner gathers these again
                self.done.pop(key, None)
            elif now - self.pending[key].started >= self.roll_seconds:
                self._roll(key)
        for key in [k for k in self.existing if k not in assigned]:
            del self.existing[key]  # listed again if it comes back: another sink wrote meanwhile
        if self.pending and not self.rolling and not self.room():
            self._roll(max(self.pending, key=lambda k: self.pending[k].size))

    def _collect(self, assigned: set[tuple[str, int]] | None = None) -> None:
        """Take the finished rolls off the front of :attr:`rolling`, in order.

        Raises:
            BackendUnavailable: a roll failed.
        """
        while self.rolling and self.rolling[0].future.done():
            rolling = self.rolling[0]
            exc = rolling.future.exception()
            if exc is not None:
                if isinstance(exc, BackendUnavailable):
                    raise exc
                raise self._unavailable(exc) from exc
            self.rolling.popleft()
            self._written += len(rolling.pending.records)
            if assigned is None or rolling.key in assigned:
                self.done[rolling.key] = rolling.pending.last + 1
            logger.debug("wrote %s", rolling.future.result())

    def flush(self) -> None:
        """Roll every partition's gathered records and wait for every roll (a graceful stop).

        Raises:
            BackendUnavailable: a roll failed.
        """
        for key in list(self.pending):
            self._roll(key)
        wait_futures([r.future for r in self.rolling])
        self._collect()

    def abandon(self) -> dict[tuple[str, int], int]:
        """Per partition, the first offset not in a file yet (what was gathered or is rolling is
        forgotten; rolls in progress are waited for, and those that completed count as done)."""
        wait_futures([r.future for r in self.rolling])
        firsts: dict[tuple[str, int], int] = dict(self.done)
        failed: set[tuple[str, int]] = set()
        for rolling in self.rolling:
            key = rolling.key
            if key in failed:
                continue
            if rolling.future.exception() is None:
                firsts[key] = rolling.pending.last + 1
            else:
                firsts[key] = rolling.pending.first
                failed.add(key)
        for key, pending in self.pending.items():
            if key not in failed:
                firsts[key] = pending.first
        self.rolling.clear()
        self.pending.clear()
        self.done = dict(firsts)
        return firsts

    def close(self) -> None:
        """Forget what is gathered (not committed: the group delivers these records again); wait
        for a roll in progress to end."""
        self.pending.clear()
        self.existing.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self.rolling.clear()

    def name_of(self, key: tuple[str, int], pending: Pending) -> str:
        topic, partition = key
        return f"{self.root}/{topic}/{partition}/{pending.first}-{pending.last}.{self.ext}"

    def _roll(self, key: tuple[str, int]) -> None:
        """Hand *key*'s gathered records to the roller thread (they stay held until written)."""
        pending = self.pending.pop(key)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crawlhive-sink-roll")
        future = self._executor.submit(self._write_file, key, pending)
        self.rolling.append(Rolling(key, pending, future))

    def _write_file(self, key: tuple[str, int], pending: Pending) -> str:
        """Encode and write the file of *pending* (on the roller thread); its name.

        Raises:
            BackendUnavailable: the write failed.
        """
        final = self.name_of(key, pending)
        try:
            for name, data in self._files(final, pending.records):
                self._put(name, data)
        except OSError as exc:
            raise self._unavailable(exc) from exc
        return final

    def _files(self, final: str, records: list[SinkRecord]) -> list[tuple[str, bytes]]:
        """The files one roll writes, in order (the last one is *final*)."""
        return [(final, self._encode(records))]

    def _encode(self, records: list[SinkRecord]) -> bytes:
        if self.format == "jsonl":
            lines = b"".join(_json(r) + b"\n" for r in records)
            return gzip.compress(lines, compresslevel=6, mtime=0)  # the same records, the same bytes
        pa, pq = pyarrow_modules()
        table = pa.Table.from_pylist([parquet_row(r) for r in records], schema=parquet_schema())
        out = io.BytesIO()
        pq.write_table(table, out, compression="zstd")
        return out.getvalue()

    def _put(self, final: str, data: bytes) -> None:
        folder = final.rsplit("/", 1)[0]
        temporary = f"{folder}/.{final.rsplit('/', 1)[1]}.tmp-{secrets.token_hex(4)}"
        if self.local:  # durable before the rename, and the rename durable before the commit
            _makedirs(folder)
            with os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE), "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, final)
            fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            return
        self.fs.makedirs(folder, exist_ok=True)
        self.fs.pipe_file(temporary, data)
        self.fs.mv(temporary, final)


def _merged(ranges: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """*ranges* merged where they overlap or touch, as sorted firsts and their lasts (bisect)."""
    firsts: list[int] = []
    lasts: list[int] = []
    for first, last in sorted(ranges):
        if lasts and first <= lasts[-1] + 1:
            lasts[-1] = max(lasts[-1], last)
        else:
            firsts.append(first)
            lasts.append(last)
    return firsts, lasts


def check_roll_settings(settings: Settings) -> None:
    """Raises SettingsError for SINK_ROLL_BYTES, SINK_ROLL_SECONDS or SINK_MAX_HELD_BYTES out of range."""
    if settings.SINK_ROLL_BYTES < 0 or not settings.SINK_ROLL_SECONDS > 0:
        raise SettingsError("SINK_ROLL_BYTES must be 0 or more and SINK_ROLL_SECONDS more than 0")
    if settings.SINK_MAX_HELD_BYTES < 0:
        raise SettingsError("SINK_MAX_HELD_BYTES must be 0 or more")


def _makedirs(folder: str) -> None:
    """*folder* and each missing parent, made with DIR_MODE (``os.makedirs`` gives its mode to the
    last one only)."""
    missing = []
    while folder and not os.path.isdir(folder):
        missing.append(folder)
        folder = os.path.dirname(folder.rstrip("/"))
    for path in reversed(missing):
        try:
            os.mkdir(path, DIR_MODE)
        except FileExistsError:
            if not os.path.isdir(path):  # a file where the folder should be
                raise NotADirectoryError(f"{path} exists and is not a folder") from None
            continue  # another sink made it first


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)
