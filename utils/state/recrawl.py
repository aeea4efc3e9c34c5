"""What the cluster shows of recrawling crawls (docs/contract.md §19.6): each recurring crawl's
schedule counts, read for ``info``, ``GET /crawls``, the dashboard and ``/metrics``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawlhive.utils.frontier.recrawl import RECURRING_FIELD, Schedule

if TYPE_CHECKING:
    from crawlhive.utils.backends.keys import Keys
    from crawlhive.utils.backends.redis_types import RedisClient

#: A crawl by ``(spiderid, appid, crawlid)``.
Crawl = tuple[str, str, str]


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
