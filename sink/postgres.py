"""The PostgreSQL sink (docs/contract.md §20.2), on psycopg 3.

``postgresql://user:pass@host:port/db?table=NAME`` (default table ``crawlhive_pages``). The table and
its indexes are created if missing (under an advisory lock, so sinks starting together do not race).
Each batch is one transaction: ``COPY`` into a temporary staging table, then one
``INSERT … SELECT DISTINCT ON … ON CONFLICT (appid, crawlid, url) DO UPDATE … WHERE`` the incoming
version is newer (by ``crawled_at`` of a cleaned record, ``timestamp`` of a crawled item): a
redelivered or older record never replaces a newer row, so redelivery and reordering leave one row
per page holding its newest version. When the transaction commits, the batch is durable and the
sink may commit its offsets.

A batch PostgreSQL refuses for a reason of its own (not a lost connection) is written again one
record at a time, and the records it still refuses become dead letters (a URL too long for the
primary key's index, for one). NUL characters, which PostgreSQL's ``text`` and ``jsonb`` cannot
hold, are stored as U+FFFD.
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from crawlhive.sink.fields import parse_date, parse_time, scrub, text_or_none
from crawlhive.sink.store import SinkRecord, Store, WriteResult
from crawlhive.utils.errors import BackendUnavailable, SettingsError
from crawlhive.utils.log import mask_url

if TYPE_CHECKING:
    from crawlhive.utils.settings import Settings

logger = logging.getLogger(__name__)

#: The table a URL without ``?table=`` writes to.
DEFAULT_TABLE = "crawlhive_pages"
#: A table name: an SQL identifier, optionally after its schema (``archive.pages``).
TABLE_NAME = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]{0,62}\.)?[A-Za-z_][A-Za-z0-9_]{0,62}$")
#: Seconds a connection attempt may take before the store counts as unreachable.
CONNECT_TIMEOUT_S = 5
#: The staging table of a connection (temporary: each session has its own).
STAGE = "crawlhive_sink_stage"

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
CREATE_STAGE = """CREATE TEMPORARY TABLE IF NOT EXISTS {stage} (
    ord integer NOT NULL,
    appid text, crawlid text, url text, fetched_at timestamptz, status_code integer, content_hash text,
    title text, text text, language text, published date, record jsonb
) ON COMMIT DELETE ROWS"""
#: Newest version per page within the batch (then the latest offset), and only over an older row.
UPSERT = """INSERT INTO {table} AS t ({columns}, updated_at)
SELECT DISTINCT ON (appid, crawlid, url) {columns}, now() FROM {stage}
ORDER BY appid, crawlid, url, fetched_at DESC NULLS LAST, ord DESC
ON CONFLICT (appid, crawlid, url) DO UPDATE SET {updates}, updated_at = excluded.updated_at
WHERE t.fetched_at IS NULL OR excluded.fetched_at > t.fetched_at"""
#: The same for a batch without two versions of one page (the usual case): no sort.
UPSERT_UNIQUE = """INSERT INTO {table} AS t ({columns}, updated_at)
SELECT {columns}, now() FROM {stage}
ON CONFLICT (appid, crawlid, url) DO UPDATE SET {updates}, updated_at = excluded.updated_at
WHERE t.fetched_at IS NULL OR excluded.fetched_at > t.fetched_at"""

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


class PostgresStore(Store):
    """Rows in a PostgreSQL table (see the module docstring)."""

    kind = "postgresql"

    def __init__(self, url: str, conninfo: str, table: str) -> None:
        self.url = url
        self.conninfo = conninfo
        self.table_name = table
        self.table = sql.Identifier(*table.split("."))
        self.conn: psycopg.Connection[Any] | None = None
        columns = sql.SQL(", ").join(map(sql.Identifier, COLUMNS))
        updates = sql.SQL(", ").join(sql.SQL("{c} = excluded.{c}").format(c=sql.Identifier(c)) for c in VALUE_COLUMNS)
        self._copy = sql.SQL("COPY {stage} (ord, {columns}) FROM STDIN").format(
            stage=sql.Identifier(STAGE), columns=columns
        )
        self._upsert = sql.SQL(UPSERT).format(
            table=self.table, columns=columns, stage=sql.Identifier(STAGE), updates=updates
        )
        self._upsert_unique = sql.SQL(UPSERT_UNIQUE).format(
            table=self.table, columns=columns, stage=sql.Identifier(STAGE), updates=updates
        )

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
        if self.conn is not None and not self.conn.closed:
            return
        try:
            conn = psycopg.connect(
                self.conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, application_name="crawlhive-sink"
            )
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
        self.conn = conn

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
        conn.execute(sql.SQL(CREATE_STAGE).format(stage=sql.Identifier(STAGE)))

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - shutting down
                logger.debug("closing the PostgreSQL connection failed", exc_info=True)

    # --- writing -----------------------------------------------------------------------------

    def write(self, records: list[SinkRecord]) -> WriteResult:
        """Upsert *records* in one transaction (see the module docstring).

        Raises:
            BackendUnavailable: PostgreSQL is unreachable (nothing of the batch counts as written).
        """
        result = WriteResult()
        rows: list[tuple[SinkRecord, tuple[Any, ...]]] = []
        for record in records:
            try:
                rows.append((record, page_row(record.value, record.raw)))
            except ValueError as exc:
                result.rejected.append((record, str(exc)))
        if not rows:
            return result
        self.open()
        try:
            result.written = self._upsert_rows([row for _, row in rows])
        except psycopg.Error as exc:
            if self._lost(exc):
                raise BackendUnavailable(self.describe(exc)) from exc
            logger.warning(
                "PostgreSQL refused a batch of %d records (%s); writing them one by one",
                len(rows),
                str(exc).strip()[:200],
            )
            refused = 0
            for record, row in rows:
                try:
                    result.written += self._upsert_rows([row])
                except psycopg.Error as one:
                    if self._lost(one):
                        raise BackendUnavailable(self.describe(one)) from one
                    refused += 1
                    result.rejected.append((record, f"PostgreSQL refused the record: {str(one).strip()[:300]}"))
            result.duplicates = len(rows) - result.written - refused
            return result
        result.duplicates = len(rows) - result.written
        return result

    def _upsert_rows(self, rows: list[tuple[Any, ...]]) -> int:
        """One transaction: COPY *rows* into the staging table, upsert; the rows inserted or updated."""
        assert self.conn is not None
        with self.conn.transaction(), self.conn.cursor() as cur:
            with cur.copy(self._copy) as copy:
                for ord_, row in enumerate(rows):
                    copy.write_row((ord_, *row))
            unique = len({row[:3] for row in rows}) == len(rows)
            cur.execute(self._upsert_unique if unique else self._upsert)
            return max(0, cur.rowcount)

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
            self.close()
        return lost


def _refused(exc: psycopg.OperationalError) -> bool:
    """True if PostgreSQL answered and refused the connection (authentication, no such database):
    waiting does not help, the URL is wrong."""
    text = str(exc)
    return "authentication failed" in text or ("database" in text and "does not exist" in text)
