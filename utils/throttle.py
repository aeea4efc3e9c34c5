"""Cluster-wide throttled pops from the frontier, decided on the Redis clock (API.md §3.11).

A :class:`ThrottledQueue` pairs a :class:`~crawlhive.utils.queues.PriorityQueue` with a throttle
key. Its :meth:`~ThrottledQueue.pop` is one Lua script, so check-and-pop is atomic across every
crawler process and costs one round trip:

1. read Redis's ``TIME`` (never a client clock, so crawler clocks may disagree);
2. trim ``keys.throttle(throttle_key)`` (a sorted set of fetch start times) to the rolling window;
3. refuse if ``hits`` starts already lie in the last ``window`` seconds or, when moderated, if the
   last start is less than ``window / hits`` seconds ago; the refusal carries the exact wait;
4. otherwise ``ZPOPMIN`` the queue, record the start, renew the set's expiry and, for
   :meth:`~ThrottledQueue.pop_and_lease`, put the request in a lease set with its deadline.

The rule is exact: with starts ``t_i`` sorted, ``t[i + hits] - t[i] >= window`` for every ``i``
(a rolling window is half-open, ``(now - window, now]``), and when moderated also
``t[i + 1] - t[i] >= window / hits``, all to the microsecond on the Redis clock. (The crawler's
frontier pop shares these Lua functions and counts over ``window + QUEUE_WINDOW_MARGIN``; see
``utils/frontier.py``.)

Why one script on the Redis clock (scrapy-redis has no throttle to reuse): a check and a pop in
separate round trips let concurrent crawlers pass the same check, and client clocks let hosts with
skewed clocks disagree about the window.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crawlhive.utils.keys import Keys

if TYPE_CHECKING:
    from crawlhive.utils.queues import PriorityQueue
    from crawlhive.utils.settings import Settings

_US = 1_000_000

#: Lua functions shared by every script that throttles (this module's pop and the frontier's
#: scheduler pop in ``utils/frontier.py``): the rule lives once. Times are integer microseconds on
#: the Redis clock; string scores are formatted by hand because Lua's tostring keeps only 14
#: significant digits.
THROTTLE_LUA = """
local function secs(us)
  return string.format('%d.%06d', math.floor(us / 1000000), us % 1000000)
end
local function micros(score)
  return math.floor(tonumber(score) * 1000000 + 0.5)
end
-- Microseconds until throttle set tkey allows one more start at now (0 = now); trims the window.
-- The count rule uses window + margin (us), the moderated spacing window / hits.
local function throttle_wait(tkey, now, hits, window, moderated, margin)
  local span = window + margin
  redis.call('ZREMRANGEBYSCORE', tkey, '-inf', secs(now - span))
  local count = redis.call('ZCARD', tkey)
  local wait = 0
  if count >= hits then
    local oldest = redis.call('ZRANGE', tkey, count - hits, count - hits, 'WITHSCORES')
    wait = micros(oldest[2]) + span - now
  end
  if moderated and count > 0 then
    local last = redis.call('ZRANGE', tkey, -1, -1, 'WITHSCORES')
    local spaced = micros(last[2]) + math.ceil(window / hits) - now
    if spaced > wait then wait = spaced end
  end
  return wait
end
-- Record a start at now in throttle set tkey and renew its expiry.
local function throttle_record(tkey, now, window)
  local start = secs(now)
  local id = start
  local n = 0
  while redis.call('ZADD', tkey, 'NX', start, id) == 0 do
    n = n + 1
    id = start .. '-' .. n
  end
  redis.call('PEXPIRE', tkey, math.ceil(window / 1000) + 1000)
end
"""

# KEYS[1]: queue zset, KEYS[2]: throttle zset, KEYS[3] (optional): lease zset.
# ARGV[1]: hits, ARGV[2]: window (us), ARGV[3]: '1' if moderated, ARGV[4]: lease (us), with KEYS[3].
# Returns {status, wait_us, time_s, time_us[, member]}; status 0 empty, 1 popped, 2 throttled,
# 3 paused. Times are integers: Lua numbers would be truncated in the reply.
_POP_LUA = (
    THROTTLE_LUA
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local hits = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
if redis.call('ZCARD', KEYS[1]) == 0 then
  return {0, 0, t[1], t[2]}
end
if hits <= 0 then
  return {3, window, t[1], t[2]}
end
local wait = throttle_wait(KEYS[2], now, hits, window, ARGV[3] == '1', 0)
if wait > 0 then
  return {2, wait, t[1], t[2]}
end
local popped = redis.call('ZPOPMIN', KEYS[1])
throttle_record(KEYS[2], now, window)
if KEYS[3] then
  redis.call('ZADD', KEYS[3], secs(now + tonumber(ARGV[4])), popped[1])
end
return {1, 0, t[1], t[2], popped[1]}
"""
)


class PopStatus(enum.Enum):
    """What a throttled pop did."""

    POPPED = 1
    """A request was popped (and leased, for :meth:`ThrottledQueue.pop_and_lease`)."""
    EMPTY = 0
    """The queue is empty; the throttle was not touched."""
    THROTTLED = 2
    """The throttle refused; ``wait_s`` says when it will allow the next pop."""
    PAUSED = 3
    """``hits`` is 0: the throttle key is paused; ``wait_s`` is one window, a hint to re-check."""


@dataclass(frozen=True, slots=True)
class PopResult:
    """The outcome of one throttled pop.

    Attributes:
        status: what happened.
        item: the popped encoded request when ``status`` is POPPED, else None.
        wait_s: seconds until the throttle allows the next pop (THROTTLED), one window (PAUSED),
            else 0. A scheduler sleeps this long (or serves other queues) instead of polling.
        server_time: Redis ``TIME`` when the script ran, epoch seconds with microseconds; for a
            POPPED result, the fetch start recorded in the throttle set.
    """

    status: PopStatus
    item: bytes | None
    wait_s: float
    server_time: float

    def __bool__(self) -> bool:
        return self.status is PopStatus.POPPED


