"""What every sink's store provides, and how a ``--to`` URL names one (docs/contract.md §20).

A :class:`Store` receives the records of one polled batch that are JSON objects
(:class:`SinkRecord`) and writes them. The sink worker (:mod:`crawlhive.sink.worker`) commits a
partition's offset only up to :meth:`Store.held_back`: a store that writes at once (PostgreSQL)
holds nothing back once :meth:`Store.write` returned; one that gathers records into files holds
back the first offset of the file still open, until the file is complete.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from crawlhive.utils.config.errors import SettingsError

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

#: Short names ``--from`` accepts, each the topic ``<prefix>.<name>``.
SOURCES = ("crawled_firehose", "items", "cleaned")


@dataclass
class SinkRecord:
    """One Kafka record whose value is a JSON object."""

    topic: str
    partition: int
    offset: int
    value: dict[str, Any]
    #: Bytes of the record's value as received.
    size: int = 0
    #: The value as received, when *value* is exactly its JSON (None after a body was resolved).
    raw: bytes | None = None


@dataclass
class WriteResult:
    """What one :meth:`Store.write` did."""

    #: Records the store holds now (inserted or replaced a row).
    written: int = 0
    #: Records gathered for a file not written yet (:meth:`Store.take_written` counts them once it is).
    buffered: int = 0
    #: Records the store already held in the same or a newer version (nothing changed).
    duplicates: int = 0
    #: Records the store cannot hold, each with the reason (they become dead letters).
    rejected: list[tuple[SinkRecord, str]] = field(default_factory=list)


class Store(ABC):
    """A place a sink writes records to (see the module docstring)."""

    #: The URL scheme's kind: ``postgresql``, ``file``, ``warc`` (stats and metrics label).
    kind: ClassVar[str]
    #: True if :meth:`write` may run on the sink's writer thread while the sink polls and decodes
    #: the next batch (meanwhile the sink may call :meth:`held_back` and :meth:`tick`, nothing else).
    overlaps: ClassVar[bool] = False
    #: Batches a store that :attr:`overlaps` writes at once, each on a writer thread of its own
    #: (:meth:`write_prepared` is then called from several threads; the sink completes the
    #: batches, and commits their offsets, in the order it polled them).
    writers: ClassVar[int] = 1

    @abstractmethod
    def open(self) -> None:
        """Connect and prepare (create the table, the folder); safe to call again.

        Raises:
            BackendUnavailable: the store cannot be reached (the message names the sink's URL).
        """

    @abstractmethod
    def write(self, records: list[SinkRecord]) -> WriteResult:
        """Write *records*; when this returns, every record not rejected is durable, or held back
        (:meth:`held_back`) until it is.

        Raises:
            BackendUnavailable: the store is unreachable; nothing of *records* counts as written.
        """

    def prepare(self, records: list[SinkRecord]) -> Any:
        """What :meth:`write_prepared` sends, made on the sink's thread (a store that
        :attr:`overlaps` formats its batch here; by default the records themselves)."""
        return records

    def write_prepared(self, prepared: Any) -> WriteResult:
        """Write what :meth:`prepare` made (on the writer thread of a store that :attr:`overlaps`).

        Raises:
            BackendUnavailable: the store is unreachable; nothing of the batch counts as written.
        """
        return self.write(prepared)

    def held_back(self, topic: str, partition: int) -> int | None:
        """The first offset of *topic*/*partition* written but not durable yet (None: nothing)."""
        return None

    def tick(self, assigned: set[tuple[str, int]]) -> None:  # noqa: B027 - optional
        """Called after every poll: complete what is due (files rolled by time) and forget what is
        held for partitions no longer *assigned* (their next owner writes them again).

        Raises:
            BackendUnavailable: the store is unreachable.
        """

    def held_records(self) -> int:
        """Records gathered or being written, not durable yet (``buffered`` in ``stats: sink``)."""
        return 0

    def take_written(self) -> int:
        """Records made durable since the last call outside :meth:`write` (files completed)."""
        return 0

    def room(self) -> int | None:
        """Bytes of records the store may still take (None: no bound; 0: it is full, and the sink
        pauses its partitions meanwhile)."""
        return None

    def flush(self) -> None:  # noqa: B027 - optional
        """Make everything held back durable now (a graceful stop), waiting for it.

        Raises:
            BackendUnavailable: the store is unreachable (what it held comes again).
        """

    def abandon(self) -> dict[tuple[str, int], int]:
        """Forget everything held back (a write or roll failed, so the sink rewinds) and return,
        per partition, the first offset not durable yet: the sink reads again from exactly there
        (a store that holds nothing back returns nothing: the batch is read again)."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional
        """Release the connections (what is held back is not committed, so it comes again)."""


def sink_name(url: str) -> str:
    """``<scheme>-<8-hex hash of the URL>``: the sink's name in its consumer group, stats and
    metrics (the URL itself may hold a password)."""
    scheme = urlsplit(url).scheme.lower() or "file"
    return f"{scheme}-{hashlib.sha256(url.encode()).hexdigest()[:8]}"


def sink_group(settings: Settings, url: str) -> str:
    """SINK_GROUP, or ``<prefix>-sink-<scheme>-<8-hex hash of URL>`` (§20.1)."""
    return str(settings.SINK_GROUP or f"{settings.KAFKA_TOPIC_PREFIX}-sink-{sink_name(url)}")


def source_topic(settings: Settings, name: str) -> str:
    """``--from``: a short name (``cleaned``, ``crawled_firehose``, ``items``) or a full topic."""
    if not name:
        raise SettingsError("SINK_FROM (--from): expected a topic, got nothing")
    return settings.topic(name) if name in SOURCES else name


def store_for(settings: Settings, url: str) -> Store:
    """The store a ``--to`` URL names.

    Raises:
        SettingsError: no URL, or a scheme no store handles (the message lists the known ones).
    """
    if not url:
        raise SettingsError("--to URL (SINK_URL) is required, e.g. postgresql://user@host/db")
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("postgresql", "postgres"):
        from crawlhive.sink.postgres import PostgresStore

        return PostgresStore.from_settings(settings, url)
    if scheme == "warc":
        from crawlhive.sink.warc import WarcStore

        return WarcStore.from_settings(settings, url)
    import fsspec

    if scheme in fsspec.available_protocols() and scheme not in ("http", "https", "data", "reference"):
        from crawlhive.sink.files import FileStore

        return FileStore.from_settings(settings, url)
    raise SettingsError(
        f"SINK_URL (--to): no sink for scheme {scheme!r}; expected postgresql://, warc://, file:// or another fsspec "
        "URL such as s3:// (docs/contract.md §20)"
    )
