"""The PostgreSQL sink (docs/contract.md §20.2), on psycopg 3.

``postgresql://user:pass@host:port/db?table=NAME`` (default table ``crawlhive_pages``). The table and
its indexes are created if missing (under an advisory lock, so sinks starting together do not race).
Each batch is one transaction, sent in one round trip (libpq's pipeline mode: ``BEGIN``, the
upsert, ``COMMIT``): ``INSERT … SELECT [DISTINCT ON …] FROM unnest(<one array per column>) ON
CONFLICT (appid, crawlid, url) DO UPDATE … WHERE`` the incoming version is newer (by ``crawled_at``
of a cleaned record, ``timestamp`` of a crawled item): a redelivered or older record never replaces
a newer row, so redelivery and reordering leave one row per page holding its newest version. The
columns go as binary arrays, which PostgreSQL reads without parsing text, and the rows are written
once (a ``COPY`` into a staging table, then the upsert, wrote them twice and cost four round trips).
A batch of more than :data:`CHUNK_BYTES` is split into several upserts of the same transaction.
Two batches are written at once, on two connections (:attr:`PostgresStore.writers`), their rows in
key order, so two transactions over the same pages wait for each other's rows, never deadlock.
When the transaction commits, the batch is durable and the sink may commit its offsets.

Records the table cannot hold are refused alone before the batch is sent, each a dead letter: a
key (appid, crawlid, url) longer than the primary key's btree index holds (:data:`KEY_MAX_BYTES`),
a string with a lone surrogate (not Unicode text). A batch PostgreSQL still refuses for a reason of
its own (not a lost connection) is written again one record at a time, and the records it still
refuses become dead letters. NUL characters, which PostgreSQL's ``text`` and ``jsonb`` cannot hold,
are stored as U+FFFD.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import pq, sql
from psycopg.adapt import Dumper, Transformer
from psycopg.postgres import types as pg_types

from crawlhive.sink.fields import parse_date, parse_time, scrub, text_or_none
from crawlhive.sink.store import SinkRecord, Store, WriteResult
from crawlhive.utils.config.errors import BackendUnavailable, SettingsError
from crawlhive.utils.config.log import mask_url

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

#: The table a URL without ``?table=`` writes to.
DEFAULT_TABLE = "crawlhive_pages"
#: A table name: an SQL identifier, optionally after its schema (``archive.pages``).
TABLE_NAME = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]{0,62}\.)?[A-Za-z_][A-Za-z0-9_]{0,62}$")
#: Seconds a connection attempt may take before the store counts as unreachable.
CONNECT_TIMEOUT_S = 5
#: Bytes of records (as received) per upsert statement at most: a parameter is limited to 1 GB and
#: a batch of large crawled items (SINK_FROM=crawled_firehose) can be bigger.
CHUNK_BYTES = 64 * 1024 * 1024

#: The columns of §20.2 after the key, in COPY order (``updated_at`` is set by the upsert).
VALUE_COLUMNS = (
    "fetched_at",
    "status_code",
    "content_hash",
    "title",
    "text",
    "language",
    "published",
    "record",
)
KEY_COLUMNS = ("appid", "crawlid", "url")
#: Bytes (UTF-8) of a row's key at most. A btree index entry holds at most 2,704 bytes (a third of
#: an 8 KiB page, less the tuple's headers); a longer key made PostgreSQL refuse the whole batch,
#: which was then written one record at a time. A key over this is refused alone, before sending.
KEY_MAX_BYTES = 2600
COLUMNS = (*KEY_COLUMNS, *VALUE_COLUMNS)

CREATE_TABLE = """CREATE TABLE IF NOT EXISTS {table} (
    appid text NOT NULL,
    crawlid text NOT NULL,
    url text NOT NULL,
    fetched_at timestamptz,
    status_code integer,
    content_hash text,
    title text,
    text text,
    language text,
    published date,
    record jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (appid, crawlid, url)
)"""
#: The columns as ``unnest`` reads them from the statement's array parameters (binary).
UNNEST = """unnest(%b::text[], %b::text[], %b::text[], %b::timestamptz[], %b::integer[], %b::text[], %b::text[],
    %b::text[], %b::text[], %b::date[], %b::text[]) WITH ORDINALITY AS s({columns}, ord)"""
#: Newest version per page within the batch (then the latest offset), and only over an older row.
UPSERT = """INSERT INTO {table} AS t ({columns}, updated_at)
SELECT DISTINCT ON (appid, crawlid, url) {values}, now() FROM {unnest}
ORDER BY appid, crawlid, url, fetched_at DESC NULLS LAST, ord DESC
ON CONFLICT (appid, crawlid, url) DO UPDATE SET {updates}, updated_at = excluded.updated_at
WHERE t.fetched_at IS NULL OR excluded.fetched_at > t.fetched_at"""
#: The same for a batch without two versions of one page (the usual case): no sort.
UPSERT_UNIQUE = """INSERT INTO {table} AS t ({columns}, updated_at)
SELECT {values}, now() FROM {unnest}
ON CONFLICT (appid, crawlid, url) DO UPDATE SET {updates}, updated_at = excluded.updated_at
WHERE t.fetched_at IS NULL OR excluded.fetched_at > t.fetched_at"""

#: The element type of each column's array, as UNNEST casts it (one per column of COLUMNS).
COLUMN_TYPES = ("text", "text", "text", "timestamptz", "int4", "text", "text", "text", "text", "date", "text")
#: The array types' OIDs, to encode each column with the dumper of exactly the type it is cast to.
ARRAY_OIDS = [pg_types.get(name).array_oid for name in COLUMN_TYPES]  # type: ignore[union-attr]

INT32 = 2**31
#: SQLSTATE classes and codes that mean "try again later", not "this record cannot be stored":
#: connection exceptions, insufficient resources (disk full, too many connections), operator
#: intervention (shutdown, restart), system errors, serialization failure and deadlock.
TRANSIENT_SQLSTATES = ("08", "53", "57", "58", "40001", "40P01")


def page_row(value: dict[str, Any], raw: bytes | None = None) -> tuple[Any, ...]:
    """The columns of one record (cleaned record, crawled item or user item), in COPY order;
    *raw*, the record's JSON as received, is stored as ``record`` as it is unless it escapes a NUL
    (re-encoding the record would cost as much as the rest of the row).

    Raises:
        ValueError: the record has no string ``appid``, ``crawlid`` or ``url`` (the row's key).
    """
    key = []
    for name in KEY_COLUMNS:
        field = value.get(name)
        if not isinstance(field, str):
            raise ValueError(f"not a page record: {name!r} is not a string")
        key.append(scrub(field))
    size = sum(len(part.encode("utf-8", "surrogatepass")) for part in key)
    if size > KEY_MAX_BYTES:
        raise ValueError(
            f"the key (appid, crawlid, url) is {size} bytes, more than the {KEY_MAX_BYTES} a PostgreSQL index holds"
        )
    status = value.get("status_code")
    if not isinstance(status, int) or isinstance(status, bool) or not -INT32 < status < INT32:
        status = None
    return (
        *key,
        parse_time(value.get("crawled_at") or value.get("timestamp")),
        status,
        text_or_none(value.get("content_hash")),
        text_or_none(value.get("title")),
        text_or_none(value.get("text")),
        text_or_none(value.get("language")),
        parse_date(value.get("published")),
        raw.decode("utf-8")
        if raw is not None and b"\\u0000" not in raw
        else json.dumps(scrub(value), ensure_ascii=False),
    )


def split_url(url: str) -> tuple[str, str]:
    """``(conninfo without table=, table)`` of a ``postgresql://`` sink URL.

    Raises:
        SettingsError: the table is not an SQL identifier (optionally schema-qualified).
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    table = next((v for k, v in query if k == "table"), DEFAULT_TABLE)
    if not TABLE_NAME.match(table):
        raise SettingsError(
            f"SINK_URL (--to): table {table[:80]!r} is not a table name (letters, digits, _; schema.table allowed)"
        )
    rest = urlencode([(k, v) for k, v in query if k != "table"])
    return urlunsplit(parts._replace(query=rest)), table


class Encoded:
    """One column of a batch already in PostgreSQL's binary array format (:class:`EncodedDumper`)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class EncodedDumper(Dumper):
    """Sends an :class:`Encoded` column as it is: binary format, its type left to the statement's
    cast (OID 0: PostgreSQL infers ``text[]`` from ``%b::text[]``), which is the type it was
    encoded as (:data:`ARRAY_OIDS`)."""

    format = pq.Format.BINARY
    oid = 0

    def dump(self, obj: Any) -> bytes:
        return obj.data  # type: ignore[no-any-return]


@dataclass
class Statement:
    """One upsert of a batch: its columns, encoded on the sink's thread (psycopg's array encoding is
    Python, a third of the client's share of a batch: the writer thread, whose time bounds the
    sink's rate, only sends them)."""

    unique: bool
    columns: list[Encoded]


@dataclass
class Prepared:
    """A batch ready to be sent (:meth:`PostgresStore.prepare`)."""

    #: Each record with its row (:func:`page_row`).
    rows: list[tuple[SinkRecord, tuple[Any, ...]]] = field(default_factory=list)
    rejected: list[tuple[SinkRecord, str]] = field(default_factory=list)
    #: The upserts of *rows*, encoded (a record that cannot be, a lone surrogate, is in *rejected*).
    statements: list[Statement] = field(default_factory=list)


def chunked(rows: list[tuple[SinkRecord, tuple[Any, ...]]]) -> list[list[tuple[Any, ...]]]:
    """The rows of *rows* in chunks of at most :data:`CHUNK_BYTES` of records (as received)."""
    chunks: list[list[tuple[Any, ...]]] = [[]]
    size = 0
    for record, row in rows:
        if size + record.size > CHUNK_BYTES and chunks[-1]:
            chunks.append([])
            size = 0
        chunks[-1].append(row)
        size += record.size
    return chunks


def encode_statements(rows: list[tuple[SinkRecord, tuple[Any, ...]]]) -> list[Statement]:
    """The upserts of *rows*: per chunk, whether its pages are unique and its columns encoded.

    Raises:
        UnicodeEncodeError: a string holds a lone surrogate.
    """
    transformer = Transformer()
    transformer.set_dumper_types(ARRAY_OIDS, pq.Format.BINARY)
    statements = []
    for chunk in chunked(rows):
        unique = len({row[:3] for row in chunk}) == len(chunk)
        # in key order (stable: a page's versions keep theirs), so that two batches written at once
        # (PostgresStore.writers) take their rows' locks in the same order and never deadlock
        chunk.sort(key=_row_key)
        columns = [list(column) for column in zip(*chunk, strict=True)]
        encoded = transformer.dump_sequence(columns, [])
        statements.append(Statement(unique, [Encoded(bytes(data or b"")) for data in encoded]))
    return statements


class PostgresStore(Store):
    """Rows in a PostgreSQL table (see the module docstring)."""

    kind = "postgresql"
    #: The server's share of a batch (COPY, upsert, commit) waits without the GIL: the sink polls
    #: and decodes the next batch meanwhile.
    overlaps = True
    #: Batches written at once, each on a connection of its own: the server's share of a batch is
    #: one backend process's CPU, so two keep two cores busy where one left the second to the sink
    #: alone. Their rows are upserted in key order, so two transactions wait for each other's rows
    #: (a page in both) but never deadlock.
    writers = 2

    def __init__(self, url: str, conninfo: str, table: str) -> None:
        self.url = url
        self.conninfo = conninfo
        self.table_name = table
        self.table = sql.Identifier(*table.split("."))
        #: Each thread's connection (the sink's, and one per writer thread), and every one opened.
        self._local = threading.local()
        self._conns: list[psycopg.Connection[Any]] = []
        self._conns_lock = threading.Lock()
        #: Raised when a thread finds its connection lost: every thread then reconnects before its
        #: next write (the sink's probe too, so it does not take a stale connection for a live one).
        self._epoch = 0
        columns = sql.SQL(", ").join(map(sql.Identifier, COLUMNS))
        values = sql.SQL(", ").join(
            sql.SQL("{c}::jsonb" if c == "record" else "{c}").format(c=sql.Identifier(c)) for c in COLUMNS
        )
        updates = sql.SQL(", ").join(sql.SQL("{c} = excluded.{c}").format(c=sql.Identifier(c)) for c in VALUE_COLUMNS)
        unnest = sql.SQL(UNNEST).format(columns=columns)
        parts = {"table": self.table, "columns": columns, "values": values, "updates": updates, "unnest": unnest}
        self._upsert = sql.SQL(UPSERT).format(**parts)
        self._upsert_unique = sql.SQL(UPSERT_UNIQUE).format(**parts)

    @classmethod
    def from_settings(cls, settings: Settings, url: str) -> Self:
        conninfo, table = split_url(url)
        return cls(url, conninfo, table)

    def describe(self, exc: BaseException) -> str:
        said = " ".join(str(exc).split())[:300]
        return f"PostgreSQL unreachable ({type(exc).__name__}: {said}); check SINK_URL (--to) {mask_url(self.url)}"

    # --- connection --------------------------------------------------------------------------

    def open(self) -> None:
        """Connect, create the table and indexes if missing, check their columns, create the
        staging table of this connection.

        Raises:
            BackendUnavailable: PostgreSQL is unreachable.
            SettingsError: the table exists without the columns of §20.2, or the URL is refused
                (wrong user, database, password).
        """
        if self.conn is not None and not self.conn.closed and getattr(self._local, "epoch", -1) == self._epoch:
            return
        if self.conn is not None:  # lost on another thread: this one's is no better
            self._drop_connection()
        try:
            conn = psycopg.connect(
                self.conninfo,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_S,
                application_name="crawlhive-sink",
                client_encoding="utf8",  # the encoding of the columns encoded by encode_statements
            )
            conn.adapters.register_dumper(Encoded, EncodedDumper)
        except psycopg.OperationalError as exc:
            if _refused(exc):
                raise SettingsError(f"SINK_URL (--to) {mask_url(self.url)}: {str(exc).strip()[:300]}") from exc
            raise BackendUnavailable(self.describe(exc)) from exc
        try:
            self._prepare(conn)
        except psycopg.OperationalError as exc:
            conn.close()
            raise BackendUnavailable(self.describe(exc)) from exc
        except BaseException:
            conn.close()
            raise
        self._local.conn = conn
        self._local.epoch = self._epoch
        with self._conns_lock:
            self._conns = [c for c in self._conns if not c.closed] + [conn]

    def backend_pids(self) -> list[int]:
        """The PostgreSQL server processes of this store's open connections (the benchmark reads
        their CPU)."""
        with self._conns_lock:
            return [c.info.backend_pid for c in self._conns if not c.closed]

    @property
    def conn(self) -> psycopg.Connection[Any] | None:
        """The calling thread's connection (None before :meth:`open` on that thread)."""
        return getattr(self._local, "conn", None)

    def _prepare(self, conn: psycopg.Connection[Any]) -> None:
        short = self.table_name.rpartition(".")[2][:50]
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('crawlhive-sink-create'))")
            conn.execute(sql.SQL(CREATE_TABLE).format(table=self.table))
            for column in ("fetched_at", "content_hash"):
                conn.execute(
                    sql.SQL("CREATE INDEX IF NOT EXISTS {name} ON {table} ({column})").format(
                        name=sql.Identifier(f"{short}_{column}"), table=self.table, column=sql.Identifier(column)
                    )
                )
        have = {
            row[0]
            for row in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
                (self.table.as_string(conn),),
            )
        }
        missing = [c for c in (*COLUMNS, "updated_at") if c not in have]
        if missing:
            raise SettingsError(
                f"SINK_URL (--to): table {self.table_name} exists without the columns {', '.join(missing)} "
                "(docs/contract.md §20.2); name another table with ?table="
            )

    def close(self) -> None:
        """Close every connection (each thread's reconnects on its next write)."""
        self._local.conn = None
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - shutting down
                logger.debug("closing the PostgreSQL connection failed", exc_info=True)

    def _drop_connection(self) -> None:
        """Close the calling thread's connection (lost): its next write reconnects."""
        conn, self._local.conn = self.conn, None
        if conn is not None:
            with self._conns_lock:
                self._conns = [c for c in self._conns if c is not conn]
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - already broken
                logger.debug("closing the PostgreSQL connection failed", exc_info=True)

    # --- writing -----------------------------------------------------------------------------

    def write(self, records: list[SinkRecord]) -> WriteResult:
        """Upsert *records* in one transaction (see the module docstring).

        Raises:
            BackendUnavailable: PostgreSQL is unreachable (nothing of the batch counts as written).
        """
        return self.write_prepared(self.prepare(records))

    def prepare(self, records: list[SinkRecord]) -> Prepared:
        """The rows of *records* and their upserts, encoded (on the sink's thread); a record
        without the row's key is rejected."""
        prepared = Prepared()
        rows, rejected = prepared.rows, prepared.rejected
        for record in records:
            try:
                rows.append((record, page_row(record.value, record.raw)))
            except ValueError as exc:
                rejected.append((record, str(exc)))
        if rows:
            try:
                prepared.statements = encode_statements(rows)
            except UnicodeEncodeError:
                # The records that are not Unicode text are refused alone; the rest go as a batch
                # (each row is encoded on its own, so the rows that do encode do so together).
                good = []
                for one in rows:
                    try:
                        encode_statements([one])
                    except UnicodeEncodeError:
                        rejected.append((one[0], "not Unicode text: a string holds a lone surrogate"))
                    else:
                        good.append(one)
                prepared.rows = good
                prepared.statements = encode_statements(good) if good else []
        return prepared

    def write_prepared(self, prepared: Prepared) -> WriteResult:
        """Upsert the rows of :meth:`prepare` in one transaction (on the writer thread).

        Raises:
            BackendUnavailable: PostgreSQL is unreachable (nothing of the batch counts as written).
        """
        result = WriteResult(rejected=list(prepared.rejected))
        rows = prepared.rows
        if not rows:
            return result
        self.open()
        try:
            result.written = self._send(prepared.statements)
        except psycopg.Error as exc:
            if self._lost(exc):
                raise BackendUnavailable(self.describe(exc)) from exc
            logger.warning(
                "PostgreSQL refused a batch of %d records (%s); writing them one by one",
                len(rows),
                str(exc).strip()[:200],
            )
            refused = 0
            for one in rows:
                try:
                    result.written += self._upsert_rows([one])
                except psycopg.Error as error:
                    if self._lost(error):
                        raise BackendUnavailable(self.describe(error)) from error
                    refused += 1
                    result.rejected.append((one[0], f"PostgreSQL refused the record: {str(error).strip()[:300]}"))
            result.duplicates = len(rows) - result.written - refused
            return result
        result.duplicates = len(rows) - result.written
        return result

    def _upsert_rows(self, rows: list[tuple[SinkRecord, tuple[Any, ...]]]) -> int:
        """The upserts of *rows* (one record, when a batch is written one by one): see :meth:`_send`."""
        return self._send(encode_statements(rows))

    def _send(self, statements: list[Statement]) -> int:
        """One transaction in one round trip: the *statements*; the rows inserted or updated."""
        conn = self.conn
        assert conn is not None
        cursors = []
        with conn.pipeline(), conn.transaction():
            for statement in statements:
                cursor = conn.cursor()
                cursor.execute(self._upsert_unique if statement.unique else self._upsert, statement.columns)
                cursors.append(cursor)
        return sum(max(0, cursor.rowcount) for cursor in cursors)

    def _lost(self, exc: psycopg.Error) -> bool:
        """True if *exc* means the store is unavailable, not that it refuses these records: no
        server answer (the connection failed), or an SQLSTATE of TRANSIENT_SQLSTATES; the
        connection is then closed, so the next write reconnects."""
        conn = self.conn
        state = exc.sqlstate or ""
        lost = (
            conn is None
            or conn.broken
            or conn.closed
            or isinstance(exc, psycopg.InterfaceError)
            or (isinstance(exc, psycopg.OperationalError) and not state)
            or state.startswith(TRANSIENT_SQLSTATES)
        )
        if lost:
            self._epoch += 1
            self._drop_connection()
        return lost


def _row_key(row: tuple[Any, ...]) -> tuple[str, str, str]:
    """A row's key (appid, crawlid, url): the table's primary key."""
    return row[0], row[1], row[2]


def _refused(exc: psycopg.OperationalError) -> bool:
    """True if PostgreSQL answered and refused the connection (authentication, no such database):
    waiting does not help, the URL is wrong."""
    text = str(exc)
    return "authentication failed" in text or ("database" in text and "does not exist" in text)
