"""The crawled item of docs/contract.md §5, built from a response (its keys and their types:
:class:`~crawlhive.utils.contract.records.CrawledRecord`).

:class:`CrawledItem` is a ``dict`` (so Scrapy treats it as an item and it encodes as JSON as is) that
also carries, as an attribute, the lease of the request it came from, for the Kafka pipeline.
"""

from __future__ import annotations

import base64
import functools
import http
from typing import TYPE_CHECKING, Any

from scrapy.http import TextResponse

from crawlhive.utils.contract.records import CrawledRecord, timestamp

#: Request meta key of the rung a request is fetched on: ``"plain"`` or ``"impersonate"``
#: (docs/contract.md §25; crawler/fetch.py chooses, crawler/impersonate.py fetches).
FETCH_META = "crawlhive_fetch"
#: Request meta key: the page's item says its rung (``fetch``; its mode was not plain).
FETCH_RECORD_META = "crawlhive_fetch_recorded"
#: Request meta key: why the ``auto`` ladder stopped below the render rung (the item's ``fetch_stopped``).
FETCH_STOPPED_META = "crawlhive_fetch_stopped"

if TYPE_CHECKING:
    from scrapy.http import Response
    from scrapy.http.headers import Headers

    from crawlhive.crawler.leases import LeaseContext
    from crawlhive.crawler.links import FoundLink

ITEM_KEYS = (
    "appid",
    "crawlid",
    "url",
    "response_url",
    "status_code",
    "status_msg",
    "response_headers",
    "request_headers",
    "body",
    "encoding",
    "links",
    "attrs",
    "timestamp",
    "protocol",
    "original_headers",
)
"""The keys of every crawled item, no others (docs/contract.md §5); the last two were added for
archives (§20.4) and may be missing from items of earlier releases (and ``body_ref`` is added to a
large page's item, §20.5; ``fetch`` to the item of a page whose fetch mode was not plain, §25)."""

#: ``request.meta`` key under which the crawler keeps the headers decoding changes, as received.
ORIGINAL_HEADERS_META = "crawlhive_original_headers"
#: The headers decoding a body changes or removes (docs/contract.md §20.4).
DECODED_HEADERS = ("Content-Encoding", "Content-Length", "Transfer-Encoding")


def original_headers(headers: Headers) -> dict[str, list[str]]:
    """The DECODED_HEADERS of *headers* (a response as received, before decoding)."""
    found: dict[str, list[str]] = {}
    for name in DECODED_HEADERS:
        values = headers.getlist(name)
        if values:
            found[name] = [_text(v) for v in values]
    return found


class CrawledItem(dict[str, Any]):
    """A crawled item; ``context`` is the lease it answers (None for an item of no lease)."""

    context: LeaseContext | None = None


def status_message(code: int) -> str:
    """The standard reason phrase of *code* (``404`` -> ``"Not Found"``), ``"Unknown"`` if none."""
    try:
        return http.HTTPStatus(code).phrase
    except ValueError:
        return "Unknown"


def _text(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("latin-1")


#: What an item shows instead of the value of a header named in ITEM_REDACT_HEADERS.
REDACTED = "[redacted]"


@functools.lru_cache(maxsize=1024)
def secret_header(name: str, names: frozenset[str] = frozenset(), words: tuple[str, ...] = ()) -> bool:
    """Whether an item hides the value of header *name*: it is one of *names* or contains one of
    *words* (ITEM_REDACT_HEADERS, ITEM_REDACT_HEADER_WORDS, both in lower case), case-insensitively.

    Remembered: a crawler asks it for the same few request header names on every page (a search
    of every word in every name was 2 % of a crawler's CPU). The names are those of the requests
    crawlhive and its users' spiders build, and the cache is bounded, so a hostile site cannot
    grow it."""
    lowered = name.lower()
    return lowered in names or any(word in lowered for word in words)


def header_lists(
    headers: Headers, redact: frozenset[str] = frozenset(), words: tuple[str, ...] = ()
) -> dict[str, list[str]]:
    """Header name (as Scrapy normalises it) -> list of values, decoded as UTF-8 or else latin-1;
    the values of :func:`secret_header` headers are ``"[redacted]"`` (docs/contract.md §10.6)."""
    lists: dict[str, list[str]] = {}
    redacting = bool(redact or words)
    for raw_name, values in headers.items():
        name = _text(raw_name)
        hidden = redacting and secret_header(name, redact, words)
        lists[name] = [REDACTED if hidden else _text(v) for v in values]
    return lists


def body_fields(response: Response, base64_encode: bool) -> tuple[str, str]:
    """``(body, encoding)`` of *response* per docs/contract.md §5: text for text responses (undecodable bytes
    as U+FFFD), latin-1 for others, or base64 of the raw bytes with the same ``encoding``."""
    if isinstance(response, TextResponse):
        encoding = response.encoding
        text = None if base64_encode else response.text
    else:
        encoding, text = "latin-1", None if base64_encode else response.body.decode("latin-1")
    if text is None:
        text = base64.b64encode(response.body).decode("ascii")
    return text, encoding


def crawled_item(
    response: Response,
    links: list[FoundLink],
    *,
    url: str,
    appid: str,
    crawlid: str,
    attrs: dict[str, Any] | None,
    base64_encode: bool,
    redact: frozenset[str] = frozenset(),
    redact_words: tuple[str, ...] = (),
) -> CrawledItem:
    """The item of *response*; *url* is the URL the request asked for, before redirects; the
    request headers named in *redact* or containing one of *redact_words* (lower case) are redacted."""
    body, encoding = body_fields(response, base64_encode)
    request = response.request
    record: CrawledRecord = {
        "appid": appid,
        "crawlid": crawlid,
        "url": url,
        "response_url": response.url,
        "status_code": response.status,
        "status_msg": status_message(response.status),
        "response_headers": header_lists(response.headers),
        "request_headers": header_lists(request.headers, redact, redact_words) if request is not None else {},
        "body": body,
        "encoding": encoding,
        "links": links,
        "attrs": attrs,
        "timestamp": timestamp(),
        "protocol": getattr(response, "protocol", None),
        "original_headers": (request.meta.get(ORIGINAL_HEADERS_META) if request is not None else None) or {},
    }
    if request is not None and request.meta.get(FETCH_RECORD_META):  # the rung that fetched it (§25)
        record["fetch"] = str(request.meta.get(FETCH_META) or "plain")
        if request.meta.get(FETCH_STOPPED_META):  # a wall at impersonate the render rung could not take (§25.5)
            record["fetch_stopped"] = str(request.meta[FETCH_STOPPED_META])
    return CrawledItem(record)
