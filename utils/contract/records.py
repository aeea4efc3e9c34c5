r"""The records crawlhive emits (docs/contract.md §5, §6, §13): their shapes (``TypedDict``\ s: the
crawled item, the dead letters of every stage, the cleaned record) and the builders of the dead
letters and the cleaned record. Each field of a record is named here once; the services fill them
in with plain values."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, Literal, TypedDict, cast

from crawlhive.utils.contract.encoding import encode, parse_json

#: Characters of the original text kept in a dead letter whose full payload is too large (docs/contract.md §6).
TRUNCATED_PAYLOAD_CHARS = 65536
#: Characters of a rejection reason kept when the dead letter is too large (a jsonschema message
#: quotes the offending value, which may be megabytes long).
TRUNCATED_ERROR_CHARS = 1024
#: Extra bytes a dead-letter record may need beyond its JSON (Kafka record and batch headers).
DEAD_LETTER_OVERHEAD_BYTES = 4096
#: Characters of an item's url, appid or crawlid a ``clean`` dead letter keeps.
DEAD_LETTER_FIELD_CHARS = 4096


class ItemLink(TypedDict):
    """One entry of a crawled item's ``links`` (docs/contract.md §3.5, §5)."""

    url: str
    text: str


class _BodyByReference(TypedDict, total=False):
    body_ref: dict[str, Any]
    fetch: str
    """The rung that fetched the page (``plain``, ``impersonate``, ``render``), when its mode was not plain (§25)."""
    fetch_stopped: str
    """Why the ``auto`` ladder stopped at ``impersonate`` on a wall (no rendering crawler, …; §25.5)."""


class CrawledRecord(_BodyByReference):
    """A crawled item on ``<prefix>.crawled_firehose`` (docs/contract.md §5): exactly these keys, plus
    ``body_ref`` (and ``"body": null``) for a large page's item (§20.5). ``protocol`` and
    ``original_headers`` may be missing from items of earlier releases (§20.4)."""

    appid: str
    crawlid: str
    url: str
    response_url: str
    status_code: int
    status_msg: str
    response_headers: dict[str, list[str]]
    request_headers: dict[str, list[str]]
    body: str | None
    encoding: str
    links: list[ItemLink]
    attrs: dict[str, Any] | None
    timestamp: str
    protocol: str | None
    original_headers: dict[str, list[str]]


class CleanedRecord(TypedDict):
    """A cleaned record on ``<prefix>.cleaned`` (docs/contract.md §13); cleaner plugins may add keys
    beyond these."""

    appid: str
    crawlid: str
    url: str
    response_url: str
    status_code: int
    crawled_at: str
    cleaned_at: str
    title: str | None
    description: str | None
    text: str | None
    language: str | None
    published: str | None
    content_hash: str | None
    pii_masked: int
    attrs: dict[str, Any] | None


class _RequestIds(TypedDict, total=False):
    uuid: str
    appid: str


class RequestDeadLetter(_RequestIds):
    """A dead letter of a request (docs/contract.md §6 a): a rejected incoming message
    (``"stage": "validation"``) or a control request that cannot be answered (``"control"``);
    ``uuid`` and ``appid`` when the payload holds them as strings."""

    stage: Literal["validation", "control"]
    error: str
    payload: Any
    server_time: int


class CrawlDeadLetter(TypedDict):
    """A request that failed for good (docs/contract.md §6 b)."""

    stage: Literal["crawl"]
    error: str
    url: str
    appid: str
    crawlid: str
    spiderid: str
    retry_times: int
    server_time: int


class _RecordIds(TypedDict, total=False):
    url: str
    appid: str
    crawlid: str


class CleanDeadLetter(_RecordIds):
    """A crawled item the cleaner cannot clean (docs/contract.md §13); the item's ``url``, ``appid``
    and ``crawlid`` when they are strings."""

    stage: Literal["clean"]
    error: str
    server_time: int


class SinkDeadLetter(_RecordIds):
    """A record a sink cannot write (docs/contract.md §6 c, §20.1): where it was, and its ``url``,
    ``appid`` and ``crawlid`` when they are strings."""

    stage: Literal["sink"]
    sink: str
    error: str
    topic: str
    partition: int
    offset: int
    server_time: int


#: Every dead letter on ``<prefix>.dead_letter`` (docs/contract.md §6).
DeadLetter = RequestDeadLetter | CrawlDeadLetter | CleanDeadLetter | SinkDeadLetter


def server_time() -> int:
    """``server_time`` of an outbound message: epoch seconds now."""
    return int(time.time())


