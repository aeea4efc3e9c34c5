"""Logging, configured once per process by ``main()`` from LOG_LEVEL, LOG_JSON and LOG_FILE.

Every module logs through ``logging.getLogger(__name__)`` with lazy %-arguments and puts ids such as
``crawlid``, ``appid`` and ``spiderid`` in ``extra=``; the JSON formatter emits them as fields.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

from crawlhive.utils.config.errors import SettingsError
from crawlhive.utils.contract.text import printable

#: Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, exception, plus ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            data["exc_info"] = self.formatException(record.exc_info)
        for name, value in vars(record).items():
            if name not in _STANDARD and not name.startswith("_"):
                data[name] = value
        return json.dumps(data, default=str)


class EscapeArguments(logging.Filter):
    """Escapes control characters (:func:`printable`) in the string arguments of crawlhive's own log
    lines: their format strings are ours, their arguments may be a client's (an ``appid``, a URL, a
    rejection reason), and a newline in one would forge a log line. Other libraries' lines (Scrapy's
    multi-line settings dumps) are left as they are; JSON lines are escaped by JSON itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if record.name.startswith("crawlhive") and isinstance(args, tuple) and args:
            record.args = tuple(printable(a) if isinstance(a, str) else a for a in args)
        return True


PLAIN_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
#: Shortest secret that is masked (masking one or two characters everywhere would garble the log).
MIN_SECRET_LENGTH = 3


def redact(text: str, secrets: list[str]) -> str:
    """*text* with each of *secrets* (at least MIN_SECRET_LENGTH long) replaced by ``***``."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= MIN_SECRET_LENGTH and secret in text:
            text = text.replace(secret, "***")
    return text


#: Words a URL query parameter's name contains when its value is a secret (``?password=``,
#: ``?ssl_password=``, ``?token=``, ``?api_key=``): masked like a password.
SECRET_QUERY_WORDS = ("password", "pass", "secret", "token", "key")
MASK = "***"


def _split_seed(seed: str) -> tuple[SplitResult, bool]:
    """``(parts, bare)``: a seed without a scheme (``:pw@h2:2``, ``h2:2``) is read as ``//seed``."""
    bare = "://" not in seed
    return urlsplit(f"//{seed}" if bare else seed), bare


def _secret_query_name(name: str) -> bool:
    lowered = unquote(name).lower()
    return any(word in lowered for word in SECRET_QUERY_WORDS)


def _mask_seed(seed: str) -> str:
    parts, bare = _split_seed(seed)
    netloc = parts.netloc
    userinfo, at, hostport = netloc.rpartition("@")
    if at:
        user, colon, _password = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{hostport}" if colon else netloc
    pairs = []
    for pair in parts.query.split("&") if parts.query else []:
        name, equals, _value = pair.partition("=")
        pairs.append(f"{name}={MASK}" if equals and _secret_query_name(name) else pair)
    query, fragment = "&".join(pairs), parts.fragment  # by hand: urlunsplit drops unix://'s empty host
    scheme = "" if bare else f"{parts.scheme}://"
    return f"{scheme}{netloc}{parts.path}" + (f"?{query}" if query else "") + (f"#{fragment}" if fragment else "")


def mask_url(url: str) -> str:
    """*url* with every secret replaced by ``***``, for messages, logs and printed addresses: the
    password of each seed of a comma-separated list (``redis://:pw1@h1:1,redis://:pw2@h2:2``,
    ``redis://:pw@h1:1,h2:2``) and the value of each query parameter whose name contains one of
    SECRET_QUERY_WORDS (``?password=``). The one masking function: everything that prints a URL
    uses it."""
    try:
        return ",".join(_mask_seed(seed) for seed in url.split(","))
    except ValueError:
        return "<unparsable URL>"


def url_secrets(url: str) -> list[str]:
    """The secrets :func:`mask_url` hides in *url*, as written and percent-decoded (so that
    :class:`RedactingFormatter` masks them wherever a library writes them)."""
    found: list[str] = []
    for seed in url.split(","):
        try:
            parts, _ = _split_seed(seed.strip())
        except ValueError:
            continue
        userinfo, at, _ = parts.netloc.rpartition("@")
        values = [userinfo.partition(":")[2]] if at else []
        for pair in parts.query.split("&") if parts.query else []:
            name, _, value = pair.partition("=")
            if _secret_query_name(name):
                values.append(value)
        for value in values:
            found += [value, unquote(value)] if value else []
    return found


class RedactingFormatter(logging.Formatter):
    """Another formatter's lines with every secret replaced by ``***`` (docs/contract.md §10.6):
    messages, extra fields and tracebacks alike, whichever library wrote them (kafka-python logs
    its whole configuration, SASL password included, at DEBUG)."""

    def __init__(self, inner: logging.Formatter, secrets: list[str]) -> None:
        super().__init__()
        self.inner = inner
        self.secrets = sorted({s for s in secrets if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True)

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.inner.format(record), self.secrets)

    def add(self, secrets: list[str]) -> None:
        """Mask *secrets* too from now on (one list replaced at once: safe with other threads logging)."""
        found = {s for s in secrets if len(s) >= MIN_SECRET_LENGTH}
        self.secrets = sorted(found.union(self.secrets), key=len, reverse=True)


