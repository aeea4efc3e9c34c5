"""The WARC sink (docs/contract.md §20.4): WARC/1.1 files of crawled pages, through warcio.

``warc:///dir/`` reads ``<prefix>.crawled_firehose`` (unless SINK_FROM says otherwise) and writes,
per page, a ``response`` record (status line, headers, payload) and a ``request`` record
(``WARC-Concurrent-To`` the response), each its own gzip member, into files named and rolled as the
files sink's (:mod:`crawlhive.sink.files`: ``<topic>/<partition>/<first>-<last>.warc.gz``, atomic,
SINK_ROLL_BYTES 64 MiB by default, written on the store's roller thread), each with a CDXJ index
beside it (``….cdxj``) that pywb and other replay tools read. warcio computes
``WARC-Block-Digest`` and ``WARC-Payload-Digest`` (``sha1:`` base32) over the payload as stored.

The payload is the body after content decoding (what the item carries): base64 bodies
(KAFKA_BASE_64_ENCODE, which this sink needs to know, as the crawlers do) are the exact bytes; a
text body is encoded back with its ``encoding`` (exact, except bytes the crawler could not decode,
stored as U+FFFD). So the headers decoding changed (``Content-Encoding``, ``Content-Length``,
``Transfer-Encoding``) are kept as ``X-Crawlhive-Original-<name>`` with the values received (the
item's ``original_headers``), and the stored ``Content-Length`` is the stored payload's. The status
line is ``<protocol> <status_code> <status_msg>`` (the standard reason phrase: Scrapy does not keep
the one received). Record ids are derived from the Kafka record (topic, partition, offset), so a
replayed range writes the same records again.

The SURT keys of the index are built here (host labels reversed, ``www.`` dropped, lower case):
pywb's ``surt`` package would be one more dependency for five lines.
"""

from __future__ import annotations

import base64
import binascii
import io
import ipaddress
import json
import uuid
from datetime import UTC
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from crawlhive.sink.fields import parse_time
from crawlhive.sink.files import FileStore, Pending, check_roll_settings, split_url
from crawlhive.sink.store import SinkRecord, WriteResult

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

#: SINK_ROLL_BYTES when it is 0, for WARC: as for the other files. It was 1 GiB, the customary
#: size of a WARC file, but a roll holds its records in memory and a 2-core machine encodes about
#: 18 MB/s: a 1 GiB roll per partition held gigabytes and took a minute (a setting raises it).
DEFAULT_WARC_ROLL_BYTES = 64 * 1024 * 1024
#: The headers decoding changes (docs/contract.md §20.4), in lower case.
DECODED = ("content-encoding", "content-length", "transfer-encoding")
ORIGINAL_PREFIX = "X-Crawlhive-Original-"
_RECORD_IDS = uuid.UUID("6f1f3c4e-4f7b-4b6e-9d8e-2a7c5b1d0c11")


def surt(url: str) -> str:
    """The SURT form of *url* for a CDXJ key: ``com,example)/path?query`` (an IP address as is)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower().removeprefix("www.")
    try:
        ipaddress.ip_address(host)
        labels = host  # an address is not reversed
    except ValueError:
        labels = ",".join(reversed(host.split(".")))
    port = f":{parts.port}" if parts.port and parts.port not in (80, 443) else ""
    path = parts.path or "/"
    query = f"?{parts.query}" if parts.query else ""
    return f"{labels}{port}){path}{query}".lower()


def _clean(value: str) -> str:
    """A header value that cannot break the record's header block (CR, LF and NUL as spaces)."""
    return value.replace("\r", " ").replace("\n", " ").replace("\x00", " ")


def _header_pairs(headers: Any) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    if not isinstance(headers, dict):
        return pairs
    for name, values in headers.items():
        if not isinstance(name, str) or not name or any(c in name for c in ": \t\r\n\x00"):
            continue
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, str):
                pairs.append((name, _clean(value)))
    return pairs


