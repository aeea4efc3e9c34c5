"""The Redis frontier's priority queue: one sorted set per (spider, crawl, domain).

A :class:`PriorityQueue` lives at a queue key such as ``keys.crawl_queue(spider, appid, crawlid,
domain)`` (the frontier's layout is in ``utils/frontier.py``). Members are opaque bytes (the
encoded request); the score packs the priority and an arrival sequence so that ``ZPOPMIN`` serves
the highest priority first and, among equal priorities, the oldest push first (API.md §3.1):

    score = -priority * 2**32 + (seq mod 2**32)

``seq`` comes from the cluster-wide counter ``keys.queue_sequence()``, taken inside the push script
(``INCRBY`` by the batch size), so pushes from any number of processes are ordered by when Redis ran
them. Every score is an integer of magnitude below 2**53, hence exact in the double Redis stores,
and the priority comes back as ``-floor(score / 2**32)`` (:func:`decode_priority`).

Bounds: priorities are clamped to ``[PRIORITY_MIN, PRIORITY_MAX]`` = ±2**20 (±1,048,576; real ones
run from ``SCHEMA_PRIORITY_MAX`` down by 10 per depth level or retry, about -1000 for a very long
wandering crawl), so a clamped request only loses its order against other clamped ones. The
sequence wraps every 2**32 (about 4.3 billion) pushes cluster-wide; at the wrap, requests of equal
priority pushed just after it may be served before those pushed just before it. Nothing else
depends on the sequence.

Why not scrapy-redis's ``PriorityQueue``: its score is ``-priority`` alone, so equal priorities pop
in member (byte) order, not arrival order, and it pickles requests itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from redis import Redis

    from crawlhive.utils.keys import Keys

SEQ_BITS = 32
"""Bits of the score that hold the arrival sequence."""
SEQ_SPAN = 2**SEQ_BITS
PRIORITY_MAX = 2**20
"""Largest priority stored as such; higher ones are clamped to it."""
PRIORITY_MIN = -(2**20)
"""Smallest priority stored as such; lower ones are clamped to it."""
PUSH_CHUNK = 1000
"""Items per ``ZADD`` inside the push script (Lua's ``unpack`` has a stack limit near 8000)."""

#: Lua twin of :func:`encode_score` for scripts that queue (here and in ``utils/frontier.py``).
SCORE_LUA = f"""
local function queue_score(priority, seq)
  return string.format('%.0f', -tonumber(priority) * {SEQ_SPAN} + seq % {SEQ_SPAN})
end
"""

# KEYS[1]: queue zset, KEYS[2]: sequence counter. ARGV: priority1, member1, priority2, member2, ...
# Returns the number of members newly added (ZADD NX: a member already queued keeps its place).
_PUSH_LUA = (
    SCORE_LUA
    + f"""
local n = #ARGV / 2
if n == 0 then return 0 end
local last = redis.call('INCRBY', KEYS[2], n)
local first = last - n + 1
local added = 0
local args = {{}}
for i = 1, n do
  args[#args + 1] = queue_score(ARGV[2 * i - 1], first + i - 1)
  args[#args + 1] = ARGV[2 * i]
  if #args >= {2 * PUSH_CHUNK} then
    added = added + redis.call('ZADD', KEYS[1], 'NX', unpack(args))
    args = {{}}
  end
end
if #args > 0 then
  added = added + redis.call('ZADD', KEYS[1], 'NX', unpack(args))
end
return added
"""
)


def clamp_priority(priority: int) -> int:
    """*priority* limited to ``[PRIORITY_MIN, PRIORITY_MAX]``, the range the score encodes exactly."""
    return max(PRIORITY_MIN, min(PRIORITY_MAX, int(priority)))


def encode_score(priority: int, seq: int) -> int:
    """The score of a request of *priority* pushed as number *seq* (what the push script computes)."""
    return -clamp_priority(priority) * SEQ_SPAN + seq % SEQ_SPAN


def decode_priority(score: float) -> int:
    """The (clamped) priority that :func:`encode_score` packed into *score*."""
    return -math.floor(score / SEQ_SPAN)


@runtime_checkable
class RequestQueue(Protocol):
    """A persistent queue of encoded requests, served highest priority first, FIFO among equals.

    Every method is one Redis round trip; each raises ``redis.RedisError`` when Redis fails, in
    which case a write may or may not have happened (the caller may retry: pushes are idempotent).
    """

    def push(self, item: bytes, priority: int) -> bool:
        """Queue *item* at *priority*.

        Returns:
            True if it was added; False if the identical item is already queued, in which case
            nothing changed (not its priority, not its place). The caller counts it as a duplicate.
        """
        ...

    def push_many(self, items: Sequence[tuple[bytes, int]]) -> int:
        """Queue ``(item, priority)`` pairs atomically, in list order; the same rule as :meth:`push`.

        Returns:
            How many were newly added.
        """
        ...

    def pop(self) -> bytes | None:
        """Remove and return the head (highest priority, oldest among equals); None when empty.

        The caller owns the popped item: if it is lost before being worked on, it is gone (use the
        throttle's pop-and-lease when that matters).
        """
        ...

    def peek(self) -> bytes | None:
        """The item :meth:`pop` would return, without removing it; None when empty."""
        ...

    def size(self) -> int:
        """Number of queued items."""
        ...

    def __len__(self) -> int:
        """Same as :meth:`size`."""
        ...

    def priority_range(self) -> tuple[int, int] | None:
        """``(highest, lowest)`` priority among queued items (the per-domain entry of API.md §4.1),
        or None when empty."""
        ...

    def clear(self) -> int:
        """Remove every queued item and return how many there were."""
        ...


class PriorityQueue:
    """:class:`RequestQueue` on one sorted set.

    Args:
        redis: a client with ``decode_responses=False`` (members are returned as bytes).
        keys: the cluster's key formats (for the shared arrival sequence).
        key: the queue's key, e.g. ``keys.crawl_queue(spider, appid, crawlid, domain)``.
    """

    def __init__(self, redis: Redis, keys: Keys, key: str) -> None:
        self.redis = redis
        self.keys = keys
        self.key = key
        self._push = redis.register_script(_PUSH_LUA)

    def __repr__(self) -> str:
        return f"PriorityQueue({self.key!r})"

    def push(self, item: bytes, priority: int) -> bool:
        """See :meth:`RequestQueue.push`; touches the queue and ``keys.queue_sequence()``."""
        return self.push_many([(item, priority)]) == 1

    def push_many(self, items: Sequence[tuple[bytes, int]]) -> int:
        """See :meth:`RequestQueue.push_many`: one script call, so one round trip for any batch.

        Within the batch, an item listed twice keeps its first position and counts once.
        """
        if not items:
            return 0
        args: list[bytes | int] = []
        for item, priority in items:
            args += (clamp_priority(priority), item)
        return int(self._push(keys=[self.key, self.keys.queue_sequence()], args=args))

    def pop(self) -> bytes | None:
        """See :meth:`RequestQueue.pop` (``ZPOPMIN``)."""
        popped = self.redis.zpopmin(self.key)
        return popped[0][0] if popped else None

    def peek(self) -> bytes | None:
        """See :meth:`RequestQueue.peek`."""
        head = self.redis.zrange(self.key, 0, 0)
        return head[0] if head else None

    def size(self) -> int:
        """See :meth:`RequestQueue.size` (``ZCARD``)."""
        return int(self.redis.zcard(self.key))

    def __len__(self) -> int:
        return self.size()

    def priority_range(self) -> tuple[int, int] | None:
        """See :meth:`RequestQueue.priority_range`: head and tail scores read in one ``MULTI``."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.zrange(self.key, 0, 0, withscores=True)
        pipe.zrange(self.key, -1, -1, withscores=True)
        head, tail = pipe.execute()
        if not head or not tail:
            return None
        return decode_priority(head[0][1]), decode_priority(tail[0][1])

    def clear(self) -> int:
        """See :meth:`RequestQueue.clear` (``ZCARD`` and ``DEL`` in one ``MULTI``)."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.zcard(self.key)
        pipe.delete(self.key)
        count, _ = pipe.execute()
        return int(count)


__all__ = [
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "PriorityQueue",
    "RequestQueue",
    "clamp_priority",
    "decode_priority",
    "encode_score",
]
