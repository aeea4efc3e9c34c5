"""What REST shows of recrawling crawls (docs/contract.md §19.6): the ``recurring`` state of
``GET /crawls`` and the dashboard's next due time and changed ratio (the schedule's ``/metrics``
families are the crawler's view, ``crawler/view.py``; the counts, :mod:`crawlhive.utils.state.recrawl`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawlhive.utils.state.recrawl import recrawl_summaries

if TYPE_CHECKING:
    from crawlhive.utils.backends.keys import Keys
    from crawlhive.utils.backends.redis_types import RedisClient

#: The state ``GET /crawls`` and the dashboard show for an active crawl that recurs (§19.6).
RECURRING = "recurring"


def mark_recurring(redis: RedisClient, keys: Keys, rows: list[dict[str, Any]]) -> None:
    """Give the rows of recurring crawls their ``recrawl`` summary, and the state ``recurring``
    where they would say ``running`` or ``waiting`` (a row's ``reason`` still says why its queued
    pages wait) or, on the dashboard, ``complete`` or ``idle``: a recurring crawl with nothing due
    is neither."""
    summaries = recrawl_summaries(redis, keys, [(r["spiderid"], r["appid"], r["crawlid"]) for r in rows])
    for row in rows:
        summary = summaries.get((row["spiderid"], row["appid"], row["crawlid"]))
        if summary is not None:
            row["recrawl"] = summary
            if row["state"] in ("running", "waiting", "complete", "idle"):
                row["state"] = RECURRING


__all__ = ["RECURRING", "mark_recurring"]