class WarcStore(FileStore):
    """WARC/1.1 files with CDXJ indexes (see the module docstring)."""

    kind = "warc"

    def __init__(
        self,
        url: str,
        base: str,
        roll_bytes: int,
        roll_seconds: float,
        base64_bodies: bool,
        max_held_bytes: int = 0,
    ) -> None:
        super().__init__(url, base, "jsonl", roll_bytes or DEFAULT_WARC_ROLL_BYTES, roll_seconds, max_held_bytes)
        self.ext = "warc.gz"
        self.base64_bodies = base64_bodies

    @classmethod
    def from_settings(cls, settings: Settings, url: str) -> Self:
        base, _ = split_url(url)
        base = "file://" + base.removeprefix("warc://") if base.startswith("warc://") else base
        check_roll_settings(settings)
        return cls(
            url,
            base,
            settings.SINK_ROLL_BYTES,
            settings.SINK_ROLL_SECONDS,
            settings.KAFKA_BASE_64_ENCODE,
            settings.SINK_MAX_HELD_BYTES,
        )

    def name_of(self, key: tuple[str, int], pending: Pending) -> str:
        """``<topic>/<partition>/<topic>-<partition>-<first>-<last>.warc.gz``: the folders of the
        files sink, and a name unique in the whole set, so the files of every partition can go in
        one folder (a pywb collection's ``archive/``, which knows a file by its name alone)."""
        topic, partition = key
        return f"{self.root}/{topic}/{partition}/{topic}-{partition}-{pending.first}-{pending.last}.{self.ext}"

    def write(self, records: list[SinkRecord]) -> WriteResult:
        """Gather the crawled items of *records*; anything else is rejected (a dead letter)."""
        accepted, rejected = [], []
        for record in records:
            problem = self._problem(record.value)
            if problem:
                rejected.append((record, problem))
            else:
                accepted.append(record)
        result = super().write(accepted)
        result.rejected += rejected
        return result

    def _problem(self, item: dict[str, Any]) -> str | None:
        url = item.get("response_url") or item.get("url")
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
            return "not a crawled item: no http(s) url"
        status = item.get("status_code")
        if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 999:
            return "not a crawled item: status_code is not an HTTP status"
        if not isinstance(item.get("body"), str):
            return "not a crawled item: no body"
        if self.base64_bodies:
            try:
                base64.b64decode(item["body"], validate=True)
            except (binascii.Error, ValueError):
                return "body is not base64 (KAFKA_BASE_64_ENCODE is true)"
        return None

    def payload(self, item: dict[str, Any]) -> bytes:
        body = item["body"]
        if self.base64_bodies:
            return base64.b64decode(body)
        encoding = item.get("encoding") if isinstance(item.get("encoding"), str) else "utf-8"
        try:
            return str(body).encode(str(encoding), errors="replace")
        except LookupError:
            return str(body).encode("utf-8", errors="replace")

    def _files(self, final: str, records: list[SinkRecord]) -> list[tuple[str, bytes]]:
        """The CDXJ index first, then the WARC file (each atomic): a WARC file always has its index."""
        data, index = self._encode_warc(records)
        filename = final.rsplit("/", 1)[1]
        lines = "".join(
            f"{key} {stamp} {json.dumps({**fields, 'filename': filename}, ensure_ascii=False)}\n"
            for key, stamp, fields in index
        )
        return [(final.removesuffix(".warc.gz") + ".cdxj", lines.encode()), (final, data)]

    def _encode_warc(self, records: list[SinkRecord]) -> tuple[bytes, list[tuple[str, str, dict[str, Any]]]]:
        """The WARC file of *records* and its CDXJ index entries (sorted)."""
        out = io.BytesIO()
        writer = WARCWriter(out, gzip=True, warc_version="1.1")
        index: list[tuple[str, str, dict[str, Any]]] = []
        for record in records:
            item = record.value
            url = str(item.get("response_url") or item["url"])
            when = parse_time(item.get("timestamp"))
            date = (when or parse_time("1970-01-01T00:00:00")).astimezone(UTC)  # type: ignore[union-attr]
            warc_date = date.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            payload = self.payload(item)
            received = _header_pairs(item.get("response_headers"))
            originals = _header_pairs(item.get("original_headers"))
            if not originals:  # an item of an earlier release: what decoding changed is in its headers
                originals = [(n, v) for n, v in received if n.lower() in DECODED]
            headers = [(n, v) for n, v in received if n.lower() not in DECODED]
            headers += [(f"{ORIGINAL_PREFIX}{n}", v) for n, v in originals]
            headers.append(("Content-Length", str(len(payload))))
            protocol = str(item["protocol"]) if isinstance(item.get("protocol"), str) else "HTTP/1.1"
            reason = _clean(str(item.get("status_msg") or ""))
            origin = f"{record.topic}/{record.partition}/{record.offset}"
            response_id = f"<urn:uuid:{uuid.uuid5(_RECORD_IDS, origin + '/response')}>"
            response = writer.create_warc_record(
                url,
                "response",
                payload=io.BytesIO(payload),
                length=len(payload),
                http_headers=StatusAndHeaders(
                    f"{item['status_code']} {reason}".strip(), headers, protocol=_clean(protocol)
                ),
                warc_headers_dict={"WARC-Date": warc_date, "WARC-Record-ID": response_id},
            )
            target = urlsplit(str(item.get("url") or url))
            path = (target.path or "/") + (f"?{target.query}" if target.query else "")
            request_headers = _header_pairs(item.get("request_headers"))
            if not any(n.lower() == "host" for n, _ in request_headers) and target.netloc:
                request_headers.insert(0, ("Host", target.netloc))
            request = writer.create_warc_record(
                str(item.get("url") or url),
                "request",
                payload=io.BytesIO(b""),
                length=0,
                http_headers=StatusAndHeaders(
                    f"GET {_clean(path)} {_clean(protocol)}", request_headers, is_http_request=True
                ),
                warc_headers_dict={
                    "WARC-Date": warc_date,
                    "WARC-Record-ID": f"<urn:uuid:{uuid.uuid5(_RECORD_IDS, origin + '/request')}>",
                    "WARC-Concurrent-To": response_id,
                },
            )
            start = out.tell()
            writer.write_record(response)
            length = out.tell() - start
            writer.write_record(request)
            mime = next((v for n, v in headers if n.lower() == "content-type"), "")
            index.append(
                (
                    surt(url),
                    date.strftime("%Y%m%d%H%M%S"),
                    {
                        "url": url,
                        "mime": mime.split(";")[0].strip(),
                        "status": str(item["status_code"]),
                        "digest": response.rec_headers.get_header("WARC-Payload-Digest"),
                        "length": str(length),
                        "offset": str(start),
                    },
                )
            )
        return out.getvalue(), sorted(index, key=lambda entry: (entry[0], entry[1]))
