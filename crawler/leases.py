"""The leases one crawler process holds, and how each one ends.

A :class:`LeaseContext` travels with a leased request through Scrapy (in its meta). The
:class:`LeaseTable` keeps every context in flight, renews their leases, and is the only place where a
lease ends:

* :meth:`LeaseTable.finish`: the page's items (or dead letter) are acknowledged: its links are
  queued and its lease acked, together with every page finished while the previous finish was
  being written, on the crawler's asyncio batcher (``crawler/batching.py``), so the reactor never
  waits for it: the arrival numbers of the links (one ``INCRBY`` per shard), then on a Redis
  Cluster the shards' writes and the crawls' push generations, then the acks with the
  cluster-wide writes; each round one pipeline per node, shared with the pops and admits of other
  pages (see :meth:`LeaseTable._write_async`). When Redis fails (a Redis Cluster node failing over)
  the same writes are tried again, with back-off, for up to LEASE_TIMEOUT, the lease renewed
  meanwhile: they are idempotent;
* :meth:`LeaseTable.drop`: a policy drop (nothing emitted, no counter);
* :meth:`LeaseTable.retry`: back to the frontier as a retry, for any crawler, after its back-off
  (docs/contract.md §3.10, §14; a park or requeue that fails on a Redis error is tried again, as
  a finish is, the lease kept and renewed here meanwhile);
* :meth:`LeaseTable.give_back`: an unstarted request handed back unchanged (graceful shutdown);
* :meth:`LeaseTable.abandon`: forgotten here without ending it: it expires and the redis-monitor
  reclaims it (a Kafka or Redis failure never acks: at least once, §3.12).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from redis.exceptions import NoScriptError, RedisClusterException, RedisError
from twisted.internet import reactor

from crawlhive.utils.backends import tracing
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import CommandList, is_cluster, write_pipeline
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.backends.scripts import names as script_names
from crawlhive.utils.backends.scripts import scripts
from crawlhive.utils.frontier import (
    WAKE_ANY,
    Frontier,
    FrontierLeaser,
    FrontierRequest,
    Lease,
    TouchStatus,
    retried,
    wake_message,
)
from crawlhive.utils.frontier.writer import plan_push

if TYPE_CHECKING:
    from crawlhive.crawler.batching import ScriptBatcher
    from crawlhive.crawler.trace import PageTrace

logger = logging.getLogger(__name__)

#: What the Redis calls of a lease's end may raise when Redis fails: a ``RedisError``, or redis-py's
#: cluster client failing to read the slot map while a primary fails over (no ``RedisError``: caught
#: as one only, it escaped, and the finish of its pages was lost, their leases left to expire).
REDIS_FAILURES = (RedisError, RedisClusterException)

#: Seconds before a finish that failed on a Redis error is tried again, doubled up to FINISH_RETRY_MAX_S.
FINISH_RETRY_S = 0.5
FINISH_RETRY_MAX_S = 5.0


@dataclass(eq=False)
class LeaseContext:
    """One leased request while this process works on it (kept in request meta, see requests.py).

    Attributes:
        lease: what the frontier pop returned.
        fingerprint: Scrapy's fingerprint of the request as first built (hex).
        children: the links to queue when the page is finished (after dedupe and page caps).
        pending_items: items (and a dead letter) handed on and not yet acknowledged by the output.
        parsed: the spider's output for the page has been handled.
        failed: a dead letter replaced the item (the lease ends counted as failed).
        done: the lease has ended here (acked, handed back, retried or abandoned).
    """

    lease: Lease
    fingerprint: str = ""
    children: list[FrontierRequest] = field(default_factory=list)
    pending_items: int = 0
    parsed: bool = False
    failed: bool = False
    done: bool = False
    started: float = field(default_factory=time.monotonic)
    """When the lease was taken (monotonic clock)."""
    finish_failed: float = 0.0
    """When writing its finish first failed on a Redis error (monotonic clock; 0: never)."""
    link_owner: bytes = b""
    """The 4 bytes that own, in the dupefilter, the links this page queues when they are not its
    fingerprint's first 4: a recrawl's revisit (crawler/recrawl.py), which must not queue again the
    links its page's first fetch queued."""
    bloom_records: dict[int, str] = field(default_factory=dict)
    """Frontier shard -> the page's record of the links it added to the crawl's Bloom filter there
    (``Keys.dupefilter_bloom_page``, written by the admit): deleted by the page's ack."""
    trace: PageTrace | None = None
    """The page's spans while tracing is on (crawler/trace.py, docs/contract.md §26.3); None while off."""

    @property
    def request(self) -> FrontierRequest:
        return self.lease.request


