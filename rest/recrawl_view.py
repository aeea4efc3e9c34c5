"""What REST shows of recrawling crawls (docs/contract.md §19.6): the ``recurring`` state of
``GET /crawls``, the dashboard's next due time and changed ratio, and the ``/metrics`` families
of the schedule (due backlog, revisit outcomes)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from crawlhive.utils.frontier.recrawl import RECURRING_FIELD, Schedule

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from crawlhive.utils.backends.keys import Keys
    from crawlhive.utils.backends.redis_types import RedisClient

Crawl = tuple[str, str, str]

#: The state ``GET /crawls`` and the dashboard show for an active crawl that recurs (§19.6).
RECURRING = "recurring"


def recrawl_summaries(redis: RedisClient, keys: Keys, crawls: list[Crawl]) -> dict[Crawl, dict[str, Any]]:
    """The schedule counts (``info``'s ``recrawl`` object) and ``changed_ratio`` (changed over
    revisits; None before any) of those of *crawls* that recur: one pipelined round trip to find
    them, one per recurring crawl for its counts."""
    if not crawls:
        return {}
    pipe = redis.pipeline(transaction=False)
    for spider, appid, crawlid in crawls:
        pipe.hexists(keys.crawl(spider, appid, crawlid), RECURRING_FIELD)
    recurring = [crawl for crawl, flag in zip(crawls, pipe.execute(), strict=True) if flag]
    schedule = Schedule(redis, keys, 1, 0)
    out = {}
    for crawl in recurring:
        counts: dict[str, Any] = dict(schedule.counts(*crawl))
        revisits = counts["changed"] + counts["unchanged"]
        counts["changed_ratio"] = round(counts["changed"] / revisits, 4) if revisits else None
        out[crawl] = counts
    return out


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


def recrawl_metrics(redis: RedisClient, keys: Keys, crawls: list[Crawl]) -> Iterator[Metric]:
    """``crawlhive_recrawl_scheduled``, ``crawlhive_recrawl_due`` (gauges) and
    ``crawlhive_recrawl_visits{outcome}`` (counter) per spider type, over the active recurring crawls."""
    scheduled = GaugeMetricFamily(
        "crawlhive_recrawl_scheduled", "Pages on a recrawl schedule per spider type.", labels=["spiderid"]
    )
    due = GaugeMetricFamily(
        "crawlhive_recrawl_due", "Scheduled pages due and not yet visited again (backlog).", labels=["spiderid"]
    )
    visits = CounterMetricFamily(
        "crawlhive_recrawl_visits",
        "Revisits of scheduled pages by outcome (changed, unchanged, gone).",
        labels=["spiderid", "outcome"],
    )
    totals: dict[str, dict[str, int]] = {}
    for (spider, _appid, _crawlid), counts in recrawl_summaries(redis, keys, crawls).items():
        total = totals.setdefault(spider, dict.fromkeys(("scheduled", "due", "changed", "unchanged", "gone"), 0))
        for name in total:
            total[name] += int(counts[name])
    for spider, total in sorted(totals.items()):
        scheduled.add_metric([spider], total["scheduled"])
        due.add_metric([spider], total["due"])
        for outcome in ("changed", "unchanged", "gone"):
            visits.add_metric([spider, outcome], total[outcome])
    yield scheduled
    yield due
    yield visits


__all__ = ["RECURRING", "mark_recurring", "recrawl_metrics", "recrawl_summaries"]
