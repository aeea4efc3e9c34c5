"""One crawled item on its way through the cleaner's steps (docs/contract.md §13)."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

#: Keys a record must have to be a crawled item (docs/contract.md §5).
ITEM_KEYS = ("appid", "crawlid", "url", "status_code", "response_headers", "body", "encoding", "timestamp")
#: Content types that are cleaned; other items are skipped.
HTML_TYPES = ("text/html", "application/xhtml+xml")


class NotAnItem(ValueError):
    """The input record is not a crawled item (the message says why): a dead letter."""


class Skip(Exception):  # noqa: N818 - an outcome, not an error
    """The item is not cleaned (not 2xx, not HTML): counted, nothing is produced."""


class Reject(Exception):  # noqa: N818 - an outcome, not an error
    """The item becomes a ``stage: clean`` dead letter with this message as ``error``."""


def too_long(max_seconds: float) -> Reject:
    """The dead letter of a page that took more than CLEANER_MAX_SECONDS to clean."""
    return Reject(f"cleaning took too long (over CLEANER_MAX_SECONDS = {max_seconds:g} s)")


class Duplicate(Exception):  # noqa: N818 - an outcome, not an error
    """The crawl already emitted this content: counted, nothing is produced."""


class NearDuplicate(Duplicate):
    """A near-duplicate of an earlier record of the appid, dropped (NEAR_DUPLICATES ``drop``,
    docs/contract.md §26.1): counted as a near-duplicate, nothing is produced."""


@dataclass
class Page:
    """A crawled item being cleaned.

    Attributes:
        item: the crawled item as received.
        html: its body as text (decoded from base64 when the crawler sent it so).
        record: the cleaned record being built; the steps fill in its fields.
        origin: where the item came from (``topic/partition/offset``).
        extra: what one step leaves for a later one (the extraction's document, …).
        spent: seconds the steps have spent on this page so far (CLEANER_MAX_SECONDS).
    """

    item: dict[str, Any]
    html: str
    origin: str
    record: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    spent: float = 0.0

    @classmethod
    def from_item(cls, item: Any, origin: str) -> Page:
        """The page of a decoded firehose record.

        Raises:
            NotAnItem: *item* is not a crawled item.
            Skip: not a 2xx HTML page.
        """
        if not isinstance(item, dict):
            raise NotAnItem("not a crawled item: not a JSON object")
        missing = [k for k in ITEM_KEYS if k not in item]
        if missing:
            raise NotAnItem(f"not a crawled item: no {', '.join(missing)}")
        status = item["status_code"]
        if not isinstance(status, int) or not isinstance(item["body"], str) or not isinstance(item["url"], str):
            raise NotAnItem("not a crawled item: status_code, url or body of the wrong type")
        if not 200 <= status < 300:
            raise Skip(f"status {status}")
        if not is_html(item.get("response_headers")):
            raise Skip("not HTML")
        return cls(item=item, html=body_text(item["body"], str(item.get("encoding") or "utf-8")), origin=origin)


def is_html(headers: Any) -> bool:
    """Whether the item's ``Content-Type`` is HTML (a missing one counts as HTML, as browsers do)."""
    if not isinstance(headers, dict):
        return False
    for name, values in headers.items():
        if str(name).lower() == "content-type":
            value = values[0] if isinstance(values, list) and values else values
            media = str(value or "").split(";", 1)[0].strip().lower()
            return media in HTML_TYPES or not media
    return True


def body_text(body: str, encoding: str) -> str:
    """The HTML text of an item's ``body``: as sent, or decoded when the crawler sent it as base64
    (KAFKA_BASE_64_ENCODE; the item does not say so, but base64 text holds no ``<`` and HTML does)."""
    if "<" in body:
        return body
    try:
        raw = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        return body
    try:
        return raw.decode(encoding, errors="replace")
    except LookupError:  # an encoding name Python does not know
        return raw.decode("utf-8", errors="replace")
