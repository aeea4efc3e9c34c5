"""Continuous crawling (docs/contract.md §19): the per-page schedule beside the frontier.

A crawl sent with ``recrawl`` keeps every page it fetched on a schedule. The schedule lives in the
page's frontier shard (§18), in three compact structures per (crawl, shard), key formats in
:mod:`crawlhive.utils.backends.keys`:

* **state** (``recrawl_state``): hash buckets of packed :class:`PageState` values, field = the
  page's schedule fingerprint (:func:`schedule_fingerprint`, 8 bytes). RECRAWL_STATE_BUCKETS spreads a crawl
  over enough buckets that each stays a listpack (≤ 128 fields of ≤ 64 bytes): ~80 bytes per page
  with a 32-character ETag, where a plain hash entry costs twice that.
* **slots** (``recrawl_slot``): lists of packed :class:`SlotEntry` values (due time, fingerprint,
  domain, priority, lane, queue member), one list per time slot, and per crawl a sorted set of its
  slot starts (``recrawl_slots``). Slots are a timing wheel: a page due in *d* seconds goes to a
  slot 2^k seconds wide with 2^k·64 > d, so a shard holds a few hundred slots whatever the
  intervals; an entry released early from a wide slot is put in a finer one. The URL lives only
  here (or in the frontier while a visit is on), never twice.
* **due index** (``recrawl_due``): per shard, the crawls with slots there, scored by their first
  slot start: the release reads it with ``ZRANGEBYSCORE`` and never scans the schedule.

**Why the redis-monitor releases due pages** (``redis-monitor/plugins/recrawl.py``), not the
crawlers: the release is one script per shard on a timer, independent of how many crawlers run;
crawlers keep their hot path (pop, admit, ack) unchanged, and a crawler's pop never pays for the
schedule (§19.8: the crawl bench must not slow down). Released pages enter the crawl queues as
ordinary requests, so the throttle, robots rules, guard, filters, budget and priority apply to
them as to any request, and their depth is in their member.

**Visits never overlap:** a release marks the page's state ``visiting`` and removes its slot
entry in the same script; only the end of the visit (the lease's finish,
``crawler/recrawl.py``) puts a new entry in a slot. A crawler killed mid-visit leaves the request
leased: the lease reaper requeues it and another crawler finishes the visit, so no page leaves the
schedule on a crash.

Conditional requests, changed/unchanged and the adaptive interval are decided by the crawler
(:func:`next_visit`) from the state it read before the fetch; only it knows the response.
"""

from __future__ import annotations

import hashlib
import struct
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import formatdate, parsedate_to_datetime
from typing import TYPE_CHECKING, Any, cast

from crawlhive.utils.backends.keys import RENDER_LANE, Keys
from crawlhive.utils.backends.redis_clients import write_pipeline
from crawlhive.utils.backends.scripts import scripts
from crawlhive.utils.config.errors import KeyFormatError
from crawlhive.utils.contract.recrawl import RecrawlConfig
from crawlhive.utils.rules.budgets import Limit

if TYPE_CHECKING:
    from crawlhive.utils.backends.redis_types import RedisClient, RedisPipeline

#: Statuses that make a visit count toward a page's leaving (with failed fetches, status 0).
GONE_STATUSES = frozenset({404, 410})
#: Status recorded for a visit whose fetch failed after its retries.
FAILED_STATUS = 0
#: Visits a page's counter keeps (it saturates there).
MAX_VISITS = 2**32 - 1
#: The crawl record fields: the crawl's ``recrawl`` settings (JSON) and its recurring flag.
RECORD_FIELD = "recrawl"
RECURRING_FIELD = "recurring"
#: The request headers that carry a page's validators (what a redirect hop must not carry on).
IF_NONE_MATCH = "If-None-Match"
IF_MODIFIED_SINCE = "If-Modified-Since"
CONDITIONAL_HEADERS = (IF_NONE_MATCH, IF_MODIFIED_SINCE)
#: Counter fields of a crawl's shard part (``Keys.crawl_shard``), summed by ``info``.
COUNTERS = ("scheduled", "visits", "changed", "unchanged", "gone")

_STATE = struct.Struct(">IIII6sIBH")
_ENTRY = struct.Struct(">H8shBB")


