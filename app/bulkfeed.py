"""Bulk seeding: ``crawlhive feed --file PATH --appid A --crawlid C`` (docs/contract.md §14).

One crawl request per line of PATH: a URL (becomes ``{"url", "appid", "crawlid"}`` plus the
``--set-field`` values) or a JSON crawl request (its own fields win over those). Blank lines and
lines starting with ``#`` are skipped. Each request is validated as the kafka-monitor validates
(same schemas, checks and limits); rejected lines are listed with their number and reason, the
others are produced to ``<prefix>.incoming`` without waiting for each acknowledgement (the
producer batches them), and the command ends only when the broker has acknowledged every one.

The file is read as a stream (any size); progress is shown on stderr: a line rewritten in place on
a terminal, one line every few seconds otherwise. A small hand-written progress line rather than a
progress-bar library: it is one line of output, and the lean install (docs/contract.md §17.7)
carries no extra package for it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from crawlhive.app.signals import Shutdown
from crawlhive.utils.config.errors import SettingsError
from crawlhive.utils.contract.encoding import encode

if TYPE_CHECKING:
    from crawlhive.utils.backends.rdkafka import RdKafkaSendProducer
    from crawlhive.utils.config.settings import Settings
    from crawlhive.utils.contract.validation import RequestValidator

#: Rejected lines listed one by one; beyond this only their count is given.
LISTED_REJECTIONS = 1000
#: Seconds between two progress lines when stderr is not a terminal.
PLAIN_PROGRESS_EVERY_S = 5.0
#: Seconds between two redraws of the progress line on a terminal.
TTY_PROGRESS_EVERY_S = 0.2


@dataclass
class BulkResult:
    """What a bulk feed did."""

    lines: int = 0
    """Lines read that held a request (blank and ``#`` lines not counted)."""
    sent: int = 0
    """Requests the broker acknowledged."""
    rejected: list[tuple[int, str]] = field(default_factory=list)
    """``(line number, reason)`` of the first LISTED_REJECTIONS rejected lines."""
    rejected_count: int = 0
    failed: int = 0
    """Requests produced but not acknowledged (a Kafka problem)."""
    first_error: str = ""
    interrupted: bool = False
    """Ctrl-C stopped the reading; what was produced until then was still delivered."""


def parse_fields(pairs: list[str]) -> dict[str, Any]:
    """``--set-field NAME=JSON`` values (``maxdepth=2``, ``allowed_domains=["a.com"]``; a value that
    is not JSON is taken as a string).

    Raises:
        SettingsError: a pair without ``=``.
    """
    fields: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name.strip():
            raise SettingsError(f"--set-field: expected NAME=JSON, got {pair!r}")
        try:
            fields[name.strip()] = json.loads(raw)
        except ValueError:
            fields[name.strip()] = raw
    return fields


class _Progress:
    """The progress line on stderr (see the module docstring)."""

    def __init__(self, out: IO[str], total_bytes: int) -> None:
        self.out = out
        self.total = total_bytes
        self.tty = out.isatty()
        self.started = time.monotonic()
        self.next_at = 0.0
        self.shown = False

    def show(self, done_bytes: int, result: BulkResult, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now < self.next_at:
            return
        self.next_at = now + (TTY_PROGRESS_EVERY_S if self.tty else PLAIN_PROGRESS_EVERY_S)
        if not self.tty and not final and now - self.started < PLAIN_PROGRESS_EVERY_S:
            return
        rate = result.lines / max(now - self.started, 1e-9)
        share = f"{100.0 * done_bytes / self.total:5.1f}% " if self.total else ""
        line = (
            f"feed: {share}{result.lines:,} lines, {result.lines - result.rejected_count:,} valid, "
            f"{result.rejected_count:,} rejected, {rate:,.0f} lines/s"
        )
        if self.tty:
            print(f"\r{line}   ", end="" if not final else "\n", file=self.out, flush=True)
        else:
            print(line, file=self.out, flush=True)
        self.shown = True

    def say(self, text: str) -> None:
        """A line of its own (a rejected line), not overwritten by the progress line."""
        if self.tty and self.shown:
            print("\r\x1b[K", end="", file=self.out)
        print(text, file=self.out, flush=True)


class BulkFeeder:
    """Validates and produces the requests of a file (see the module docstring).

    Args:
        settings: the topic prefix, KAFKA_FEED_TIMEOUT and the validator's settings.
        producer: a Kafka producer.
        validator: the kafka-monitor's validator (None: send without validating).
        defaults: fields every request gets unless its line sets them (``appid``, ``crawlid`` and
            the ``--set-field`` values).
    """

    def __init__(
        self,
        settings: Settings,
        producer: RdKafkaSendProducer,
        validator: RequestValidator | None,
        defaults: dict[str, Any],
    ) -> None:
        self.settings = settings
        self.producer = producer
        self.validator = validator
        self.defaults = defaults
        self.topic = settings.topic("incoming")
        self._lock = threading.Lock()
        self._acked = 0
        self._failed = 0
        self._first_error = ""
        self._produced = 0

    def request_of(self, raw: bytes) -> tuple[Any, str | None]:
        """The request a line stands for, or the reason it cannot be one."""
        text = raw.decode("utf-8", errors="replace").strip()
        if text.startswith("{"):
            try:
                value = json.loads(text)
            except ValueError as exc:
                return None, f"Invalid request: not JSON: {exc}"
            if not isinstance(value, dict):
                return None, "Invalid request: request must be a JSON object"
            return {**self.defaults, **value}, None
        return {**self.defaults, "url": text}, None

    def check(self, request: Any) -> str | None:
        """Why the kafka-monitor would refuse *request* as a crawl request, or None."""
        if self.validator is None:
            return None
        from crawlhive.utils.contract.validation import Accepted

        outcome = self.validator.validate(request)
        if isinstance(outcome, Accepted):
            if outcome.plugin.kind != "crawl":
                return f"Invalid request: a {outcome.plugin.kind} request, not a crawl request"
            return None
        return outcome.reason

    def _acked_one(self, _meta: Any) -> None:
        with self._lock:
            self._acked += 1

    def _failed_one(self, exc: BaseException) -> None:
        with self._lock:
            self._failed += 1
            if not self._first_error:
                self._first_error = f"{type(exc).__name__}: {exc}"

    def run(self, handle: IO[bytes], progress: _Progress) -> BulkResult:
        """Feed every line of *handle*; returns once every produced record is acknowledged or
        failed (at most KAFKA_FEED_TIMEOUT after the last one)."""
        result = BulkResult()
        try:
            produced = self._feed(handle, progress, result)
        except Shutdown:
            result.interrupted = True
            produced = self._produced
        self.producer.flush(timeout=self.settings.KAFKA_FEED_TIMEOUT)
        with self._lock:
            result.sent, result.failed, result.first_error = self._acked, self._failed, self._first_error
        result.failed += produced - result.sent - result.failed  # never answered within the time-out
        progress.show(progress.total, result, final=True)
        return result

    def _feed(self, handle: IO[bytes], progress: _Progress, result: BulkResult) -> int:
        """Read, validate and produce every line; returns how many records were produced."""
        for number, raw in enumerate(handle, start=1):
            stripped = raw.strip()
            if not stripped or stripped.startswith(b"#"):
                continue
            result.lines += 1
            request, reason = self.request_of(stripped)
            if reason is None:
                reason = self.check(request)
            if reason is not None:
                result.rejected_count += 1
                if len(result.rejected) < LISTED_REJECTIONS:
                    result.rejected.append((number, reason))
                    progress.say(f"line {number}: {reason}")
                elif result.rejected_count == LISTED_REJECTIONS + 1:
                    progress.say(f"more rejected lines follow; only the first {LISTED_REJECTIONS} are listed")
            else:
                future = self.producer.send(self.topic, encode(request))
                future.add_callback(self._acked_one)
                future.add_errback(self._failed_one)
                self._produced += 1
            progress.show(handle.tell() if handle.seekable() else 0, result)
        return self._produced


def feed_file(
    settings: Settings, path: str, defaults: dict[str, Any], validate: bool = True, out: IO[str] | None = None
) -> BulkResult:
    """Feed the crawl requests of the file at *path* (``-`` for stdin); see :class:`BulkFeeder`.

    Raises:
        SettingsError: the file cannot be read (names the path).
        BackendUnavailable: no broker (names KAFKA_BOOTSTRAP_SERVERS).
    """
    from crawlhive.utils.backends.kafka_clients import make_producer
    from crawlhive.utils.process.intake import request_validator

    stream = out if out is not None else sys.stderr
    try:
        handle: IO[bytes] = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise SettingsError(f"--file: cannot read {path}: {exc.strerror}") from exc
    try:
        size = os.fstat(handle.fileno()).st_size if path != "-" else 0
        validator = request_validator(settings) if validate else None
        producer = make_producer(settings)
        try:
            feeder = BulkFeeder(settings, producer, validator, defaults)
            return feeder.run(handle, _Progress(stream, size))
        finally:
            producer.close(timeout=5)
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()