#: Secrets learnt after start-up (:func:`add_secrets`), masked by every handler configured later too.
_LATE_SECRETS: set[str] = set()


def add_secrets(secrets: list[str]) -> None:
    """Mask *secrets* in every line our log handler writes from now on: credentials the process
    learns after :func:`configure_logging` ran (a PROXY_POOLS_FILE read again, with new proxies)."""
    new = {s for s in secrets if len(s) >= MIN_SECRET_LENGTH} - _LATE_SECRETS
    if not new:
        return
    _LATE_SECRETS.update(new)
    for handler in logging.getLogger().handlers:
        if not getattr(handler, "_crawlhive", False):
            continue
        formatter = handler.formatter
        if isinstance(formatter, RedactingFormatter):
            formatter.add(sorted(new))
        else:
            handler.setFormatter(RedactingFormatter(formatter or logging.Formatter(PLAIN_FORMAT), sorted(new)))


#: Loggers whose INFO lines are start-up and shutdown details nobody needs to act on (Scrapy's
#: version, settings and component lists, server banners, our own start-up bookkeeping): they are
#: shown at DEBUG only, so that ``crawlhive up`` stays readable (docs/contract.md §17.4).
DETAIL_LOGGERS = (
    "scrapy.utils.log",
    "scrapy.addons",
    "scrapy.middleware",
    "scrapy.crawler",
    "scrapy.core.engine",
    "scrapy.extensions.logstats",
    "scrapy.extensions.telnet",
    "uvicorn.error",
    "crawlhive.utils.process.plugins",
    "crawlhive.app.embedded",
    "crawlhive.utils.backends.redis_clients",
    "crawlhive.utils.backends.kafka_clients",
    "crawlhive.app.up",
    "scrapy.statscollectors",
    "scrapy-playwright",  # rendering crawlers: its versions, browser launched, handler closing
)
#: Messages of DETAIL_LOGGERS kept at INFO: they say something happened that a person may wait for.
_KEPT = ("Received SIG", "shutting down gracefully")


#: (logger prefix, part of the message) of library messages that need no action: shown at DEBUG
#: only (docs/contract.md §17.3). kafka-python 3.0 can still deliver a read to a transport it has
#: just closed (its socket is None then) and logs that with a traceback; nothing is lost, the
#: client is going away. It also warns when one step of its own network loop took over 100 ms,
#: which happens when the machine is busy (seen during start-up on 2 loaded cores); its requests
#: time out and are retried by its own rules, which log what matters. A consumer closed while it
#: was still joining its group (Ctrl-C just after a start) has no membership the broker knows, so
#: its "leave the group" request fails (an ERROR of kafka-python's); leaving is a courtesy that
#: lets the group rebalance at once, without it the broker drops the member after its session.
#: A client closed while its metadata refresh is in flight (a consumer's poll asks for one when
#: its assignment or a leader changes) closes its connections before it stops the refresh, which
#: then fails on the closed connection ("Cancelled", or "Transport closed for writes" when the
#: request was about to be written; seen at Ctrl-C of `up`, reproduced by closing consumers
#: right after ``request_update``): the client is going away, nothing is lost. "Transport
#: closed for writes" is otherwise only a connection kafka-python aborted itself, which the
#: connection noise below covers.
EXPECTED_ON_CLOSE = (
    ("kafka.cluster", "Metadata refresh: failed Cancelled"),
    ("kafka", "Transport closed for writes"),
    ("kafka.net.transport", "(closed)>: Error receiving network data"),
    ("kafka.net.selector", "It is blocking the event loop"),
    ("kafka.coordinator", "LeaveGroup request"),
)


#: Parts of kafka-python's messages about a broker it cannot reach (refused, lost, no node, the
#: coordinator marked dead): several lines a second while a broker is down, each retried by its own
#: rules. crawlhive's loops report the outage itself, once, naming KAFKA_BOOTSTRAP_SERVERS
#: (:class:`crawlhive.utils.process.loop.Outage`, ``Backoff``), so these are shown at DEBUG only.
KAFKA_CONNECTION_NOISE = (
    "KafkaConnectionError",
    "ECONNREFUSED",
    "socket disconnected",
    "No node available",
    "Marking the coordinator dead",
    "NodeNotReadyError",
    "Connection lost",
    "Connection reset by peer",
    "Broken pipe",
)