@dataclass(slots=True)
class PageState:
    """What the schedule keeps of one page, packed in 29 bytes plus its ETag (a listpack value of at
    most 64 bytes with an ETag of up to 35 characters): next visit, interval, last fetch, ``Last-Modified``,
    body hash, visit count, gone count (visits in a row that found it gone), last status.
    ``visiting`` (the high bit of the gone byte) is set by the release while a visit is on (queued
    or in flight), so a page is released once per visit."""

    next_due: int
    interval: int
    last_fetch: int
    last_modified: int
    body_hash: bytes
    visits: int
    gone: int
    status: int
    etag: bytes = b""
    visiting: bool = False

    def pack(self) -> bytes:
        flags = min(self.gone, 127) | (0x80 if self.visiting else 0)
        return (
            _STATE.pack(
                self.next_due,
                self.interval,
                self.last_fetch,
                self.last_modified,
                self.body_hash,
                min(self.visits, MAX_VISITS),
                flags,
                self.status,
            )
            + self.etag
        )

    @classmethod
    def unpack(cls, raw: bytes) -> PageState:
        if len(raw) < _STATE.size:
            raise KeyFormatError(f"not a packed page state: {raw!r}")
        due, interval, fetched, modified, digest, visits, flags, status = _STATE.unpack_from(raw)
        etag = bytes(raw[_STATE.size :])
        return cls(due, interval, fetched, modified, digest, visits, flags & 0x7F, status, etag, bool(flags & 0x80))

    def conditional_headers(self) -> dict[str, str]:
        """``If-None-Match`` / ``If-Modified-Since`` from the validators the server last gave (§19.3)."""
        headers = {}
        if self.etag:
            headers[IF_NONE_MATCH] = self.etag.decode("latin-1")
        if self.last_modified:
            headers[IF_MODIFIED_SINCE] = formatdate(self.last_modified, usegmt=True)
        return headers


@dataclass(frozen=True, slots=True)
class SlotEntry:
    """One page in a time slot, packed: what the release needs to queue it again (its due time's
    low 16 bits, which tell a current entry from a stale one, the page's schedule fingerprint,
    priority clamped to ±32767, lane, domain, queue member); the state holds the full due time."""

    due: int
    fingerprint: bytes
    priority: int
    render: bool
    domain: str
    member: bytes

    def pack(self) -> bytes:
        domain = self.domain.encode()
        priority = max(-32767, min(32767, self.priority))
        head = _ENTRY.pack(self.due & 0xFFFF, self.fingerprint, priority, int(self.render), len(domain))
        return head + domain + self.member

    @classmethod
    def unpack(cls, raw: bytes) -> SlotEntry:
        due, fp, priority, render, size = _ENTRY.unpack_from(raw)
        start = _ENTRY.size
        return cls(due, fp, priority, bool(render), raw[start : start + size].decode(), raw[start + size :])


def schedule_fingerprint(fingerprint: str) -> bytes:
    """A page's key in the schedule: the first 8 bytes of its hex request *fingerprint* (Scrapy's,
    as the dupefilter stores its first 12): two of a crawl's million pages share one with a
    probability of about 3·10^-8 (they would then share one schedule entry)."""
    return bytes.fromhex(fingerprint[:16])


def slot_start(due: int, now: int) -> int:
    """The start of the timing-wheel slot of a page *due* at that time (epoch s), seen at *now*:
    slots are 1 s wide within 64 s, then 2^k s wide with 2^k·64 > due − now (the Lua twin is in
    ``utils/backends/lua/recrawl_release.lua``)."""
    width = 1
    while width * 64 <= due - now:
        width *= 2
    return due - due % width


def state_bucket(fingerprint: bytes, buckets: int) -> int:
    """The state bucket of a page (its fingerprint's first 4 bytes modulo *buckets*)."""
    return int.from_bytes(fingerprint[:4], "big") % buckets


def body_hash(body: bytes) -> bytes:
    """The first 6 bytes of the SHA-256 of *body*: what decides "same body" (§19.3); two
    different bodies of one page look the same with a probability of 2^-48 per visit."""
    return hashlib.sha256(body).digest()[:6]


def http_date(value: bytes | str | None) -> int:
    """Epoch seconds of an HTTP date header (``Last-Modified``), 0 when absent or unreadable."""
    if not value:
        return 0
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    try:
        return max(0, min(2**32 - 1, int(parsedate_to_datetime(text).timestamp())))
    except (TypeError, ValueError, IndexError, OverflowError):
        return 0


def w3c_date(value: object) -> int:
    """Epoch seconds of a sitemap ``<lastmod>`` (W3C datetime: ``2024-05-01``,
    ``2024-05-01T10:00:00+02:00``; UTC when it names no offset), 0 when absent or unreadable."""
    if not isinstance(value, str) or not value.strip() or len(value) > 64:
        return 0
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        return 0
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0, min(2**32 - 1, int(when.timestamp())))


