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

from crawlhive.utils.errors import SettingsError

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


PLAIN_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def configure_logging(level: str = "INFO", json_lines: bool = False, file: str | None = None) -> None:
    """Install one handler on the root logger, replacing any earlier one of ours.

    Raises:
        SettingsError: *level* is not a logging level name (names LOG_LEVEL).
    """
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise SettingsError(f"LOG_LEVEL: expected DEBUG, INFO, WARNING, ERROR or CRITICAL, got {level!r}")
    handler: logging.Handler = logging.FileHandler(file) if file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(PLAIN_FORMAT))
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
