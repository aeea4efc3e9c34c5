"""Spill and refill of crawl queue tails (docs/contract.md §23), run by the redis-monitors.

**Who asks.** A push (:meth:`~crawlhive.utils.frontier.writer.Frontier.push`) flags the queues it
added to in the shard's ``tail_spill_wanted``; a pop (``frontier_pop.lua``) flags a queue whose
head is short (under half of FRONTIER_HEAD_SIZE, or empty) while it has a tail in
``tail_refill_wanted``, and one that grew past its head in ``tail_spill_wanted``. Flags are
idempotent and raised again by the next push or pop, so one lost with a killed monitor costs a
delay, never a request. A spill flag the mover put off (a small cold queue's, a failed spill's:
its score moved later) is brought forward to now by the next push or pop: a queue that grew in
the meantime is looked at again at once, not after the delay.

**Spill** (:meth:`TailMover.spill`): a queue keeps FRONTIER_HEAD_SIZE requests if its domain is
among the FRONTIER_HOT_DOMAINS next due for its spider type (its rank in ``domains``), else none;
the requests after those (by score: the lowest priorities, then the latest arrivals) go to
segments of FRONTIER_SEGMENT_SIZE, best first. Each segment is written to the store **before**
``tail_spill.lua`` takes its requests out of Redis, and that script does so only if every one is
still queued with the score read (a pop or a stop in between: the segment is deleted, nothing
moved). A kill between the write and the script leaves an object no pointer names (garbage, never
read), and the requests in Redis. A queue whose tail's last segment holds fewer than half
FRONTIER_SEGMENT_SIZE requests gets one segment of those and the new ones instead of a second
one: the script replaces the pointer only if it is still there (else nothing moves), and the old
object is deleted after it, as after a refill. Without this, a broad crawl's queues, spilled a few
requests at a time as their links arrive, kept a pointer (and a live-index entry) per spill: at
10,000 domains and 20 requests a spill, 2.8 of the 8 bytes a queued URL may cost.

**Refill** (:meth:`TailMover.refill`): while a queue's head holds fewer than half of
FRONTIER_HEAD_SIZE requests ranked before its tail's best (the pops may serve only those: a request
is never served before a better one of its tail), its best segment is read and ``tail_refill.lua`` puts its
requests into the head and drops the pointer in one step; the object is deleted only after that
(and after REDIS_WAIT_REPLICAS replicas hold it, so a failover cannot bring back a pointer to a
deleted object). A kill before the script refills nothing (the pointer is still there: the next
refill does it); after it, leaves an orphan object.

**Garbage** (:meth:`TailMover.sweep`): every ten minutes each redis-monitor deletes the objects older
than an hour that no pointer names (the ``tail_segments`` keys list the live ones), so orphans of kills and
temporary files of interrupted writes do not accumulate.

**Store down.** A write or read that fails with the store leaves the requests where they are (in
Redis, or in their segment), logs one WARNING naming FRONTIER_TAIL_URL until the store answers
again, and asks again after a back-off. While more than FRONTIER_TAIL_BACKLOG_MAX requests of one
shard wait beyond their heads for it, ``tail_full`` is set: the kafka-monitors read no new crawl
requests until it is gone.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.backends.replication import ReplicaWait
from crawlhive.utils.backends.scripts import scripts
from crawlhive.utils.config.errors import KeyFormatError
from crawlhive.utils.frontier.tails import (
    Schedule,
    StoreHealth,
    TailError,
    TailLimits,
    TailStore,
    decode_segment,
    encode_segment,
    is_redis_error,
    object_mtime,
    parse_tail_member,
    tail_member,
)

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

#: Flags one pass takes from each wanted set of a shard.
FLAGS_PER_PASS = 64
#: Requests from which a cold queue (its domain not among FRONTIER_HOT_DOMAINS) spills at once; a
#: smaller one spills whatever it holds COLD_WAIT_S after its first flag (so links arriving one by
#: one make one segment, not one each, and no remainder stays in Redis: a queue of a few requests
#: costs Redis a zset of its own, over a kilobyte, where its tail's pointer costs tens of bytes).
COLD_SPILL_MIN = 8
COLD_WAIT_S = 60.0


def put_off(score: float) -> bool:
    """Whether a spill flag's *score* is one a mover put off (a small cold queue's, to
    ``ceil(flagged + COLD_WAIT_S)``: a whole second) rather than one a push or a pop raised (the
    time of its flag, in microseconds: a whole second once in a million, which only spills that
    queue a minute early). A put-off flag that comes due spills the queue; before, its score was
    taken for a new flag and put off again, for ever: a cold queue of a few requests never left Redis."""
    return float(score).is_integer()


#: Seconds before a queue whose spill or refill failed with the store is looked at again.
STORE_RETRY_S = 2.0
#: Seconds between two sweeps of a redis-monitor for objects no pointer names, and the least age of
#: an object it deletes.
SWEEP_EVERY_S = 600.0
SWEEP_AGE_S = 3600.0
#: Seconds the tail_full marker lives unless renewed.
FULL_TTL_S = 30


@dataclass
class TailCounts:
    """What one :class:`TailMover` did (for tests, the bench and the log)."""

    spilled: int = 0
    refilled: int = 0
    segments_written: int = 0
    segments_read: int = 0
    #: Spills that rewrote their tail's last, small segment with the new requests (one segment).
    merged: int = 0
    aborted: int = 0
    lost: int = 0
    store_errors: int = 0
    waiting: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Segment:
    """A segment one spill round writes for a queue: the requests it takes from the queue (*rows*),
    where and what it writes (the rows, and those of the small segment it replaces, if any), its
    tail pointer and best score, and the pointer and path of the segment it replaces ('' / None)."""

    item: _Spill
    rows: list[tuple[bytes, int]]
    path: str
    data: bytes
    member: str
    best: int
    replaced: str = ""
    replaced_path: str | None = None


@dataclass(slots=True)
class _Spill:
    """A queue :meth:`TailMover.spill_many` works on."""

    queue: str
    flagged_at: float
    shard: int
    tail: str
    domains: str
    domain: str
    keep: int = 0
    least: int = 1
    excess: int = 0


@dataclass(slots=True)
class _Refill:
    """A queue :meth:`TailMover.refill_many` works on."""

    queue: str
    shard: int
    tail: str
    domain: str
    crawl: str
    script_keys: list[str]


class TailMover:
    """Spills long crawl queues into the tail store and refills short heads from it (module docstring).

    Args:
        redis: a client of the frontier's Redis (thread-safe: the mover runs on a thread of its own).
        keys: the key formats.
        store: the tail store.
        head_size: FRONTIER_HEAD_SIZE.
        segment_size: FRONTIER_SEGMENT_SIZE.
        hot_domains: FRONTIER_HOT_DOMAINS.
        backlog_max: FRONTIER_TAIL_BACKLOG_MAX.
        replicas: REDIS_WAIT_REPLICAS (a refill is replicated before its object is deleted).
    """

    def __init__(
        self,
        redis: RedisClient,
        keys: Keys,
        store: TailStore,
        *,
        head_size: int = 64,
        segment_size: int = 128,
        hot_domains: int = 1000,
        backlog_max: int = 1_000_000,
        replicas: ReplicaWait | None = None,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.store = store
        self.limits = TailLimits(True, max(0, head_size), max(1, segment_size))
        self.head_size = self.limits.head_size
        self.segment_size = self.limits.segment_size
        #: A tail's last segment with fewer requests is rewritten with the next spill's (:meth:`_merges`).
        self.merge_below = max(1, self.segment_size // 2)
        self.refill_below = self.limits.refill_below
        self.spill_min = self.limits.spill_min
        self.spill_above = self.limits.spill_above
        #: FRONTIER_HOT_DOMAINS is cluster-wide: each shard keeps its share of hot domains.
        self.hot_domains = -(-max(0, hot_domains) // keys.shards)
        self.backlog_max = max(1, backlog_max)
        self.replicas = replicas
        self.scripts = scripts(redis)
        self.counts = TailCounts()
        self.health = StoreHealth(store, "queues keep their requests in Redis")
        self._published = False  # a non-zero 'waiting' or tail_full was written
        self._sweeps = Schedule(SWEEP_EVERY_S)
        self._later: dict[str, float] = {}  # queue -> when its flag is due again (a small cold queue)

    @classmethod
    def from_settings(cls, redis: RedisClient, settings: Settings) -> Self | None:
        """The mover of FRONTIER_TAIL_URL's store, or None when it is empty."""
        store = TailStore.from_settings(settings)
        if store is None:
            return None
        return cls(
            redis,
            keys_from_settings(settings),
            store,
            head_size=settings.FRONTIER_HEAD_SIZE,
            segment_size=settings.FRONTIER_SEGMENT_SIZE,
            hot_domains=settings.FRONTIER_HOT_DOMAINS,
            backlog_max=settings.FRONTIER_TAIL_BACKLOG_MAX,
            replicas=ReplicaWait.from_settings(redis, settings),
        )

    # --- the loop --------------------------------------------------------------------------------

    def run(self, stop: threading.Event, idle_s: float = 0.05, max_idle_s: float = 0.5) -> None:
        """Pass over every shard until *stop* is set, sleeping (up to *max_idle_s*) while idle.
        Redis errors back off and retry; the monitor's own loop reports Redis being down."""
        sleep = idle_s
        wake = self._subscribe()
        while not stop.is_set():
            try:
                work = sum(self.run_once(shard) for shard in range(self.keys.shards))
                if not work:
                    self._sweep_due()
            except Exception as exc:  # Redis down, a bug: never let the thread die silently
                if not is_redis_error(exc):
                    logger.error("frontier tail mover failed; retrying", exc_info=True)
                work = 0
                sleep = max_idle_s
            if work:
                sleep = idle_s
                continue
            if not self._wait_for_wake(wake, sleep):
                stop.wait(sleep)
            sleep = min(max_idle_s, sleep * 2)
        if wake is not None:
            try:
                wake.close()
            except Exception:  # closing a dead connection: nothing to do
                pass

    def _subscribe(self) -> Any:
        """A subscription to the tail wake channel (a pop that asks for a refill publishes on it),
        or None if Redis cannot be reached now (the loop then polls)."""
        try:
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]  # RedisCluster.pubsub is unannotated
            pubsub.subscribe(self.keys.tail_wake_channel())
            return pubsub
        except Exception:
            return None

    @staticmethod
    def _wait_for_wake(wake: Any, timeout: float) -> bool:
        """Wait up to *timeout* for a wake-up (True: waited, whether or not one came); False when
        there is no working subscription (the caller sleeps instead)."""
        if wake is None:
            return False
        try:
            wake.get_message(timeout=timeout)
            while wake.get_message(timeout=0) is not None:  # several pops asked: one pass serves them
                pass
            return True
        except Exception:
            return False

    def run_once(self, shard: int = 0) -> int:
        """One pass over *shard*'s due flags: refills first (a domain may be waiting), then spills,
        each a batch of up to FLAGS_PER_PASS queues worked in a few round trips. Returns how many
        queues it worked on."""
        now = time.time()
        work = 0
        for wanted, act in (
            (self.keys.tail_refill_wanted(shard), self.refill_many),
            (self.keys.tail_spill_wanted(shard), self.spill_many),
        ):
            flags: list[Any] = self.redis.zrangebyscore(
                wanted, "-inf", now + 1, start=0, num=FLAGS_PER_PASS, withscores=True
            )
            if not flags:
                continue
            due = [(raw.decode() if isinstance(raw, bytes) else str(raw), float(at)) for raw, at in flags]
            _moved, down = act(due)
            pipe = self.redis.pipeline(transaction=False)
            for queue, _at in due:
                later = self._later.pop(queue, None)
                if queue in down:
                    pipe.zadd(wanted, {queue: time.time() + STORE_RETRY_S})
                elif later is not None:
                    pipe.zadd(wanted, {queue: later})
                else:
                    pipe.zrem(wanted, queue)
            pipe.execute()
            work += len(due)
        self._publish_waiting(shard)
        return work

    # --- spill -------------------------------------------------------------------------------

    def spill(self, queue: str, flagged_at: float | None = None) -> int:
        """Move what crawl queue *queue* holds beyond its head into segments; returns the requests
        moved (:meth:`spill_many` of one queue).

        Raises:
            TailStoreDown: the store refused a write (the requests stay in Redis).
        """
        moved, down = self.spill_many([(queue, time.time() if flagged_at is None else flagged_at)])
        if down:
            raise TailStoreDown(self.health.reason or "the tail store refused a write")
        return moved.get(queue, 0)

    def spill_many(self, flags: list[tuple[str, float]]) -> tuple[dict[str, int], set[str]]:
        """Move what each flagged crawl queue (queue, flagged at, epoch s) holds beyond its head into
        segments; returns the requests moved per queue and the queues the store refused (their
        requests stay in Redis).

        A queue keeps FRONTIER_HEAD_SIZE requests if its domain is hot, else none. A cold queue under
        COLD_SPILL_MIN spills only once its flag is COLD_WAIT_S old: its flag is put off to then (a
        whole second, :func:`put_off`; in ``_later`` until the pass writes it), and spills the
        queue when it comes due; a push's flag meanwhile brings it forward (the minute starts
        again from the last arrival), and one with COLD_SPILL_MIN or more spills at once. The
        queues are worked together, a segment of each per round: a round is one pipeline of reads,
        the segments' writes (:meth:`TailStore.write_many`: synced together), and one pipeline of
        ``tail_spill.lua`` calls, so a broad crawl's many small queues cost a few round trips per
        FLAGS_PER_PASS queues, not five per queue.
        """
        work: list[_Spill] = []
        for queue, flagged_at, (spider, appid, crawlid, domain, render), shard in self._parsed(flags):
            work.append(
                _Spill(
                    queue,
                    flagged_at,
                    shard,
                    self.keys.tail_queue(spider, appid, crawlid, domain, render),
                    self.keys.domains(spider, render, shard),
                    domain,
                )
            )
        moved: dict[str, int] = {}
        if not work:
            return moved, set()
        pipe = self.redis.pipeline(transaction=False)
        for item in work:
            pipe.zcard(item.queue)
            pipe.zrank(item.domains, item.domain)
        replies = pipe.execute()
        active: list[_Spill] = []
        for index, item in enumerate(work):
            card, rank = int(replies[2 * index]), replies[2 * index + 1]
            hot = rank is not None and int(rank) < self.hot_domains
            item.keep = self.head_size if hot else 0
            item.least = self.spill_min if hot else COLD_SPILL_MIN
            item.excess = card - item.keep
            if not hot and 0 < card < COLD_SPILL_MIN:
                if not put_off(item.flagged_at):  # (a pass takes the flags due within its second)
                    self._later[item.queue] = math.ceil(item.flagged_at + COLD_WAIT_S)
                    continue
                item.least = 1  # its flag waited COLD_WAIT_S: whatever it holds goes
            elif card <= (self.spill_above if hot else COLD_SPILL_MIN - 1):
                self.counts.waiting.pop(item.queue, None)
                continue
            active.append(item)
        spilling, down = active, set()
        while active:
            active, refused = self._spill_round(active, moved)
            down |= refused
        for item in spilling:
            if item.queue not in down:
                self.counts.waiting.pop(item.queue, None)
        return moved, down

    def _parsed(
        self, flags: list[tuple[str, float]]
    ) -> Iterator[tuple[str, float, tuple[str, str, str, str, bool], int]]:
        """Each flag whose queue is a crawl queue key: (queue, flagged at, its parts, its shard)."""
        for queue, flagged_at in flags:
            try:
                parts = self.keys.parse_lane_queue(queue)
            except KeyFormatError:
                continue
            yield queue, flagged_at, parts, self.keys.shard_of(parts[3])

    def _spill_round(self, active: list[_Spill], moved: dict[str, int]) -> tuple[list[_Spill], set[str]]:
        """One segment of each queue in *active*; returns the queues with more to spill and the
        queues the store refused.

        A queue whose tail's last segment (the worst-ranked) holds fewer than half of
        FRONTIER_SEGMENT_SIZE requests, with room for this round's, gets one segment of both in its
        place (:meth:`_merges`): a broad crawl's queues, spilled a few requests at a time as their
        links arrive, keep one pointer per full segment in Redis, not one per spill."""
        pipe = self.redis.pipeline(transaction=False)
        for item in active:
            pipe.zrange(item.queue, item.keep, item.keep + self.segment_size - 1, withscores=True)
            pipe.zrange(item.tail, -1, -1)
        per_shard = Counter(item.shard for item in active)
        for shard, count in per_shard.items():
            pipe.hincrby(self.keys.tail_stats(shard), "ids", count)
        replies = pipe.execute()
        reads = replies[: 2 * len(active)]
        next_id = {
            shard: int(last) - per_shard[shard] + 1
            for shard, last in zip(per_shard, replies[2 * len(active) :], strict=True)
        }
        rounds: list[tuple[_Spill, list[tuple[bytes, int]], str, bytes | None]] = []
        for index, item in enumerate(active):
            rows = [(bytes(member), int(score)) for member, score in reads[2 * index]]
            segment_id = f"{next_id[item.shard]}.{_token()}"
            next_id[item.shard] += 1
            last = reads[2 * index + 1]
            if rows:
                rounds.append((item, rows, segment_id, bytes(last[0]) if last else None))
        if not rounds:
            return [], set()
        merges = self._merges(rounds)
        batch: list[_Segment] = []
        for item, rows, segment_id, _last in rounds:
            replaced, old_rows, old_path = merges.get(item.queue, ("", [], None))
            whole = sorted(old_rows + rows, key=lambda row: row[1]) if replaced else rows
            data = encode_segment(whole)
            path = self.store.path(item.shard, segment_id)
            member = tail_member(segment_id, len(whole), len(data))
            batch.append(_Segment(item, rows, path, data, member, whole[0][1], replaced, old_path))
        try:
            self.store.write_many([(segment.path, segment.data) for segment in batch])
        except OSError as exc:
            for segment in batch:
                self.counts.waiting[segment.item.queue] = segment.item.excess
            self._down(exc)
            return [], {segment.item.queue for segment in batch}
        self._up()

        def build() -> Any:
            calls = self.redis.pipeline(transaction=False)
            for segment in batch:
                item = segment.item
                args: list[Any] = [segment.member, segment.best, segment.replaced]  # best first
                for row_member, score in segment.rows:
                    args += [row_member, score]
                script_keys = [
                    item.queue,
                    item.tail,
                    self.keys.tail_stats(item.shard),
                    self.keys.tail_segments_base(item.shard),
                ]
                self.scripts.queue(calls, "tail_spill", script_keys, args)
            return calls

        done = self.scripts.execute(build)
        more: list[_Spill] = []
        aborted: list[str] = []
        replaced_paths: list[str] = []
        replaced_shards: set[int] = set()
        for segment, ok in zip(batch, done, strict=True):
            item, rows = segment.item, segment.rows
            if not int(ok):
                self.counts.aborted += 1
                aborted.append(segment.path)  # the queue or its last segment changed under us: nothing moved
                continue
            self.counts.spilled += len(rows)
            self.counts.segments_written += 1
            if segment.replaced_path is not None:
                self.counts.merged += 1
                replaced_paths.append(segment.replaced_path)
                replaced_shards.add(item.shard)
            moved[item.queue] = moved.get(item.queue, 0) + len(rows)
            item.excess -= len(rows)
            if item.excess >= item.least:
                more.append(item)
        if aborted:
            self.store.delete(aborted)
        if replaced_paths:  # as after a refill: deleted once the replicas no longer name them
            if self.replicas is not None:
                self.replicas.wait(sorted(replaced_shards), cluster_wide=False)
            self.store.delete(replaced_paths)
        return more, set()

    def _merges(
        self, rounds: list[tuple[_Spill, list[tuple[bytes, int]], str, bytes | None]]
    ) -> dict[str, tuple[str, list[tuple[bytes, int]], str]]:
        """Of a spill round's queues (queue, rows to spill, new id, the tail's last pointer), those
        whose last segment is small enough to be rewritten with the rows: queue -> (the pointer it
        replaces, that segment's rows, its path). A segment the store cannot give (down, missing,
        unreadable) is left as it is: the rows go to a segment of their own."""
        wanted: list[tuple[str, str, str]] = []
        for item, rows, _sid, last in rounds:
            if last is None:
                continue
            member = last.decode()
            try:
                segment_id, count, _size = parse_tail_member(member)
            except ValueError:
                continue
            if count < self.merge_below and count + len(rows) <= self.segment_size:
                wanted.append((item.queue, member, self.store.path(item.shard, segment_id)))
        if not wanted:
            return {}
        try:
            objects = self.store.read_many([path for _queue, _member, path in wanted])
        except OSError:
            return {}  # the write that follows finds out whether the store is down
        merges: dict[str, tuple[str, list[tuple[bytes, int]], str]] = {}
        for (queue, member, path), data in zip(wanted, objects, strict=True):
            if data is None:
                continue
            try:
                rows = decode_segment(data)
            except TailError:
                continue  # its refill reports it lost
            if rows:
                merges[queue] = (member, rows, path)
        return merges

    # --- refill ------------------------------------------------------------------------------

    def refill(self, queue: str, flagged_at: float | None = None) -> int:
        """Refill crawl queue *queue*'s head from its best segments while it is short; returns the
        requests queued (:meth:`refill_many` of one queue).

        Raises:
            TailStoreDown: the store could not be read (the segment stays where it is).
        """
        queued, down = self.refill_many([(queue, time.time() if flagged_at is None else flagged_at)])
        if down:
            raise TailStoreDown(self.health.reason or "the tail store refused a read")
        return queued.get(queue, 0)

    def refill_many(self, flags: list[tuple[str, float]]) -> tuple[dict[str, int], set[str]]:
        """Refill each flagged crawl queue's head from its best segments while it is short; returns
        the requests queued per queue and the queues whose segment the store could not give.

        A queue is short while its head holds fewer than half of FRONTIER_HEAD_SIZE requests ranked
        before its tail's best (the pops may serve only those). The queues are worked together, a
        segment of each per round: one pipeline of reads, the segments read
        (:meth:`TailStore.read_many`), one pipeline of ``tail_refill.lua`` calls, one replica wait
        and one delete of the objects.
        """
        work: list[_Refill] = []
        for queue, _flagged_at, (spider, appid, crawlid, domain, render), shard in self._parsed(flags):
            tail = self.keys.tail_queue(spider, appid, crawlid, domain, render)
            script_keys = [
                queue,
                tail,
                self.keys.domain_crawls(spider, domain, render),
                self.keys.domains(spider, render, shard),
                self.keys.crawl_domains(spider, appid, crawlid, render, shard),
                self.keys.tail_stats(shard),
                self.keys.tail_segments_base(shard),
            ]
            work.append(_Refill(queue, shard, tail, domain, self.keys.crawl_member(appid, crawlid), script_keys))
        queued: dict[str, int] = {}
        down: set[str] = set()
        while work:
            work = self._refill_round(work, queued, down)
        return queued, down

    def _refill_round(self, work: list[_Refill], queued: dict[str, int], down: set[str]) -> list[_Refill]:
        """One segment into each short queue of *work*; returns the queues that may want another."""
        pipe = self.redis.pipeline(transaction=False)
        for item in work:
            pipe.zrange(item.tail, 0, 0, withscores=True)
        firsts = pipe.execute()
        pipe = self.redis.pipeline(transaction=False)
        candidates: list[tuple[_Refill, Any]] = []
        for item, first in zip(work, firsts, strict=True):
            if first:
                # the head's requests ranked before the tail's best: what pops may serve until a refill
                pipe.zcount(item.queue, "-inf", f"({int(first[0][1])}")
                candidates.append((item, first[0][0]))
        aheads = pipe.execute() if candidates else []
        batch: list[tuple[_Refill, str, str, int]] = []
        bad: list[tuple[str, str]] = []
        for (item, raw), ahead in zip(candidates, aheads, strict=True):
            if int(ahead) >= self.refill_below:
                continue
            member = raw.decode() if isinstance(raw, bytes) else str(raw)
            try:
                segment_id, count, _size = parse_tail_member(member)
            except ValueError:
                bad.append((item.tail, member))  # nothing we wrote: no segment to read
                continue
            batch.append((item, member, self.store.path(item.shard, segment_id), count))
        if bad:
            pipe = self.redis.pipeline(transaction=False)
            for tail, member in bad:
                pipe.zrem(tail, member)
            pipe.execute()
        if not batch:
            return []
        try:
            objects = self.store.read_many([path for _item, _member, path, _count in batch])
        except OSError as exc:
            self._down(exc)
            down.update(item.queue for item, *_ in batch)
            return []
        self._up()
        loads: list[tuple[_Refill, str, str, list[tuple[bytes, int]]]] = []
        missing: list[tuple[_Refill, str, str, int]] = []
        for (item, member, path, count), data in zip(batch, objects, strict=True):
            if data is None:
                missing.append((item, member, path, count))
                continue
            try:
                rows = decode_segment(data)
            except TailError as exc:
                self._lost(item.queue, member, count, str(exc))
                rows = []
            loads.append((item, member, path, rows))
        if missing:
            pipe = self.redis.pipeline(transaction=False)
            for item, member, _path, _count in missing:
                pipe.zscore(item.tail, member)
            for (item, member, path, count), score in zip(missing, pipe.execute(), strict=True):
                if score is None:
                    continue  # refilled (and deleted) by another redis-monitor, or purged by a stop
                self._lost(item.queue, member, count, "is missing from the store")
                loads.append((item, member, path, []))
        if not loads:
            return []

        def build() -> Any:
            calls = self.redis.pipeline(transaction=False)
            for item, member, _path, rows in loads:
                args: list[Any] = [member, item.crawl, item.domain]
                for row_member, score in rows:
                    args += [row_member, score]
                self.scripts.queue(calls, "tail_refill", item.script_keys, args)
            return calls

        results = self.scripts.execute(build)
        again: list[_Refill] = []
        done: list[str] = []
        for (item, _member, path, _rows), result in zip(loads, results, strict=True):
            n = int(result)
            if n < 0:
                continue  # another refiller or a stop took the pointer: its object is theirs
            done.append(path)
            self.counts.refilled += n
            self.counts.segments_read += 1
            queued[item.queue] = queued.get(item.queue, 0) + n
            again.append(item)
        if done:
            if self.replicas is not None:
                self.replicas.wait(sorted({item.shard for item in again}), cluster_wide=False)
            self.store.delete(done)
        return again

    # --- garbage -----------------------------------------------------------------------------

    def sweep(self, shard: int, older_than_s: float = SWEEP_AGE_S) -> int:
        """Delete the objects of *shard* in the store that no pointer names and that are older than
        *older_than_s* (what a kill between a write and its script, or before a delete, leaves;
        temporary files of interrupted writes too); returns how many. The age keeps a segment whose
        spill is under way: its script runs within seconds of its write.

        Raises:
            OSError: the store could not be listed.
        """
        folder = f"{self.store.root}/{shard}"
        try:
            entries = self.store.fs.find(folder, detail=True)
        except FileNotFoundError:
            return 0
        now = time.time()
        candidates: list[tuple[str, str]] = []
        for path, info in entries.items():
            name = str(path).rsplit("/", 1)[-1]
            if not (name.endswith(".seg") or ".seg.tmp-" in name):
                continue
            if now - object_mtime(info) < older_than_s:
                continue
            candidates.append((str(path), name.split(".seg", 1)[0]))
        if not candidates:
            return 0
        # a segment is live if its bucket names it, or the one index of every segment that releases
        # before the buckets kept (its key is the buckets' base; a segment spilled then is still there)
        legacy = self.keys.tail_segments_base(shard)
        live: list[Any] = []
        for first in range(0, len(candidates), 5_000):
            pipe = self.redis.pipeline(transaction=False)
            for _path, segment in candidates[first : first + 5_000]:
                pipe.zscore(self.keys.tail_segments(shard, bucket=self.keys.tail_segment_bucket(segment)), segment)
                pipe.zscore(legacy, segment)
            replies = pipe.execute()
            live += [a if a is not None else b for a, b in zip(replies[::2], replies[1::2], strict=True)]
        dead = [path for (path, name), score in zip(candidates, live, strict=True) if score is None or ".tmp-" in path]
        self.store.delete(dead)
        if dead:
            logger.info("deleted %d tail segments of shard %d that no pointer names", len(dead), shard)
        return len(dead)

    def _sweep_due(self) -> None:
        """Run :meth:`sweep` over every shard every SWEEP_EVERY_S (the first time a minute after start)."""
        self._sweeps.sweep_shards(self.keys.shards, self.sweep, self._down)

    # --- the store's health ------------------------------------------------------------------

    def _lost(self, queue: str, member: str, count: int, why: str) -> None:
        self.counts.lost += count
        logger.error(
            "tail segment %s of queue %s %s (FRONTIER_TAIL_URL %s): its %d requests are lost",
            member,
            queue,
            why,
            self.store.public_url,
            count,
        )

    def _down(self, exc: BaseException) -> None:
        self.counts.store_errors += 1
        self.health.down(exc)

    def _up(self) -> None:
        if self.health.up():
            self.counts.waiting.clear()

    def _publish_waiting(self, shard: int) -> None:
        """Write how many requests wait beyond their heads for the store, and set or clear tail_full."""
        waiting = sum(self.counts.waiting.values())
        if not waiting and not self._published:
            return
        self.redis.hset(self.keys.tail_stats(shard), "waiting", waiting)
        if waiting > self.backlog_max:
            message = f"FRONTIER_TAIL_URL {self.store.public_url}: {self.health.reason or 'unavailable'}"
            self.redis.set(self.keys.tail_full(), message, ex=FULL_TTL_S)
        else:
            self.redis.delete(self.keys.tail_full())
        self._published = bool(waiting)


class TailStoreDown(Exception):
    """The tail store refused a write or a read (the mover retries after STORE_RETRY_S)."""


def _token() -> str:
    return secrets.token_hex(3)