@dataclass(frozen=True, slots=True)
class Observation:
    """What one visit found: status (0 = failed), body hash, validators, when."""

    status: int
    body_hash: bytes
    etag: bytes
    last_modified: int
    fetched: int


@dataclass(frozen=True, slots=True)
class VisitResult:
    """The decision about one visit (:func:`next_visit`)."""

    visit: int
    """The visit number (1 for the first fetch)."""
    changed: bool
    previous_fetch: int
    state: PageState | None
    """The page's new state; None: it leaves the schedule (gone, or past ``until``)."""
    outcome: str
    """The counter it adds to: ``first``, ``changed``, ``unchanged`` or ``gone``."""


def next_visit(
    before: PageState | None, seen: Observation, config: RecrawlConfig, gone_after: int, max_etag_bytes: int = 128
) -> VisitResult:
    """Decide a visit (§19.2–§19.4): changed when the status or the body hash differs (a 304 is
    unchanged); with ``adaptive`` the interval grows ×1.5 when unchanged (≤ ``max``) and halves when
    changed (≥ ``min``); a 404, 410 or failed visit counts toward leaving after *gone_after* in a
    row; no visit is scheduled after ``until``."""
    not_modified = seen.status == 304
    if before is None:
        visit, changed, interval, previous = 1, True, config.every, 0
    else:
        visit, previous = before.visits + 1, before.last_fetch
        changed = not not_modified and (seen.status != before.status or seen.body_hash != before.body_hash)
        interval = before.interval or config.every
        if not config.adaptive:
            interval = config.every
        elif changed:
            interval = max(config.min, interval // 2)
        else:
            interval = min(config.max, (interval * 3) // 2)
    gone_now = seen.status in GONE_STATUSES or seen.status == FAILED_STATUS
    gone = (before.gone + 1 if before is not None else 1) if gone_now else 0
    status = before.status if (not_modified and before is not None) else seen.status
    if not_modified and before is not None:
        digest, etag, modified = before.body_hash, seen.etag or before.etag, seen.last_modified or before.last_modified
    else:
        digest, etag, modified = seen.body_hash, seen.etag, seen.last_modified
    if len(etag) > max_etag_bytes:  # not a validator we keep (the state stays small): no If-None-Match
        etag = b""
    due = seen.fetched + interval
    outcome = "first" if before is None else "gone" if gone_now else "changed" if changed else "unchanged"
    if (gone_now and gone >= gone_after) or (config.until and due > config.until):
        return VisitResult(visit, changed, previous, None, outcome)
    state = PageState(due, interval, seen.fetched, modified, digest, visit, gone, status, etag)
    return VisitResult(visit, changed, previous, state, outcome)


class Schedule:
    """Reads and writes of the schedule (see the module docstring).

    Args:
        redis: a bytes client.
        keys: the cluster's key formats.
        buckets: RECRAWL_STATE_BUCKETS (divided among the shards, at least one per shard).
        record_ttl_s: CRAWL_RECORD_TTL (a crawl's shard part lives at least until its next visit).
    """

    def __init__(self, redis: RedisClient, keys: Keys, buckets: int, record_ttl_s: float) -> None:
        self.redis = redis
        self.keys = keys
        self.buckets = max(1, buckets // keys.shards)
        self.record_ttl_s = int(record_ttl_s)
        self.scripts = scripts(redis)

    def state_key(self, spider: str, appid: str, crawlid: str, fingerprint: bytes, shard: int) -> str:
        return self.keys.recrawl_state(spider, appid, crawlid, state_bucket(fingerprint, self.buckets), shard)

    def queue_visit(
        self,
        pipe: RedisPipeline,
        *,
        spider: str,
        appid: str,
        crawlid: str,
        shard: int,
        fingerprint: bytes,
        result: VisitResult | None,
        entry: SlotEntry | None,
        now: int,
    ) -> None:
        """Queue on *pipe* the end of one visit: the page's new state and slot entry, or its
        leaving (*result* None or without a state), and the crawl's counters."""
        keys = self.keys
        state = result.state if result is not None else None
        start = slot_start(state.next_due, now) if state is not None else 0
        ttl = self.record_ttl_s + (max(0, state.next_due - now) if state is not None else 0)
        self.scripts.queue(
            pipe,
            "recrawl_visit",
            [
                self.state_key(spider, appid, crawlid, fingerprint, shard),
                keys.recrawl_slots(spider, appid, crawlid, shard),
                keys.recrawl_due(shard),
                keys.crawl_shard(spider, appid, crawlid, shard),
                keys.recrawl_slot(spider, appid, crawlid, start, shard),
                keys.crawl_stopped(spider, appid, crawlid, shard),
            ],
            [
                fingerprint,
                state.pack() if state is not None else b"",
                entry.pack() if entry is not None and state is not None else b"",
                start,
                keys.crawl_ref(spider, appid, crawlid),
                result.outcome if result is not None else "",
                ttl,
            ],
        )

    def queue_touch(
        self,
        pipe: RedisPipeline,
        *,
        spider: str,
        appid: str,
        crawlid: str,
        shard: int,
        entry: SlotEntry,
        lastmod: int,
        now: int,
    ) -> None:
        """Queue on *pipe*: the scheduled page of *entry* is due at once (``entry.due``, now) if a
        sitemap says it was modified (*lastmod*) after its last fetch and no visit is on (§19.7)."""
        keys = self.keys
        self.scripts.queue(
            pipe,
            "recrawl_touch",
            [
                self.state_key(spider, appid, crawlid, entry.fingerprint, shard),
                keys.recrawl_slots(spider, appid, crawlid, shard),
                keys.recrawl_due(shard),
                keys.recrawl_slot(spider, appid, crawlid, entry.due, shard),
            ],
            [entry.fingerprint, lastmod, entry.due, keys.crawl_ref(spider, appid, crawlid), entry.pack()],
        )

    def release(self, shard: int, limit: int) -> list[tuple[str, bool, int]]:
        """Move up to *limit* due pages of *shard* into the frontier (one script).

        Returns:
            ``(spider, render, count)`` per lane that got pages (to wake its crawlers).
        """
        return self.release_due(shard, limit)[0]

    def release_due(self, shard: int, limit: int) -> tuple[list[tuple[str, bool, int]], bool]:
        """:meth:`release`, and whether the *limit* was reached (more pages of the shard may be
        due: a backlog larger than *limit* drains over several calls)."""
        p = self.keys.recrawl_prefixes(shard)
        reply = self.scripts["recrawl_release"](
            keys=[self.keys.recrawl_due(shard), self.keys.queue_sequence(shard)],
            args=[limit, self.buckets, p["state"], p["slots"], p["slot"], self.keys.head(shard), RENDER_LANE],
        )
        out = []
        for i in range(1, len(reply), 3):
            spider, lane = (v.decode() if isinstance(v, bytes) else str(v) for v in reply[i : i + 2])
            out.append((spider, lane == "1", int(reply[i + 2])))
        return out, bool(reply and int(reply[0]))

    def purge(self, spider: str, appid: str, crawlid: str) -> int:
        """Remove one crawl's whole schedule (``stop``, expiry); returns the pages it held."""
        keys = self.keys
        ref = keys.crawl_ref(spider, appid, crawlid)
        removed = 0
        for shard in range(keys.shards):
            part = keys.crawl_shard(spider, appid, crawlid, shard)
            scheduled = self.redis.hget(part, "rc-scheduled")
            if scheduled is None:
                continue
            starts = cast("list[bytes]", self.redis.zrange(keys.recrawl_slots(spider, appid, crawlid, shard), 0, -1))
            pipe = write_pipeline(self.redis)
            for start in starts:
                pipe.unlink(keys.recrawl_slot(spider, appid, crawlid, int(start), shard))
            pipe.unlink(keys.recrawl_slots(spider, appid, crawlid, shard))
            pipe.zrem(keys.recrawl_due(shard), ref)
            # released pages went with the queue: none is due any more
            pipe.hset(part, mapping={"rc-scheduled": 0, "rc-released": 0, "rc-ended": 0})
            pipe.execute()
            for first in range(0, self.buckets, 1000):
                names = [
                    keys.recrawl_state(spider, appid, crawlid, b, shard)
                    for b in range(first, min(self.buckets, first + 1000))
                ]
                pipe = write_pipeline(self.redis)
                for name in names:
                    pipe.unlink(name)
                pipe.execute()
            removed += max(0, int(scheduled))
        return removed

    def _count_call(
        self, what: str, spider: str, appid: str, crawlid: str, *extra: str | int
    ) -> tuple[list[str], list[str | int]]:
        """KEYS and ARGV of ``recrawl_join.lua`` doing *what* (``join``, ``give``, ``left``,
        ``sync``, ``forget``) for the crawl; *extra*: ARGV 3 onward up to the TTL's place, then ARGV 8."""
        keys = self.keys
        limits = list(extra[:4]) if extra else [0, "", 0, ""]
        tail = list(extra[4:])
        return [keys.app_scheduled(appid), keys.crawl(spider, appid, crawlid)], [
            what,
            keys.crawl_ref(spider, appid, crawlid),
            *limits,
            self.record_ttl_s,
            *tail,
        ]

    def join_call(
        self, spider: str, appid: str, crawlid: str, cap: Limit | None, ceiling: Limit | None
    ) -> tuple[list[str], list[str | int]]:
        """KEYS and ARGV of ``recrawl_join.lua`` for a page of the crawl about to join its schedule:
        counted cluster-wide per appid, refused past the crawl's *cap* or the appid's *ceiling*."""
        return self._count_call(
            "join",
            spider,
            appid,
            crawlid,
            cap.value if cap is not None else 0,
            cap.name if cap is not None else "",
            ceiling.value if ceiling is not None else 0,
            ceiling.name if ceiling is not None else "",
        )

    def queue_give(self, pipe: RedisPipeline, spider: str, appid: str, crawlid: str) -> None:
        """Queue on *pipe*: a page :meth:`join_call` counted did not join the schedule after all."""
        keys, args = self._count_call("give", spider, appid, crawlid)
        self.scripts.queue(pipe, "recrawl_join", keys, args)

    def forget(self, spider: str, appid: str, crawlid: str) -> None:
        """The crawl's scheduled pages leave its appid's count (its schedule was purged)."""
        keys, args = self._count_call("forget", spider, appid, crawlid)
        self.scripts["recrawl_join"](keys=keys, args=args)

    def sync_count(self, spider: str, appid: str, crawlid: str) -> int:
        """Write the crawl's true count into its appid's count: the pages on its schedule (its
        shards count them; a crawler cannot see a page leave, and a first visit counted but never
        ended, its crawler killed, would otherwise stay counted for ever). A crawl that no longer
        recurs leaves the count. Two round trips; returns the crawl's count."""
        keys = self.keys
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(keys.shards):
            pipe.hget(keys.crawl_shard(spider, appid, crawlid, shard), "rc-scheduled")
        scheduled = sum(max(0, int(n or 0)) for n in pipe.execute())
        script_keys, args = self._count_call("sync", spider, appid, crawlid, 0, "", 0, "", scheduled)
        return int(self.scripts["recrawl_join"](keys=script_keys, args=args))

    def counts(self, spider: str, appid: str, crawlid: str) -> dict[str, Any]:
        """The crawl's ``info`` counts (§19.6): scheduled, due, next_due, visits, changed, unchanged,
        gone, and ``schedule_stopped`` (the limit that last kept a fetched page off the schedule,
        §19.1) when one did."""
        keys = self.keys
        ref = keys.crawl_ref(spider, appid, crawlid)
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(keys.shards):
            pipe.hmget(
                keys.crawl_shard(spider, appid, crawlid, shard),
                *(f"rc-{c}" for c in COUNTERS),
                "rc-released",
                "rc-ended",
            )
            pipe.zscore(keys.recrawl_due(shard), ref)
        pipe.hget(keys.crawl(spider, appid, crawlid), "schedule_stopped")
        *replies, stopped = pipe.execute()
        totals = dict.fromkeys(COUNTERS, 0)
        released = 0
        firsts = []
        for i in range(0, len(replies), 2):
            for name, value in zip(COUNTERS, replies[i], strict=False):
                totals[name] += int(value or 0)
            released += int(replies[i][len(COUNTERS)] or 0) - int(replies[i][len(COUNTERS) + 1] or 0)
            if replies[i + 1] is not None:
                firsts.append(int(replies[i + 1]))
        now = int(time.time())
        first = min(firsts) if firsts else 0
        due = max(0, released)  # released into the frontier, their visit not over yet
        out: dict[str, Any] = {
            "scheduled": totals["scheduled"],
            "due": due,
            "next_due": min(first, now) if first and first <= now else first,
            "visits": totals["visits"],
            "changed": totals["changed"],
            "unchanged": totals["unchanged"],
            "gone": totals["gone"],
        }
        if stopped:
            out["schedule_stopped"] = stopped.decode() if isinstance(stopped, bytes) else str(stopped)
        return out


__all__ = [
    "COUNTERS",
    "GONE_STATUSES",
    "RECORD_FIELD",
    "RECURRING_FIELD",
    "Observation",
    "PageState",
    "Schedule",
    "SlotEntry",
    "VisitResult",
    "body_hash",
    "schedule_fingerprint",
    "http_date",
    "next_visit",
    "slot_start",
    "state_bucket",
    "w3c_date",
]
