"""Which crawls the cluster shows: the newest active ones (``GET /crawls``, the dashboard, the
recrawl families of ``/metrics``), read without ``KEYS``.

An active crawl is a member of ``keys.active_crawls()`` (a crawl ref, :meth:`Keys.crawl_ref`); its
crawl record's ``started`` field (epoch seconds) orders them, newest first, so that many old or
crafted crawls cannot hide the new ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.config.errors import KeyFormatError

if TYPE_CHECKING:
    from crawlhive.utils.backends.redis_types import RedisClient

#: A crawl by ``(spiderid, appid, crawlid)``.
CrawlRef = tuple[str, str, str]
#: Most active crawls read per snapshot (the dashboard and metrics stay cheap on huge clusters).
MAX_CRAWLS = 500


def newest_active(redis: RedisClient, keys: Keys, limit: int) -> list[tuple[CrawlRef, Any]]:
    """``(crawl, started)`` of the *limit* most recently started active crawls, newest first
    (``started``: the crawl record's raw field, None when absent): one ``SMEMBERS``, then every
    ref's ``started`` in one pipelined round trip of ``HGET``. Unparseable refs are skipped.

    Raises:
        redis.RedisError: the caller reports it.
    """
    refs = []
    for raw in redis.smembers(keys.active_crawls()):
        try:
            refs.append(Keys.parse_crawl_ref(text(raw)))
        except KeyFormatError:
            continue
    if not refs:
        return []
    pipe = redis.pipeline(transaction=False)
    for spider, appid, crawlid in refs:
        pipe.hget(keys.crawl(spider, appid, crawlid), "started")
    started = dict(zip(refs, pipe.execute(), strict=True))
    newest = sorted(refs, key=lambda ref: (-(epoch(started[ref]) or 0), ref))[:limit]
    return [(ref, started[ref]) for ref in newest]


def text(value: Any) -> str:
    """A Redis reply (bytes or str) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def epoch(value: Any) -> int | None:
    """An epoch-seconds field of a crawl record, or None when absent or unreadable."""
    if value is None:
        return None
    try:
        return int(float(text(value)))
    except ValueError:
        return None
