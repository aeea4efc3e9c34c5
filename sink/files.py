"""The files sink (docs/contract.md §20.3): gzip JSON Lines or Parquet through fsspec.

``file:///dir/`` or any fsspec URL (``s3://bucket/prefix/`` with ``s3fs`` installed, ``gs://`` with
``gcsfs``, …), with ``?format=jsonl`` (the default: one JSON record a line, gzip) or
``?format=parquet`` (the fixed schema :data:`PARQUET_SCHEMA`, zstd). Records gather per partition
and a file is written when their bytes (as received) reach SINK_ROLL_BYTES (64 MiB) or its first
record is SINK_ROLL_SECONDS old, named ``<topic>/<partition>/<first offset>-<last offset>.<ext>``.
It appears complete or not at all: a local file is written under a temporary name, flushed to disk
(fsync) and renamed; elsewhere it is written under a temporary name and moved (an object store's
put is atomic). Only then does the sink commit the offsets it holds: a sink killed before that
leaves the records to the next one, which gathers the same records from the same first offset and,
rolled by size, writes the same file name again. Memory: up to SINK_ROLL_BYTES per partition held.
A local file is created readable by its owner and group only (FILE_MODE), its folders likewise
(DIR_MODE): pages crawled behind a login are no business of the machine's other users.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import parse_qsl, urlencode, urlsplit

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from crawlhive.sink.fields import parse_date, parse_time, text_or_none
from crawlhive.sink.store import SinkRecord, Store, WriteResult
from crawlhive.utils.errors import BackendUnavailable, SettingsError
from crawlhive.utils.log import mask_url

if TYPE_CHECKING:
    from crawlhive.utils.settings import Settings

logger = logging.getLogger(__name__)

#: Permissions of a local file a sink writes (the page archive) and of the folders it makes.
FILE_MODE = 0o640
DIR_MODE = 0o750

#: SINK_ROLL_BYTES when it is 0, for JSON Lines and Parquet.
DEFAULT_ROLL_BYTES = 64 * 1024 * 1024
FORMATS = {"jsonl": "jsonl.gz", "parquet": "parquet"}

#: The Parquet schema (fixed; docs/contract.md §20.3): where the record came from, the columns of
#: the PostgreSQL sink, and the whole record as JSON text.
PARQUET_SCHEMA = pa.schema(
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


def split_url(url: str) -> tuple[str, str]:
    """``(fsspec URL without format=, format)``.

    Raises:
        SettingsError: an unknown format.
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    fmt = next((v for k, v in query if k == "format"), "jsonl")
    if fmt not in FORMATS:
        raise SettingsError(f"SINK_URL (--to): format {fmt[:40]!r}: expected jsonl or parquet")
    rest = urlencode([(k, v) for k, v in query if k != "format"])
    base = url.partition("?")[0].partition("#")[0].rstrip("/")  # not urlunsplit: it drops '//' of warc:///
    return (f"{base}?{rest}" if rest else base), fmt


def parquet_row(record: SinkRecord) -> dict[str, Any]:
    """One row of :data:`PARQUET_SCHEMA`."""
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

    def __init__(self, url: str, base: str, fmt: str, roll_bytes: int, roll_seconds: float) -> None:
        self.url = url
        self.format = fmt
        self.ext = FORMATS[fmt]
        self.roll_bytes = roll_bytes or DEFAULT_ROLL_BYTES
        self.roll_seconds = roll_seconds
        self.fs, self.root = fsspec.core.url_to_fs(base)
        self.local = "file" in _protocols(self.fs)
        self.pending: dict[tuple[str, int], Pending] = {}
        #: Per partition, the offset after the last record of its last file.
        self.done: dict[tuple[str, int], int] = {}

    @classmethod
    def from_settings(cls, settings: Settings, url: str) -> Self:
        base, fmt = split_url(url)
        if settings.SINK_ROLL_BYTES < 0 or not settings.SINK_ROLL_SECONDS > 0:
            raise SettingsError("SINK_ROLL_BYTES must be 0 or more and SINK_ROLL_SECONDS more than 0")
        return cls(url, base, fmt, settings.SINK_ROLL_BYTES, settings.SINK_ROLL_SECONDS)

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

    def write(self, records: list[SinkRecord]) -> WriteResult:
        """Gather *records*; write each partition's file that reaches SINK_ROLL_BYTES."""
        for record in records:
            key = (record.topic, record.partition)
            pending = self.pending.get(key)
            if pending is None:
                pending = self.pending[key] = Pending(first=record.offset)
            pending.records.append(record)
            pending.last = record.offset
            pending.size += record.size
            if pending.size >= self.roll_bytes:
                self._complete(key)
        return WriteResult(written=len(records))

    def held_back(self, topic: str, partition: int) -> int | None:
        pending = self.pending.get((topic, partition))
        return pending.first if pending is not None else None

    def tick(self, assigned: set[tuple[str, int]]) -> None:
        now = time.monotonic()
        for key in list(self.pending):
            if key not in assigned:
                del self.pending[key]  # the partition's next owner gathers these again
                self.done.pop(key, None)
            elif now - self.pending[key].started >= self.roll_seconds:
                self._complete(key)

    def abandon(self) -> dict[tuple[str, int], int]:
        """Per partition, the first offset not in a file yet (what was gathered is forgotten)."""
        firsts = {**self.done, **{key: pending.first for key, pending in self.pending.items()}}
        self.pending.clear()
        return firsts

    def close(self) -> None:
        self.pending.clear()  # not committed: the group delivers these records again

    def name_of(self, key: tuple[str, int], pending: Pending) -> str:
        topic, partition = key
        return f"{self.root}/{topic}/{partition}/{pending.first}-{pending.last}.{self.ext}"

    def _complete(self, key: tuple[str, int]) -> None:
        """Write the file of *key*'s pending records, atomically; then they are no longer held.

        Raises:
            BackendUnavailable: the write failed (the records stay held; the sink rewinds).
        """
        pending = self.pending[key]
        data = self._encode(pending.records)
        final = self.name_of(key, pending)
        try:
            self._put(final, data)
        except OSError as exc:
            raise self._unavailable(exc) from exc
        del self.pending[key]
        self.done[key] = pending.last + 1
        logger.debug("wrote %s (%d records, %d bytes)", final, len(pending.records), len(data))

    def _encode(self, records: list[SinkRecord]) -> bytes:
        if self.format == "jsonl":
            lines = b"".join(_json(r) + b"\n" for r in records)
            return gzip.compress(lines, compresslevel=6, mtime=0)  # the same records, the same bytes
        table = pa.Table.from_pylist([parquet_row(r) for r in records], schema=PARQUET_SCHEMA)
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
            continue  # another sink made it first


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)
