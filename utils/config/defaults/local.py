"""Logging and local state.

Part of :mod:`crawlhive.utils.config.defaults` (read its docstring first)."""

# ruff: noqa: E501

LOG_LEVEL: str = "INFO"
"""DEBUG, INFO, WARNING, ERROR or CRITICAL."""

LOG_JSON: bool = False
"""Log one JSON object per line instead of plain text."""

LOG_FILE: str | None = None
"""Log to this file instead of standard error."""

LOG_STOP_SIGNALS: bool = True
"""Log at INFO the first SIGINT/SIGTERM that starts a graceful stop (this process's "SIGTERM received:
stopping after …" line and Scrapy's "Received SIGTERM, shutting down gracefully"). ``crawlhive up``
and ``demo`` set it false for their components, since they print one line that they are stopping
themselves (a single Ctrl-C then shows one line, not one per component); those lines are DEBUG then."""

CRAWLHIVE_HOME: str = "~/.crawlhive"
"""Folder of local state: where ``crawlhive up`` records the addresses of its embedded Redis and
broker so that other ``crawlhive`` commands on this machine find them."""
