"""Response times and per-domain outcomes, shared in Redis for ``/metrics`` (docs/contract.md §22.3).

Crawlers buffer what they see (:class:`ResponseMetrics`: one :meth:`~ResponseMetrics.observe` per
response or network failure) and write it with their other stats (:meth:`~ResponseMetrics.flush`,
one non-transactional pipeline); the REST service reads it at scrape time (:func:`read_histograms`,
:func:`read_top_domains`) and exposes ``crawlhive_response_seconds`` (a histogram per spider type)
and ``crawlhive_domain_responses{domain,outcome}`` for the busiest ``METRICS_TOP_DOMAINS`` domains.

Why not prometheus-client's own Histogram in each crawler: crawlers come and go (``--scale``) and
are not scraped one by one; the cluster's figures live in Redis like every other stat (§4.7). The
per-domain counts are bounded: Redis keeps the ``TRIM_FACTOR x METRICS_TOP_DOMAINS`` busiest
domains, and ``/metrics`` shows ``METRICS_TOP_DOMAINS`` of them.
"""

from __future__ import annotations

import bisect
import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from crawlhive.utils.backends.redis_types import RedisClient

if TYPE_CHECKING:
    from crawlhive.utils.backends.keys import Keys

#: Upper bounds (seconds) of the response-time histogram's buckets; ``+Inf`` is implied.
BUCKETS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Redis keeps this many times METRICS_TOP_DOMAINS domains before trimming the least busy.
TRIM_FACTOR = 20
#: A flush trims the domain counts once they hold more than the kept number by this many.
TRIM_SLACK = 100


def failed(status: int | None) -> bool:
    """A failure for the per-domain counters: a network failure (*status* None) or a status >= 400."""
    return status is None or status >= 400


@dataclass
class ResponseMetrics:
    """One crawler's buffer of response times and per-domain outcomes (not thread-safe; the
    crawler's reactor thread observes and flushes)."""

    spider: str
    keys: Keys
    top_domains: int
    _buckets: collections.Counter[str] = field(default_factory=collections.Counter)
    _sum: float = 0.0
    _domains: collections.Counter[str] = field(default_factory=collections.Counter)
    _failures: collections.Counter[str] = field(default_factory=collections.Counter)

    def observe(self, domain: str, seconds: float | None, status: int | None) -> None:
        """One response of *domain* (its status; None for a network failure) that took *seconds*
        (None when unknown: counted for the domain, not in the histogram)."""
        if seconds is not None and seconds >= 0:
            index = bisect.bisect_left(BUCKETS, seconds)
            self._buckets[f"b{index}" if index < len(BUCKETS) else "inf"] += 1
            self._buckets["count"] += 1
            self._sum += seconds
        if domain:
            self._domains[domain] += 1
            if failed(status):
                self._failures[domain] += 1

    def flush(self, redis: RedisClient) -> None:
        """Writes and clears the buffer (raises ``redis.RedisError``; the buffer is then lost,
        as the other crawler stats are)."""
        buckets, total, domains, failures = self._buckets, self._sum, self._domains, self._failures
        self._buckets, self._sum, self._domains, self._failures = (
            collections.Counter(),
            0.0,
            collections.Counter(),
            collections.Counter(),
        )
        if not buckets and not domains:
            return
        pipe = redis.pipeline(transaction=False)
        histogram = self.keys.metrics_response_seconds(self.spider)
        for name, count in buckets.items():
            pipe.hincrby(histogram, name, count)
        if buckets:
            pipe.hincrbyfloat(histogram, "sum", total)
        ranking, failing = self.keys.metrics_domains(), self.keys.metrics_domain_failures()
        for domain, count in domains.items():
            pipe.zincrby(ranking, count, domain)
        for domain, count in failures.items():
            pipe.hincrby(failing, domain, count)
        if domains:
            pipe.zcard(ranking)
        results = pipe.execute()
        kept = TRIM_FACTOR * max(1, self.top_domains)
        if domains and int(results[-1]) > kept + TRIM_SLACK:
            self._trim(redis, kept)

    def _trim(self, redis: RedisClient, kept: int) -> None:
        ranking, failing = self.keys.metrics_domains(), self.keys.metrics_domain_failures()
        dropped = [d.decode() if isinstance(d, bytes) else str(d) for d in redis.zrange(ranking, 0, -kept - 1)]
        if dropped:
            pipe = redis.pipeline(transaction=False)
            pipe.zrem(ranking, *dropped)
            pipe.hdel(failing, *dropped)
            pipe.execute()


def read_histograms(
    redis: RedisClient, keys: Keys, spiders: list[str]
) -> dict[str, tuple[list[tuple[str, float]], float]]:
    """Per spider type: cumulative ``(le, count)`` buckets (``+Inf`` last) and the sum of seconds,
    for spiders with at least one observation."""
    pipe = redis.pipeline(transaction=False)
    for spider in spiders:
        pipe.hgetall(keys.metrics_response_seconds(spider))
    out = {}
    for spider, raw in zip(spiders, pipe.execute(), strict=True):
        fields = {(k.decode() if isinstance(k, bytes) else k): v for k, v in raw.items()}
        if not fields:
            continue
        running, buckets = 0.0, []
        for i, bound in enumerate(BUCKETS):
            running += float(fields.get(f"b{i}", 0))
            buckets.append((format(bound, "g"), running))
        buckets.append(("+Inf", running + float(fields.get("inf", 0))))
        out[spider] = (buckets, float(fields.get("sum", 0.0)))
    return out


def read_top_domains(redis: RedisClient, keys: Keys, top: int) -> list[tuple[str, int, int]]:
    """The *top* busiest domains: ``(domain, successes, failures)``, the busiest first (none for
    *top* 0)."""
    if top <= 0:
        return []  # ZREVRANGE 0 -1 would be every domain
    ranked = cast(
        "list[tuple[bytes | str, float]]",
        redis.zrevrange(keys.metrics_domains(), 0, max(0, top) - 1, withscores=True),
    )
    if not ranked:
        return []
    domains = [member.decode() if isinstance(member, bytes) else str(member) for member, _ in ranked]
    failures = redis.hmget(keys.metrics_domain_failures(), domains)
    out = []
    for domain, (_, total), fail in zip(domains, ranked, failures, strict=True):
        bad = int(fail or 0)
        out.append((domain, max(0, int(total) - bad), bad))
    return out


__all__ = ["BUCKETS", "ResponseMetrics", "failed", "read_histograms", "read_top_domains"]
