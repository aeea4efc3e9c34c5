"""Changing when a domain may be fetched next, for every crawler of a spider type: a server's
``Retry-After`` (:func:`defer_domain`) and an operator's domain-config change (:func:`recheck_domain`).
"""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.backends.scripts import scripts
from crawlhive.utils.frontier.model import text
from crawlhive.utils.frontier.writer import wake_message

if TYPE_CHECKING:
    from crawlhive.utils.backends.keys import Keys

#: Longest back-off one ``Retry-After`` may impose on a domain, in seconds (a bogus or hostile
#: value must not park a domain for days).
RETRY_AFTER_MAX_S = 3600.0


def defer_domain(redis: RedisClient, keys: Keys, spider: str, domain: str, delay_s: float) -> float:
    """Let no crawler of *spider* fetch from *domain* for *delay_s* seconds, cluster-wide.

    Pushes the domain's ready time in ``keys.domains(spider)`` of both lanes, plain and rendering
    (what the scheduler pop reads) to
    Redis time + *delay_s* (capped at RETRY_AFTER_MAX_S), never earlier than it already is
    (``ZADD GT``). Called when a server answers 429 with ``Retry-After``. A domain with nothing
    queued is registered with that score and dropped by the next pop that finds it empty.

    Returns:
        The domain's ready time (Redis time, epoch s) after the call.

    Raises:
        redis.RedisError: nothing was changed; the caller may ignore it (the retry is still
            throttled by the domain's ordinary limits).
    """
    delay_us = int(min(max(delay_s, 0.0), RETRY_AFTER_MAX_S) * 1_000_000)
    defer = scripts(redis)["domain_defer"]
    shard = keys.shard_of(domain)
    score = defer(keys=[keys.domains(spider, shard=shard)], args=[domain, delay_us])
    defer(keys=[keys.domains(spider, render=True, shard=shard)], args=[domain, delay_us])
    return float(score)


def defer_site(redis: RedisClient, keys: Keys, domain: str, site: str, delay_s: float) -> float:
    """Let no crawler fetch from *site*, a tenant of the shared suffix that is bucket *domain*, for
    *delay_s* seconds (capped at RETRY_AFTER_MAX_S), unless a longer wait already runs: the
    ``Retry-After`` of ``mallory.github.io`` pauses that site, not every ``*.github.io``
    (:func:`crawlhive.utils.rules.domains.tenant_site`). Returns the wait in force, in seconds.

    Raises:
        redis.RedisError: nothing was changed.
    """
    wait_ms = max(1, int(min(max(delay_s, 0.0), RETRY_AFTER_MAX_S) * 1000))
    return int(scripts(redis)["site_defer"](keys=[keys.site_wait(domain, site)], args=[wait_ms])) / 1000


def site_gate(
    redis: RedisClient, keys: Keys, domain: str, site: str, default_hits: int = 0, default_window_s: float = 0.0
) -> float:
    """Seconds to wait before fetching from *site* (a tenant of the shared suffix that is bucket
    *domain*), or 0 when it may be fetched now; in that case the site's own spacing starts running,
    cluster-wide, so the next fetch from it waits that long: its ``Crawl-delay`` (if any) or, while
    the adaptive throttle holds the site below the bucket's rate (its limit: the bucket's
    domain-config, else *default_hits* per *default_window_s*), one fetch interval at that rate.

    Raises:
        redis.RedisError: the caller fetches (the bucket's throttle still applies).
    """
    keys_ = [keys.site_wait(domain, site), keys.site_delay(domain, site), keys.domain_config(keys.shard_of(domain))]
    args: list[str | int] = [domain, site, default_hits, int(default_window_s * 1_000_000)]
    return int(scripts(redis)["site_gate"](keys=keys_, args=args)) / 1000


def recheck_domain(redis: RedisClient, keys: Keys, spiders: set[str], domain: str) -> None:
    """Make every crawler look at *domain* again now, after its limits changed (domain-config).

    A pop parks a domain in ``keys.domains(spider)`` until the limit *in force at that pop* allows
    the next fetch (with 1 hit / 60 s, a whole minute). When an operator loosens or removes the
    limit, that ready time is stale: this sets it to 0 for each of *spiders* where the domain is
    parked (``ZADD XX LT``: a domain with nothing queued is not added), and wakes their idle
    crawlers. The next pop recomputes the wait under the new limit, so a loosened limit applies at
    once and a tightened one at the next pop (docs/contract.md §3.11). A ``Retry-After`` back-off in force
    for the domain is dropped too: the operator's change wins.

    Raises:
        redis.RedisError: the caller retries (the call is idempotent).
    """
    if not spiders:
        return
    pipe = redis.pipeline(transaction=False)
    lanes = [(spider, render) for spider in sorted(spiders) for render in (False, True)]
    for spider, render in lanes:
        pipe.zadd(keys.domains(spider, render, keys.shard_of(domain)), {domain: 0}, xx=True, lt=True)
    for spider, render in lanes:
        # a cluster pipeline has no .publish
        pipe.execute_command("PUBLISH", keys.wake_channel(spider, render), wake_message([keys.shard_of(domain)]))
    pipe.execute()


def parse_retry_after(value: bytes | str | None, now: float | None = None) -> float | None:
    """Seconds to wait from an HTTP ``Retry-After`` value (delay-seconds or an HTTP-date), or None
    when it is absent or unparseable. Negative results become 0."""
    if value is None:
        return None
    value_text = text(value).strip()
    if value_text.isdigit():
        return float(value_text)
    try:
        when = parsedate_to_datetime(value_text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))