class LeaseTable:
    """The in-flight leases of one crawler process.

    Args:
        redis: a bytes client (blocking: renewals and acks run off the hot path, batched).
        keys: the cluster's key formats.
        worker, frontier: the crawler side and the writer of the frontier.
        max_hold_s: a page in flight longer than this is given up (only a bug keeps one so long,
            and renewing its lease forever would stop its crawl from ever completing).
        on_crawled: called once per lease that ends counted as crawled (the items stat).
        batcher: the crawler's asyncio batcher: finishes are written through it, off the reactor;
            None (or REDIS_WAIT_REPLICAS, whose ``WAIT`` blocks) writes them on *redis*, blocking.
    """

    def __init__(
        self,
        redis: RedisClient,
        keys: Keys,
        worker: FrontierLeaser,
        frontier: Frontier,
        max_hold_s: float,
        on_crawled: Callable[[], None],
        batcher: ScriptBatcher | None = None,
        on_backend_failed: Callable[[str], None] | None = None,
    ) -> None:
        self.redis = redis
        self.batcher = batcher if frontier.replicas is None or not frontier.replicas.replicas else None
        self.cluster = is_cluster(redis)
        self._writing: asyncio.Task[None] | None = None
        self.keys = keys
        self.worker = worker
        self.frontier = frontier
        self.max_hold_s = max_hold_s
        self.on_crawled = on_crawled
        #: Told of a Redis failure of the renewal (the runtime's outage rule: one WARNING, and the
        #: check that the ``crawlhive up`` this crawler used has not exited); None: logged here.
        self.on_backend_failed = on_backend_failed
        self.scripts = scripts(redis)
        self.inflight: dict[bytes, LeaseContext] = {}
        self.closed = False
        self._finishing: list[tuple[LeaseContext, str]] = []
        self._parked: dict[bytes, Any] = {}  # member -> timer of a retry waiting out its back-off
        self._items: dict[int, tuple[Any, LeaseContext, int]] = {}  # id(item) -> (item, its page, times yielded)
        self._flush_call: Any = None
        # finishes that failed on a Redis error, tried again after a back-off (lease renewed meanwhile)
        self._unfinished: list[tuple[LeaseContext, str]] = []
        self._refinish_call: Any = None
        self._refinish_delay = FINISH_RETRY_S
        #: Called with each batch of finished pages and the pipeline of their acks, before the acks
        #: are queued (the recrawl schedule, crawler/recrawl.py, writes each visit's end there).
        self.finish_hooks: list[Callable[[list[tuple[LeaseContext, str]], Any], None]] = []
        # leases ended here whose move back to the queue (a retry's park, its requeue) failed on a
        # Redis error: still held, renewed, until the requeue succeeds (member -> context)
        self._held: dict[bytes, LeaseContext] = {}

    def add(self, context: LeaseContext) -> None:
        """Track *context* from now until its lease ends here."""
        self.inflight[context.lease.member] = context

    def _end(self, context: LeaseContext) -> bool:
        """Mark *context* done; False if it already was."""
        if context.done:
            return False
        context.done = True
        self.inflight.pop(context.lease.member, None)
        return True

    # --- items on their way through the item pipelines -------------------------------------------

    def page_items(self, context: LeaseContext, items: list[Any]) -> None:
        """*items* of *context*'s page go to the item pipelines: :meth:`claim` finds their page.

        Items are matched by identity, because a user's item (a dict, a ``scrapy.Item``, a
        dataclass, …) cannot carry an attribute and must reach the user's pipelines unchanged.
        """
        for item in items:
            entry = self._items.get(id(item))
            times = entry[2] + 1 if entry is not None and entry[0] is item else 1
            self._items[id(item)] = (item, context, times)
        context.pending_items += len(items)
        context.parsed = True
        if context.trace is not None:
            context.trace.parsed(len(items))
        self.maybe_finish(context)

    def claim(self, item: Any) -> LeaseContext | None:
        """The page of *item* as registered by :meth:`page_items` (None: an item of no page, or
        one a spider middleware replaced after crawlhive's saw it). The page may have ended
        meanwhile (``done``: its lease was lost or abandoned); its items are not sent then."""
        entry = self._items.pop(id(item), None)
        if entry is None or entry[0] is not item:
            return None
        if entry[2] > 1:  # the same object yielded again
            self._items[id(item)] = (item, entry[1], entry[2] - 1)
        return entry[1]

    def item_done(self, context: LeaseContext) -> None:
        """One item of *context*'s page is through: sent, dropped or failed."""
        context.pending_items -= 1
        self.maybe_finish(context)

    def _forget_items(self, context: LeaseContext) -> None:
        """Drop the registrations of a page given up on (items a spider middleware swallowed)."""
        for key in [k for k, (_, c, _n) in self._items.items() if c is context]:
            del self._items[key]

    def renew_all(self) -> None:
        """Renew every in-flight lease (one pipelined round trip); runs on a looping call.

        A page in flight for longer than ``max_hold_s`` is given up on instead (logged): its lease
        expires and is reclaimed, so the page is fetched again.
        """
        now = time.monotonic()
        for stale in [c for c in self.inflight.values() if not c.done and now - c.started > self.max_hold_s]:
            logger.error(
                "%s has been in flight for %.0fs; giving it up (its lease will be reclaimed)",
                stale.request.url,
                now - stale.started,
            )
            if stale.pending_items > 0:
                logger.error(
                    "%d items of %s never reached the item pipelines: does a spider middleware with an "
                    "order below 950 replace or drop items? (docs/spiders.md)",
                    stale.pending_items,
                    stale.request.url,
                )
            self._forget_items(stale)
            self.abandon(stale)
        contexts = [c for c in self.inflight.values() if not c.done]
        contexts += [c for c, _ in self._unfinished]  # their finish is tried again: keep their leases
        contexts += list(self._held.values())  # their requeue is tried again: keep their leases too
        if not contexts:
            return
        try:
            statuses = self.worker.touch_many([c.lease for c in contexts])
        except REDIS_FAILURES as exc:
            what = f"renewing {len(contexts)} leases failed ({exc!r}); check REDIS_URL"
            if self.on_backend_failed is not None:
                self.on_backend_failed(what)
            else:
                logger.warning("%s", what)
            return
        lost = sum(1 for s in statuses if s is TouchStatus.LOST)
        if lost:
            logger.info("%d in-flight leases were lost (reclaimed or cancelled)", lost)

    # --- how a page ends -----------------------------------------------------------------------------

    def maybe_finish(self, context: LeaseContext) -> None:
        """Finish *context* once its page is parsed and the output acknowledged all its items
        (a page counts as crawled whatever its callback yielded, items or none: §11)."""
        if context.parsed and context.pending_items <= 0 and not context.done:
            self.finish(context, "failed" if context.failed else "crawled")

    def drop(self, context: LeaseContext) -> None:
        """End *context* as a policy drop (nothing emitted, no counter)."""
        context.children = []
        self.finish(context, "")

    def finish(self, context: LeaseContext, counter: str) -> None:
        """Queue *context*'s links and ack its lease with *counter*, in one ``MULTI`` shared with
        every page finished in the same reactor turn."""
        if not self._end(context):
            return
        if counter == "crawled":
            self.on_crawled()
        if context.trace is not None:
            self._end_trace(context, context.trace, counter)
        elif context.request.trace is not None:  # traced upstream, not here: its links are not
            for child in context.children:
                child.trace = None
        self._finishing.append((context, counter))
        if self._flush_call is None and not self.closed:
            # Twisted's interface stubs declare callLater without self: mypy misreads the arguments.
            self._flush_call = reactor.callLater(0, self.flush_finished)  # type: ignore[arg-type]

    @staticmethod
    def _end_trace(context: LeaseContext, trace: PageTrace, counter: str) -> None:
        """End the page's spans with its lease's *counter*; its links get traces of their own."""
        if context.children:
            link = trace.link_trace()
            for child in context.children:
                child.trace = link
        if counter == "failed":
            trace.end("failed", "the page ended with a crawl dead letter")
        else:
            trace.end(counter or "dropped")

    def flush_finished(self) -> None:
        """Write the pending :meth:`finish` batch now (links first, then the acks): on the batcher
        unless one is being written (the pages finished meanwhile go next, together), else here."""
        self._flush_call = None
        if self.batcher is not None and not self.closed:
            if self._writing is not None or not self._finishing:
                return
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not on the reactor's loop (a tool, a test): written here
                pass
            else:
                self._writing = loop.create_task(self._write_finished())
                return
        self._flush_sync()

    def _flush_sync(self) -> None:
        """:meth:`flush_finished` on the blocking client: links and acks in one ``MULTI`` on one
        Redis; on a Redis Cluster the shards' writes first (``Frontier.push``)."""
        batch, self._finishing = self._finishing, []
        if not batch:
            return

        def pipeline() -> Any:
            pipe = write_pipeline(self.redis)
            self.frontier.push([c for context, _ in batch for c in context.children], pipe)
            for hook in self.finish_hooks:
                hook(batch, pipe)
            for context, counter in batch:
                self.worker.queue_ack(context.lease, counter, pipe, context.bloom_records)
            self.frontier.renew_records([context.request for context, _ in batch], pipe)
            return pipe

        try:
            self.scripts.execute(pipeline)
        except REDIS_FAILURES as exc:
            self._finish_failed(batch, exc)
            return
        self._refinish_delay = FINISH_RETRY_S

    async def _write_finished(self) -> None:
        """Write the pending finishes on the batcher, batch after batch, until none is left."""
        try:
            while self._finishing and self.batcher is not None:
                batch, self._finishing = self._finishing, []
                try:
                    await self._write_async(batch)
                except REDIS_FAILURES as exc:
                    if isinstance(exc, NoScriptError):  # Redis lost its scripts: loaded for the next try
                        await self._load_scripts()
                    self._finish_failed(batch, exc)
                except Exception as exc:  # never lose a batch to a bug: tried again like a Redis error
                    logger.error("writing the finish of %d pages failed", len(batch), exc_info=True)
                    self._finish_failed(batch, exc)
                else:
                    self._refinish_delay = FINISH_RETRY_S
        finally:
            self._writing = None

    async def _load_scripts(self) -> None:
        """Load every script again (Redis lost them: restarted, flushed); a failure is left to
        the next try of the finish."""
        assert self.batcher is not None
        try:
            for name in script_names():
                await self.batcher.scripts.load_async(name)
        except REDIS_FAILURES:
            logger.debug("loading the scripts failed", exc_info=True)

    async def _write_async(self, batch: list[tuple[LeaseContext, str]]) -> None:
        """The writes of :meth:`_flush_sync` in rounds on the batcher, each round one pipeline per
        node (shared with other pages' pops and admits); raises the first error of a round.

        1. the arrival numbers of the links: one ``INCRBY`` per shard they fall in;
        2. on a Redis Cluster, the shards' writes and the crawls' push generations
           (:meth:`Frontier.queue_shard_writes`), which must have run before any page is acked
           (the completion check's double collect relies on it: see ``Frontier.push``);
        3. the finish hooks, the acks, the crawl records' renewal and the cluster-wide writes (on
           one Redis the shards' writes go first in this round: one Redis runs a pipeline in order,
           so the links are queued before the acks, as the ``MULTI`` of the blocking path did).
        """
        first = CommandList()
        last = CommandList()
        children = [c for context, _ in batch for c in context.children]
        if children:
            keys = self.keys
            counts: dict[int, int] = {}
            for request in children:
                shard = keys.shard_of(request.domain)
                counts[shard] = counts.get(shard, 0) + 1
            replies = await self._run([("INCRBY", keys.queue_sequence(shard), n) for shard, n in counts.items()])
            next_seq = {shard: int(reply) - n + 1 for (shard, n), reply in zip(counts.items(), replies, strict=True)}
            plan = plan_push(keys, children, next_seq)
            self.frontier.queue_shard_writes(plan, first if self.cluster else last)
            self.frontier.queue_cluster_writes(plan, last)
        if first.commands:
            await self._run(first.commands)
        for hook in self.finish_hooks:
            hook(batch, last)
        for context, counter in batch:
            self.worker.queue_ack(context.lease, counter, last, context.bloom_records)  # type: ignore[arg-type]
        self.frontier.renew_records([context.request for context, _ in batch], last)  # type: ignore[arg-type]
        await self._run(last.commands)

    async def _run(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """*commands* in the batcher's next round trip; their replies, or the first error raised."""
        assert self.batcher is not None
        batcher = self.batcher
        calls = []
        for command in commands:
            # an EVALSHA of ours goes as a script call: the batcher loads it when Redis lost it
            name = batcher.scripts.name_of(str(command[1])) if command[0] == "EVALSHA" else None
            if name is not None:
                count = int(command[2])
                calls.append(batcher.call(name, list(command[3 : 3 + count]), list(command[3 + count :])))
            else:
                calls.append(batcher.command(CommandList.routing_key(command), *command))
        replies = await asyncio.gather(*calls, return_exceptions=True)
        for reply in replies:
            if isinstance(reply, BaseException):
                raise reply
        return list(replies)

    async def drain(self) -> None:
        """Wait until the finishes being written on the batcher are written (or failed)."""
        while self._writing is not None:
            try:
                await asyncio.shield(self._writing)
            except Exception:  # noqa: BLE001 - logged where it failed
                logger.debug("the last finish failed", exc_info=True)

    def _finish_failed(self, batch: list[tuple[LeaseContext, str]], exc: Exception) -> None:
        """The finish of *batch* failed on a Redis error (a node of a Redis Cluster failing over, a
        restart): try it again after a back-off, for up to LEASE_TIMEOUT from the first failure,
        renewing the leases meanwhile. Left to expire instead, a page's links would wait for its
        lease to be reclaimed and the page fetched again (LEASE_TIMEOUT, 2 minutes by default)."""
        now = time.monotonic()
        lease_s = self.worker.lease_us / 1_000_000
        again: list[tuple[LeaseContext, str]] = []
        given_up: list[tuple[LeaseContext, str]] = []
        for context, counter in batch:
            if not context.finish_failed:
                context.finish_failed = now
            (again if now - context.finish_failed < lease_s and not self.closed else given_up).append(
                (context, counter)
            )
        if given_up:
            logger.error("finishing %d pages failed (%s); their leases will be reclaimed", len(given_up), exc)
        if not again:
            return
        logger.warning(
            "finishing %d pages failed (%s); trying again in %.1fs (check REDIS_URL)",
            len(again),
            exc,
            self._refinish_delay,
        )
        self._unfinished += again
        if self._refinish_call is None:
            self._refinish_call = reactor.callLater(self._refinish_delay, self._refinish)  # type: ignore[arg-type]
            self._refinish_delay = min(2 * self._refinish_delay, FINISH_RETRY_MAX_S)

    def _refinish(self) -> None:
        """Write the finishes that failed once more (with the pages finished since)."""
        self._refinish_call = None
        if self.closed:
            return
        self._finishing = self._unfinished + self._finishing
        self._unfinished = []
        self.flush_finished()

    def retry(self, context: LeaseContext, wait_s: float = 0.0) -> None:
        """Put *context*'s request back in the frontier as a retry (§3.10), for any crawler, once
        *wait_s* seconds (its back-off, §14) have passed.

        Meanwhile the lease is parked in Redis (:meth:`FrontierLeaser.park`) and this process goes
        on with other work; a timer requeues it when due. Should this process stop first, the lease
        expires then and a lease reaper requeues it the same way.
        """
        self._park(context, wait_s, retried(context.request))

    def postpone(self, context: LeaseContext, wait_s: float) -> None:
        """Put *context*'s request back in the frontier unchanged once *wait_s* seconds have passed:
        it was not tried (its site asked for a pause), so it is no retry and keeps its priority.
        Parked as :meth:`retry` parks."""
        self._park(context, wait_s, context.request)

    def hand_over(self, context: LeaseContext, again: FrontierRequest) -> None:
        """Put *context*'s request back in the frontier at once as *again*, another form of the
        same page (the ``auto`` ladder's climb to the rendering lane, docs/contract.md §25.5): no
        attempt counted, its retries unspent, its priority kept."""
        self._park(context, 0.0, again)

    def _park(self, context: LeaseContext, wait_s: float, again: FrontierRequest) -> None:
        """End *context* here and queue *again* in its place after *wait_s* seconds."""
        if not self._end(context):
            return
        if context.trace is not None:
            context.trace.end("retry" if again.retry_times > context.request.retry_times else "postponed")
            if again.trace is not None:  # the next attempt's frontier wait starts now
                again = dataclasses.replace(again, trace=tracing.requeued(again.trace))
        if wait_s <= 0:
            self._requeue(context, again)
            return
        try:
            status = self.worker.park(context.lease, wait_s)
        except REDIS_FAILURES as exc:
            # not parked in Redis (a node failing over): this process keeps the lease, renewed,
            # and requeues it when the back-off is over, rather than leave it to LEASE_TIMEOUT
            logger.warning("could not park %s (%r); requeueing it from here in %.1fs", context.request.url, exc, wait_s)
            self._held[context.lease.member] = context
            status = TouchStatus.RENEWED
        if status is TouchStatus.STOPPED:  # nothing to retry: end it as a policy drop
            self._finishing.append((context, ""))
            self.flush_finished()
        elif status is TouchStatus.RENEWED and not self.closed:
            call = reactor.callLater(wait_s, self._due, context, again)  # type: ignore[arg-type]
            self._parked[context.lease.member] = call

    def _due(
        self, context: LeaseContext, again: FrontierRequest, first_failure: float = 0.0, delay: float = FINISH_RETRY_S
    ) -> None:
        self._parked.pop(context.lease.member, None)
        self._requeue(context, again, first_failure, delay)

    def _requeue(
        self, context: LeaseContext, again: FrontierRequest, first_failure: float = 0.0, delay: float = FINISH_RETRY_S
    ) -> None:
        """Move *context*'s lease back into the queue as *again*; on a Redis error, try again
        with back-off for up to LEASE_TIMEOUT from the first failure, the lease renewed meanwhile."""
        lease = context.lease
        try:
            moved = self.worker.requeue(lease.member, again)
        except REDIS_FAILURES as exc:
            now = time.monotonic()
            first_failure = first_failure or now
            if self.closed or now - first_failure >= self.worker.lease_us / 1_000_000:
                self._held.pop(lease.member, None)
                logger.warning("could not requeue %s (%r); its lease will be reclaimed", lease.request.url, exc)
                return
            logger.warning(
                "could not requeue %s (%r); trying again in %.1fs (check REDIS_URL)", lease.request.url, exc, delay
            )
            self._held[lease.member] = context
            again_in = min(2 * delay, FINISH_RETRY_MAX_S)
            call = reactor.callLater(delay, self._due, context, again, first_failure, again_in)  # type: ignore[arg-type]
            self._parked[lease.member] = call
            return
        self._held.pop(lease.member, None)
        if moved:
            self.wake_crawlers(again.spiderid, again.render, again.domain)

    def give_back(self, context: LeaseContext) -> None:
        """Hand an unstarted request back to the frontier unchanged (graceful shutdown; on a Redis
        error its lease expires and is reclaimed)."""
        if not self._end(context):
            return
        if context.trace is not None:
            context.trace.end("given back")
        try:
            moved = self.worker.requeue(context.lease.member, context.request)
        except REDIS_FAILURES as exc:
            logger.warning("could not hand %s back (%r); its lease will be reclaimed", context.request.url, exc)
            return
        if moved:
            self.wake_crawlers(context.request.spiderid, context.request.render, context.request.domain)

    def abandon(self, context: LeaseContext) -> None:
        """Stop working on *context* without ending its lease: it expires and is reclaimed."""
        if context.trace is not None:
            context.trace.end("abandoned", "left to expire and be reclaimed")
        context.done = True
        self.inflight.pop(context.lease.member, None)

    def wake_crawlers(self, spider: str, render: bool = False, domain: str | None = None) -> None:
        """Tell idle crawlers of *spider* (of the rendering lane if *render*) that work was queued
        (in *domain*'s shard; ``requeue`` does not publish)."""
        message = wake_message([self.keys.shard_of(domain)]) if domain is not None else WAKE_ANY
        try:
            self.redis.publish(self.keys.wake_channel(spider, render), message)
        except REDIS_FAILURES as exc:
            logger.warning("could not publish a wake-up (%r); idle crawlers find the work later", exc)

    def close(self) -> None:
        """Write what is pending; later finishes are no longer written (their leases are reclaimed).
        Retries waiting out their back-off stay parked in Redis: a lease reaper requeues them."""
        if self._refinish_call is not None and self._refinish_call.active():
            self._refinish_call.cancel()
        self._refinish_call = None
        self._finishing = self._unfinished + self._finishing
        self._unfinished = []
        self.closed = True  # a finish failing now is not tried again: its lease is reclaimed
        self._flush_sync()
        for call in self._parked.values():
            if call.active():
                call.cancel()
        self._parked.clear()
        self._held.clear()  # not parked in Redis: their leases expire and are reclaimed
