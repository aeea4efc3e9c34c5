"""Builders of the records crawlhive emits (docs/contract.md §6, §13): dead letters of every stage
and the cleaned record. Each field of a record is named here once; the services fill them in."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from crawlhive.utils.contract.encoding import encode
from crawlhive.utils.contract.validation import parse_json

if TYPE_CHECKING:
    from crawlhive.utils.frontier.model import FrontierRequest

#: Characters of the original text kept in a dead letter whose full payload is too large (docs/contract.md §6).
TRUNCATED_PAYLOAD_CHARS = 65536
#: Characters of a rejection reason kept when the dead letter is too large (a jsonschema message
#: quotes the offending value, which may be megabytes long).
TRUNCATED_ERROR_CHARS = 1024
#: Extra bytes a dead-letter record may need beyond its JSON (Kafka record and batch headers).
DEAD_LETTER_OVERHEAD_BYTES = 4096
#: Characters of an item's url, appid or crawlid a ``clean`` dead letter keeps.
DEAD_LETTER_FIELD_CHARS = 4096


def server_time() -> int:
    """``server_time`` of an outbound message: epoch seconds now."""
    return int(time.time())


def timestamp(now: datetime | None = None) -> str:
    """UTC ``YYYY-MM-DDTHH:MM:SS.ffffff`` (always 6 fractional digits, no offset)."""
    return (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%f")


def _copy_ids(letter: dict[str, Any], source: Any, names: tuple[str, ...] = ("uuid", "appid")) -> None:
    """Copy *source*'s string fields *names* into *letter* (a dead letter says whose request it was)."""
    if isinstance(source, dict):
        for name in names:
            if isinstance(source.get(name), str):
                letter[name] = source[name]


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
    letter: dict[str, Any] = {"stage": "validation", "error": reason, "payload": payload}
    _copy_ids(letter, payload)
    letter["server_time"] = server_time()
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


def _encode(letter: dict[str, Any]) -> bytes | None:
    """*letter* encoded (:func:`encode`); None when it cannot be (nesting too deep)."""
    try:
        return encode(letter)
    except (ValueError, TypeError, OverflowError, RecursionError):
        return None


def crawl_dead_letter(request: FrontierRequest, error: str, server_time: int | None = None) -> dict[str, Any]:
    """The crawl dead letter (docs/contract.md §6 b) of *request*, which failed permanently with *error*
    (``"<ExceptionClass>: <message>"``, ``"lease expired"``, or the item-too-large text)."""
    return {
        "stage": "crawl",
        "error": error,
        "url": request.url,
        "appid": request.appid,
        "crawlid": request.crawlid,
        "spiderid": request.spiderid,
        "retry_times": request.retry_times,
        "server_time": int(time.time()) if server_time is None else server_time,
    }


def control_dead_letter(error: str, payload: Any, ids_from: Any = None) -> dict[str, Any]:
    """A ``stage: control`` dead letter (docs/contract.md §6 a's shape): a control request that
    cannot be answered (*payload*: the request, or its raw text), or an answer that cannot be sent
    (*payload* None, *ids_from* the answer). ``uuid`` / ``appid`` are copied from *ids_from*
    (default: *payload*) when they are strings."""
    letter: dict[str, Any] = {"stage": "control", "error": error, "payload": payload}
    _copy_ids(letter, payload if ids_from is None else ids_from)
    letter["server_time"] = server_time()
    return letter


def clean_dead_letter(item: Any, error: str) -> dict[str, Any]:
    """A ``stage: clean`` dead letter (docs/contract.md §6, §13); the item's ``url``, ``appid``
    and ``crawlid`` are cut to DEAD_LETTER_FIELD_CHARS (a hostile record's could be too large
    to produce)."""
    return _record_dead_letter({"stage": "clean", "error": error}, item)


def sink_dead_letter(sink: str, error: str, value: Any, topic: str, partition: int, offset: int) -> dict[str, Any]:
    """A ``stage: sink`` dead letter (docs/contract.md §6 c, §20.1): the sink's name, the error, the
    record's place (``topic``, ``partition``, ``offset``) and the record's ``url``, ``appid`` and
    ``crawlid`` when they are strings (cut to DEAD_LETTER_FIELD_CHARS)."""
    head = {"stage": "sink", "sink": sink, "error": error, "topic": topic, "partition": partition, "offset": offset}
    return _record_dead_letter(head, value)


def _record_dead_letter(letter: dict[str, Any], value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        for name in ("url", "appid", "crawlid"):
            if isinstance(value.get(name), str):
                letter[name] = value[name][:DEAD_LETTER_FIELD_CHARS]
    letter["server_time"] = server_time()
    return letter


def cleaned_record(item: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """The §13 record of a cleaned crawled *item*: the steps' *fields*, then any a plugin added."""
    record: dict[str, Any] = {
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
    for name, value in fields.items():
        record.setdefault(name, value)
    return record
