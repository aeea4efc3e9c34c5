"""Which frontier shards a crawler's next pops go to: :class:`ShardCursor`.

With several frontier shards (docs/contract.md §18.2) a crawler does not ask every shard at every
pop: it asks, in turn from where its last pops began, only the shards that may have work, and
remembers per shard what its pops found (a lease: ask again at once; a throttled domain: not before
it is ready; nothing queued: not before a wake-up names the shard, or :data:`SHARD_RECHECK_S`).
:meth:`CrawlRuntime.take <crawlhive.crawler.runtime.CrawlRuntime.take>` sends the pops; the
scheduler passes on the wake-ups (:meth:`ShardCursor.wake`). Pure bookkeeping on the times it is
given (``time.monotonic()``), so it is tested without Redis.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Seconds a frontier shard whose pops found nothing queued is not asked again, unless a wake-up
#: names it (several shards: a crawler then asks only shards that may have work).
SHARD_RECHECK_S = 2.0


class ShardCursor:
    """The rotation of one crawler's pops over *shards* frontier shards.

    Per shard it keeps the monotonic time before which the shard is not asked (throttled: until its
    soonest domain is ready; nothing queued: until a wake-up names it, or *recheck_s*) and whether
    it had nothing queued.
    """

    def __init__(self, shards: int, recheck_s: float = SHARD_RECHECK_S) -> None:
        self.shards = shards
        self.recheck_s = recheck_s
        self._next = 0
        self._ready_at = [0.0] * shards
        self._empty = [False] * shards

    def plan(self, count: int, now: float) -> list[int]:
        """The shards of the next *count* pops: those that may be asked at *now*, in turn from the
        shard after the one the last pops began with (a shard may come more than once). Empty when
        no shard may be asked now (then :meth:`wait_s` says for how long)."""
        order = [(self._next + i) % self.shards for i in range(self.shards)]
        ready = [k for k in order if self._ready_at[k] <= now]
        if not ready:
            return []
        self._next = (ready[0] + 1) % self.shards
        return [ready[i % len(ready)] for i in range(count)]

    def record(self, leased: Iterable[int], waits: dict[int, float | None], now: float) -> None:
        """Record what the pops of each shard found at *now*: a lease, or an unknown outcome such as
        a failed call (*leased*: ask again at once), the time until its soonest domain is ready
        (*waits*, throttled), or nothing queued (a wait of None: not again for *recheck_s*)."""
        leased = set(leased)
        for shard in leased:
            self._ready_at[shard], self._empty[shard] = 0.0, False
        for shard, wait_s in waits.items():
            if shard in leased:
                continue
            if wait_s is None:
                self._ready_at[shard], self._empty[shard] = now + self.recheck_s, True
            else:
                self._ready_at[shard], self._empty[shard] = now + wait_s, False

    def any_ready(self, now: float) -> bool:
        """Whether some shard may be asked at *now* (one not asked yet may have work)."""
        return any(at <= now for at in self._ready_at)

    def wait_s(self, now: float) -> float | None:
        """No shard may be asked at *now*: the time until the soonest throttled one is ready, or None
        when every shard had nothing queued."""
        throttled = [at for at, empty in zip(self._ready_at, self._empty, strict=True) if not empty]
        return max(0.0, min(throttled) - now) if throttled else None

    def wake(self, shards: Iterable[int] | None) -> None:
        """Work was queued in *shards* (None: in any, e.g. after a lost subscription): ask them
        again at the next pop. Numbers outside the shard range are ignored (a wake-up message is
        another process's word)."""
        everything = range(self.shards) if shards is None else shards
        for shard in everything:
            if 0 <= shard < self.shards:
                self._ready_at[shard] = 0.0
                self._empty[shard] = False
