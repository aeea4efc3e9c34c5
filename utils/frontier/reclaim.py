"""Reclaiming the leases of crawlers that died or hung (docs/contract.md §3.12): run by the
redis-monitor's reaper."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crawlhive.utils.backends import tracing
from crawlhive.utils.contract.encoding import encode_text
from crawlhive.utils.frontier.leasing import FrontierLeaser
from crawlhive.utils.frontier.model import LEASE_EXPIRED, OPTIONS_LOST, FrontierRequest, dead_letter_of, retried
from crawlhive.utils.frontier.writer import wake_message


@dataclass(frozen=True, slots=True)
class ReclaimResult:
    """What one :func:`reclaim_expired_leases` pass did."""

    requeued: int = 0
    """Expired leases put back in the frontier as retries (priority - 10, retry_times + 1)."""
    failed: int = 0
    """Expired leases whose retries were used up: counted as failed, dead letter on the stream."""


def reclaim_expired_leases(worker: FrontierLeaser, spider: str, max_retries: int, limit: int = 500) -> ReclaimResult:
    """Reclaim the expired leases of *spider* (their crawler died or hung), docs/contract.md §3.12.

    Each lease whose deadline passed on the Redis clock counts as a failed attempt (§3.10): it goes
    back into the frontier as :func:`retried` while its ``retry_times`` is below *max_retries*;
    otherwise it ends counted as ``failed`` and a ``dead-letter`` entry (:func:`dead_letter_of`
    with error :data:`LEASE_EXPIRED`) is appended to the control stream, atomically, for the
    redis-monitor to produce. Each lease is claimed inside its script, so concurrent reapers never
    handle one twice, and a lease renewed in the meantime is left alone.

    Args:
        worker: the frontier client (its lease time is not used).
        spider: the spider type whose ``keys.leases(spider)`` to reap.
        max_retries: RETRY_TIMES.
        limit: most leases handled in this pass (oldest first).

    Raises:
        redis.RedisError: Redis failed; leases not yet handled stay leased for the next pass.
    """
    requeued = failed = 0
    lanes: dict[bool, set[int]] = {}
    for member, request in worker.expired_leases(spider, limit):
        span = _reclaim_span(request, spider) if tracing.ON and request.trace is not None else None
        if request.option_set is not None and request.option_set.lost:
            error = f"{OPTIONS_LOST}: crawl record expired (CRAWL_RECORD_TTL)"
            failed += worker.exhaust(member, request, _dead_letter(request, error))
            outcome = error
        elif request.retry_times < max_retries:
            again = retried(request)
            if span is not None:  # the retry's spans continue the page's trace under the reclaim
                again.trace = tracing.frontier_trace(span)
            if worker.reclaim(member, again):
                requeued += 1
                lanes.setdefault(request.render, set()).add(worker.keys.shard_of(request.domain))
            outcome = ""
        else:
            failed += worker.exhaust(member, request, _dead_letter(request, LEASE_EXPIRED))
            outcome = f"{LEASE_EXPIRED}: retries used up (RETRY_TIMES={max_retries}); dead letter"
        if span is not None:
            if outcome:
                tracing.fail(span, outcome)
            span.end()
    if requeued:
        for render, shards in sorted(lanes.items()):  # idle crawlers of the lane take it at once
            worker.redis.publish(worker.keys.wake_channel(spider, render), wake_message(shards))
    return ReclaimResult(requeued, failed)


def _reclaim_span(request: FrontierRequest, spider: str) -> Any:
    """The span of the reclaim of *request*'s expired lease (docs/contract.md §26.3), in its page's
    trace: a child of the span its ``trace`` names (a link's page, whose trace died with its
    crawler, starts a new one linked to the page that found it); None when ``trace`` does not parse."""
    parsed = tracing.parse_frontier_trace(request.trace)
    if parsed is None:
        return None
    relation, _, remote = parsed
    attributes: dict[str, Any] = {
        "url.full": request.url,
        "crawlhive.appid": request.appid,
        "crawlhive.crawlid": request.crawlid,
        "crawlhive.spiderid": spider,
        "crawlhive.retry_times": request.retry_times,
        "crawlhive.reclaimed": True,
    }
    if relation == tracing.LINK:
        return tracing.tracer().start_span(
            "crawlhive.frontier.reclaim",
            context=tracing.Context(),
            attributes=attributes,
            links=[tracing.Link(tracing.span_context_of(remote))],
        )
    return tracing.tracer().start_span("crawlhive.frontier.reclaim", context=remote, attributes=attributes)


def _dead_letter(request: FrontierRequest, error: str) -> str:
    """The crawl dead letter (docs/contract.md §6 b) of *request*, which failed with *error*, encoded."""
    return encode_text(dead_letter_of(request, error))
