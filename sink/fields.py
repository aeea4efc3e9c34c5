"""Fields of a record as the stores keep them (docs/contract.md §20.2, §20.3): times, dates, text."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any


def scrub(value: Any) -> Any:
    """*value* with every NUL character of its strings (keys too) replaced by U+FFFD."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def text_or_none(value: Any) -> str | None:
    """*value* if a string (NULs as U+FFFD), else None."""
    return scrub(value) if isinstance(value, str) else None


def parse_time(value: Any) -> datetime | None:
    """A contract timestamp (UTC, no offset) or any ISO 8601 time as an aware datetime; else None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value[:64])
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def parse_date(value: Any) -> date | None:
    """``YYYY-MM-DD`` (what the cleaner's ``published`` is); anything else None."""
    if not isinstance(value, str):
        return None
    try:
        return date.fromisoformat(value[:10])
    except ValueError:
        return None