@dataclass(frozen=True, slots=True)
class ThrottleLimit:
    """At most ``hits`` fetch starts in any rolling ``window_s`` seconds; ``hits`` 0 pauses.

    With ``moderated``, starts are also at least ``window_s / hits`` seconds apart.

    Raises:
        ValueError: ``hits`` is negative or ``window_s`` is not positive.
    """

    hits: int
    window_s: float
    moderated: bool = True

    def __post_init__(self) -> None:
        if self.hits < 0:
            raise ValueError(f"throttle hits must be >= 0, got {self.hits!r}")
        if not self.window_s > 0:
            raise ValueError(f"throttle window must be > 0 seconds, got {self.window_s!r}")

    @classmethod
    def from_settings(cls, settings: Settings) -> ThrottleLimit:
        """The default limit: ``QUEUE_HITS`` per ``QUEUE_WINDOW`` s, ``QUEUE_MODERATED``."""
        return cls(
            settings.getint("QUEUE_HITS"), settings.getfloat("QUEUE_WINDOW"), settings.getbool("QUEUE_MODERATED")
        )

    @property
    def interval_s(self) -> float:
        """Smallest gap between two starts when moderated (infinite when paused)."""
        return self.window_s / self.hits if self.hits else math.inf


def throttle_key_for(settings: Settings, domain: str, spider: str) -> str:
    """The throttle key for *spider* fetching from *domain* under *settings* (API.md §3.11).

    Includes *spider* when ``SCHEDULER_TYPE_ENABLED`` and ``CRAWLER_EGRESS_ID`` when
    ``SCHEDULER_IP_ENABLED``; the format is :meth:`crawlhive.utils.keys.Keys.throttle_key`.
    """
    spider_part = spider if settings.getbool("SCHEDULER_TYPE_ENABLED") else None
    egress = settings["CRAWLER_EGRESS_ID"] if settings.getbool("SCHEDULER_IP_ENABLED") else None
    return Keys.throttle_key(domain, spider_part, egress)


class ThrottledQueue:
    """A priority queue whose pops obey a cluster-wide :class:`ThrottleLimit`.

    Args:
        queue: the queue to pop from; its client must have ``decode_responses=False``.
        throttle_key: from :meth:`~crawlhive.utils.keys.Keys.throttle_key` (or
            :func:`throttle_key_for`); every queue sharing it shares one budget.
        limit: the limit applied when a pop passes none (a domain-config update passes its own).
    """

    def __init__(self, queue: PriorityQueue, throttle_key: str, limit: ThrottleLimit) -> None:
        self.queue = queue
        self.throttle_key = throttle_key
        self.limit = limit
        self.key = queue.keys.throttle(throttle_key)
        self._pop = queue.redis.register_script(_POP_LUA)

    def __repr__(self) -> str:
        return f"ThrottledQueue({self.queue.key!r}, {self.key!r}, {self.limit!r})"

    def pop(self, limit: ThrottleLimit | None = None) -> PopResult:
        """Pop the head if the throttle allows it, atomically, in one round trip.

        Touches the queue and ``keys.throttle(throttle_key)`` (trimmed, and on a pop given a new
        start and an expiry of one window plus a second).

        Args:
            limit: overrides ``self.limit`` for this call.

        Returns:
            POPPED with the item; EMPTY (nothing recorded); THROTTLED or PAUSED with ``wait_s``.
            The popped item is the caller's alone: lost if the caller dies (see
            :meth:`pop_and_lease`).

        Raises:
            redis.RedisError: Redis failed; nothing was popped unless the reply was lost.
        """
        return self._run(self.limit if limit is None else limit, None, 0.0)

    def pop_and_lease(self, lease_key: str, lease_s: float, limit: ThrottleLimit | None = None) -> PopResult:
        """:meth:`pop`, and in the same atomic step lease the popped item.

        The item is added to the sorted set *lease_key* (normally ``keys.leases(spider)``) with
        score = Redis time of the pop + *lease_s*; a reclaimer re-queues it after that deadline
        unless the crawler acked it (removed it) or renewed it (raised the score) first.

        Args:
            lease_key: the lease sorted set.
            lease_s: seconds of the lease (``LEASE_TIMEOUT``).
            limit: overrides ``self.limit`` for this call.

        Returns:
            As :meth:`pop`; a POPPED item is already leased.

        Raises:
            redis.RedisError: Redis failed; nothing was popped unless the reply was lost, and a
                popped item is then leased, so it comes back after its deadline.
            ValueError: *lease_s* is not positive.
        """
        if not lease_s > 0:
            raise ValueError(f"lease must be > 0 seconds, got {lease_s!r}")
        return self._run(self.limit if limit is None else limit, lease_key, lease_s)

    def _run(self, limit: ThrottleLimit, lease_key: str | None, lease_s: float) -> PopResult:
        keys = [self.queue.key, self.key]
        args: list[int | str] = [limit.hits, max(1, round(limit.window_s * _US)), "1" if limit.moderated else "0"]
        if lease_key is not None:
            keys.append(lease_key)
            args.append(max(1, round(lease_s * _US)))
        reply = self._pop(keys=keys, args=args)
        status = PopStatus(int(reply[0]))
        server_time = int(reply[2]) + int(reply[3]) / _US
        item = reply[4] if status is PopStatus.POPPED else None
        return PopResult(status, item, int(reply[1]) / _US, server_time)


__all__ = ["PopResult", "PopStatus", "ThrottleLimit", "ThrottledQueue", "throttle_key_for"]