def timestamp(now: datetime | None = None) -> str:
    """UTC ``YYYY-MM-DDTHH:MM:SS.ffffff`` (always 6 fractional digits, no offset)."""
    return (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%f")


def _request_ids(source: Any) -> _RequestIds:
    """*source*'s ``uuid`` and ``appid`` when they are strings (a dead letter says whose request it was)."""
    ids: _RequestIds = {}
    if isinstance(source, dict):
        if isinstance(source.get("uuid"), str):
            ids["uuid"] = source["uuid"]
        if isinstance(source.get("appid"), str):
            ids["appid"] = source["appid"]
    return ids


def validation_dead_letter(raw: bytes | None, reason: str, max_record_bytes: int) -> bytes:
    """The dead-letter record (docs/contract.md §6 a) of *raw* rejected for *reason*, as JSON.

    ``payload`` is the parsed JSON if *raw* is valid JSON, else its text (invalid UTF-8 as
    U+FFFD). A record that would exceed *max_record_bytes* gets the first TRUNCATED_PAYLOAD_CHARS
    characters of the text instead (fewer if even that is too large), and ``error`` the suffix
    `` (payload truncated)``.
    """
    text = (raw or b"").decode("utf-8", errors="replace")
    parsed, error = parse_json(raw)
    payload: Any = text if error is not None else parsed
    letter: RequestDeadLetter = {
        "stage": "validation",
        "error": reason,
        "payload": payload,
        **_request_ids(payload),
        "server_time": server_time(),
    }
    limit = max_record_bytes - DEAD_LETTER_OVERHEAD_BYTES
    encoded = _encode(letter)
    if encoded is not None and len(encoded) <= limit:
        return encoded
    if len(reason) > TRUNCATED_ERROR_CHARS:
        reason = reason[:TRUNCATED_ERROR_CHARS] + "…"
    letter["error"] = f"{reason} (payload truncated)"
    chars = TRUNCATED_PAYLOAD_CHARS
    while True:
        letter["payload"] = text[:chars]
        encoded = _encode(letter)
        if encoded is not None and (len(encoded) <= limit or chars == 0):
            return encoded
        chars //= 2


def _encode(letter: RequestDeadLetter) -> bytes | None:
    """*letter* encoded (:func:`encode`); None when it cannot be (nesting too deep)."""
    try:
        return encode(letter)
    except (ValueError, TypeError, OverflowError, RecursionError):
        return None


def crawl_dead_letter(
    error: str,
    *,
    url: str,
    appid: str,
    crawlid: str,
    spiderid: str,
    retry_times: int,
    server_time: int | None = None,
) -> CrawlDeadLetter:
    """The crawl dead letter (docs/contract.md §6 b) of a request (its *url*, *appid*, *crawlid*,
    *spiderid* and the *retry_times* made) which failed permanently with *error*
    (``"<ExceptionClass>: <message>"``, ``"lease expired"``, or the item-too-large text)."""
    return {
        "stage": "crawl",
        "error": error,
        "url": url,
        "appid": appid,
        "crawlid": crawlid,
        "spiderid": spiderid,
        "retry_times": retry_times,
        "server_time": int(time.time()) if server_time is None else server_time,
    }


def control_dead_letter(error: str, payload: Any, ids_from: Any = None) -> RequestDeadLetter:
    """A ``stage: control`` dead letter (docs/contract.md §6 a's shape): a control request that
    cannot be answered (*payload*: the request, or its raw text), or an answer that cannot be sent
    (*payload* None, *ids_from* the answer). ``uuid`` / ``appid`` are copied from *ids_from*
    (default: *payload*) when they are strings."""
    return {
        "stage": "control",
        "error": error,
        "payload": payload,
        **_request_ids(payload if ids_from is None else ids_from),
        "server_time": server_time(),
    }


def clean_dead_letter(item: Any, error: str) -> CleanDeadLetter:
    """A ``stage: clean`` dead letter (docs/contract.md §6, §13); the item's ``url``, ``appid``
    and ``crawlid`` are cut to DEAD_LETTER_FIELD_CHARS (a hostile record's could be too large
    to produce)."""
    return {"stage": "clean", "error": error, **_record_ids(item), "server_time": server_time()}


def sink_dead_letter(sink: str, error: str, value: Any, topic: str, partition: int, offset: int) -> SinkDeadLetter:
    """A ``stage: sink`` dead letter (docs/contract.md §6 c, §20.1): the sink's name, the error, the
    record's place (``topic``, ``partition``, ``offset``) and the record's ``url``, ``appid`` and
    ``crawlid`` when they are strings (cut to DEAD_LETTER_FIELD_CHARS)."""
    return {
        "stage": "sink",
        "sink": sink,
        "error": error,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        **_record_ids(value),
        "server_time": server_time(),
    }


def _record_ids(value: Any) -> _RecordIds:
    """*value*'s ``url``, ``appid`` and ``crawlid`` when they are strings, cut to DEAD_LETTER_FIELD_CHARS."""
    ids: _RecordIds = {}
    if isinstance(value, dict):
        if isinstance(value.get("url"), str):
            ids["url"] = value["url"][:DEAD_LETTER_FIELD_CHARS]
        if isinstance(value.get("appid"), str):
            ids["appid"] = value["appid"][:DEAD_LETTER_FIELD_CHARS]
        if isinstance(value.get("crawlid"), str):
            ids["crawlid"] = value["crawlid"][:DEAD_LETTER_FIELD_CHARS]
    return ids


def cleaned_record(item: dict[str, Any], fields: dict[str, Any]) -> CleanedRecord:
    """The §13 record of a cleaned crawled *item*: the steps' *fields*, then any a plugin added."""
    record: CleanedRecord = {
        "appid": item["appid"],
        "crawlid": item["crawlid"],
        "url": item["url"],
        "response_url": item.get("response_url", item["url"]),
        "status_code": item["status_code"],
        "crawled_at": item["timestamp"],
        "cleaned_at": timestamp(),
        "title": fields.get("title"),
        "description": fields.get("description"),
        "text": fields.get("text"),
        "language": fields.get("language"),
        "published": fields.get("published"),
        "content_hash": fields.get("content_hash"),
        "pii_masked": int(fields.get("pii_masked") or 0),
        "attrs": item.get("attrs"),
    }
    extra = cast("dict[str, Any]", record)  # a plugin's keys, beyond the TypedDict's
    for name, value in fields.items():
        extra.setdefault(name, value)
    return record