def _kafka_connection_noise(record: logging.LogRecord) -> bool:
    """A kafka-python line about a broker connection that failed: one of KAFKA_CONNECTION_NOISE, or
    a traceback of a connection the broker reset or closed (``ConnectionError``: seen in CI when the
    embedded broker of an exited ``up`` went away under a crawler's read)."""
    if not record.name.startswith("kafka"):
        return False
    if record.exc_info and isinstance(record.exc_info[1], ConnectionError):
        return True
    try:
        text = record.getMessage()
    except Exception:  # noqa: BLE001 - a library's malformed log call: leave it as it is
        return False
    return any(part in text for part in KAFKA_CONNECTION_NOISE)


def _closed_socket(record: logging.LogRecord) -> bool:
    """A kafka-python 3.0 network task that failed on a socket its client had just closed (fd -1):
    logged as "Unhandled exception in task" with a traceback while a client closes at Ctrl-C;
    nothing is lost, the client is going away (seen once in CI at the stop of `up`)."""
    exc = record.exc_info[1] if record.exc_info else None
    while exc is not None:
        if "fd=-1" in str(exc) or "Invalid file descriptor: -1" in str(exc):
            return True
        exc = exc.__context__
    return False


#: (logger, part of the message) of the lines a process logs when the first SIGINT/SIGTERM starts its
#: graceful stop: crawlhive's own (:func:`crawlhive.utils.process.loop.install_stop_handlers`) and Scrapy's.
#: Shown at DEBUG only with LOG_STOP_SIGNALS false (the components of ``crawlhive up``, which says
#: once that it is stopping).
STOP_SIGNAL_LINES = (
    ("crawlhive.utils.process.loop", "received: stopping after"),
    ("scrapy.crawler", "Received SIG"),
)


def _stop_signal_line(record: logging.LogRecord) -> bool:
    if record.levelno != logging.INFO or not any(record.name == name for name, _ in STOP_SIGNAL_LINES):
        return False
    try:
        text = record.getMessage()
    except Exception:  # noqa: BLE001 - a library's malformed log call: leave it as it is
        return False
    return any(record.name == name and part in text for name, part in STOP_SIGNAL_LINES)


class DetailsAtDebug(logging.Filter):
    """Shows the INFO lines of :data:`DETAIL_LOGGERS` as DEBUG lines, and so only at LOG_LEVEL=DEBUG;
    with *stop_signals* false, the lines of :data:`STOP_SIGNAL_LINES` too."""

    def __init__(self, debug: bool, stop_signals: bool = True) -> None:
        super().__init__()
        self.debug = debug
        self.stop_signals = stop_signals

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.stop_signals and _stop_signal_line(record):
            return self._as_debug(record)
        if record.levelno > logging.INFO and any(
            record.name.startswith(name) and text in record.getMessage() for name, text in EXPECTED_ON_CLOSE
        ):
            return self._as_debug(record)
        if record.levelno > logging.INFO and record.name.startswith("kafka.net.selector") and _closed_socket(record):
            return self._as_debug(record)
        if record.levelno > logging.INFO and _kafka_connection_noise(record):
            return self._as_debug(record)
        if record.levelno != logging.INFO or not record.name.startswith(DETAIL_LOGGERS):
            return True
        if any(text in str(record.msg) for text in _KEPT):
            return True
        return self._as_debug(record)

    def _as_debug(self, record: logging.LogRecord) -> bool:
        if not self.debug:
            return False
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def configure_logging(
    level: str = "INFO",
    json_lines: bool = False,
    file: str | None = None,
    secrets: list[str] | None = None,
    stop_signals: bool = True,
) -> None:
    """Install one handler on the root logger, replacing any earlier one of ours; no line it writes
    shows any of *secrets* (``Settings.secrets()``); with *stop_signals* false (LOG_STOP_SIGNALS),
    the first stop signal's lines are DEBUG.

    Raises:
        SettingsError: *level* is not a logging level name (names LOG_LEVEL).
    """
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise SettingsError(f"LOG_LEVEL: expected DEBUG, INFO, WARNING, ERROR or CRITICAL, got {level!r}")
    handler: logging.Handler = logging.FileHandler(file) if file else logging.StreamHandler(sys.stderr)
    formatter = JsonFormatter() if json_lines else logging.Formatter(PLAIN_FORMAT)
    secrets = [*(secrets or []), *_LATE_SECRETS]
    handler.setFormatter(RedactingFormatter(formatter, secrets) if secrets else formatter)
    handler.setLevel(numeric)  # also for libraries that set their own loggers to DEBUG (Scrapy)
    handler.addFilter(DetailsAtDebug(debug=numeric <= logging.DEBUG, stop_signals=stop_signals))
    handler.addFilter(EscapeArguments())
    handler._crawlhive = True  # type: ignore[attr-defined]
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_crawlhive", False)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(numeric)
    # Chatty third-party loggers stay at WARNING unless we debug.
    for name in ("kafka", "urllib3"):
        logging.getLogger(name).setLevel(logging.WARNING if numeric > logging.DEBUG else numeric)
