"""What one crawler process shares between its Scrapy components: connections, leases, outcomes.

The scheduler, the middlewares, the pipeline and the extensions of one crawler each get the same
:class:`CrawlRuntime` through :meth:`CrawlRuntime.of` (one per Scrapy ``Crawler``). It owns the Redis
client, the Kafka producer and the table of in-flight leases, and it is the only place where a
request's lease ends. The life of a leased request:

1. the scheduler takes it (:meth:`take`: pop-and-lease under the cluster-wide throttle; a request of
   an expired crawl is dropped here and never fetched);
2. while it is downloaded a looping call renews every in-flight lease (:meth:`renew_all`);
3. when its response has been parsed, :meth:`admit_async` checks the lease (stopped crawl? lost
   lease?) and runs the links through the per-crawl dupefilter and page caps, in one Lua script;
4. the item goes to Kafka (:meth:`emit`); when the broker has acknowledged it, the links are queued
   and the lease is acked, in one ``MULTI`` (:meth:`finish`, batched across pages that finish in
   the same reactor turn);
5. or instead: a network failure after the last retry becomes a crawl dead letter (:meth:`fail`),
   a retry goes back to the frontier (:meth:`retry`), a policy drop is acked with no counter
   (:meth:`drop`), and an unstarted request is handed back unchanged on shutdown (:meth:`give_back`).

The two calls on the hot path, the pop and the admit, do not block the reactor: they go through a
:class:`~crawlhive.crawler.batching.ScriptBatcher` on an asyncio Redis client, which sends the calls
of several pages in one round trip when the crawler is busy. The other writes (acks with the links,
renewals, stats) are batched per reactor turn or per interval on a blocking client.

A Kafka or Redis failure never acks: the lease is forgotten here, expires and is reclaimed by the
redis-monitor (at least once, API.md §3.12).

Why our own dupefilter (not scrapy-redis's ``RFPDupeFilter``): its one ``SADD`` per request cannot be
batched with the page caps and the lease check into one atomic round trip per page, has no per-crawl
key or expiry, and is not idempotent: a page refetched after its crawler died would find its own
links already seen and lose them. Here each fingerprint records the page that first queued it, and
that page may queue it again. Fingerprints are Scrapy's (``crawler.request_fingerprinter``).
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
import re
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ujson
from redis.exceptions import NoScriptError, RedisError
from scrapy import signals
from scrapy.exceptions import DropItem
from twisted.internet import defer, reactor, task, threads
from twisted.python.failure import Failure

from crawlhive.crawler.batching import ScriptBatcher
from crawlhive.crawler.items import CrawledItem
from crawlhive.crawler.requests import child_request, scrapy_request
from crawlhive.utils import stats as stat_names
from crawlhive.utils.connections import (
    async_redis_from_settings,
    ensure_topics,
    make_producer,
    redis_from_settings,
)
from crawlhive.utils.frontier import (
    Frontier,
    FrontierRequest,
    FrontierWorker,
    Lease,
    PopOutcome,
    TouchStatus,
    crawl_dead_letter,
    retried,
)
from crawlhive.utils.heartbeat import Heartbeat, new_node_id
from crawlhive.utils.keys import Keys
from crawlhive.utils.stats import Stats

if TYPE_CHECKING:
    from kafka import KafkaProducer
    from redis import Redis
    from redis.asyncio import Redis as AsyncRedis
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

    from crawlhive.utils.settings import Settings

logger = logging.getLogger(__name__)

#: Legal per-appid topic name fragment (API.md §1).
_APPID_TOPIC = re.compile(r"^[A-Za-z0-9._-]+$")

# KEYS: 1 leases(spider), 2 crawl stopped marker, 3 dupefilter(crawl), 4.. page-cap sets.
# ARGV: 1 leased member, 2 lease (us), 3 filter TTL (ms), 4 page fingerprint, 5 page cap-set index
#       into KEYS (0 = none), then per link: fingerprint, cap-set index (0 = none), cap.
# Returns {verdict, admitted flags...}: verdict 1 = lease ours and renewed, links checked;
# 2 = crawl stopped, lease taken after the stop (a resubmitted seed: emit, queue no links);
# 3 = crawl stopped while in flight (drop); 0 = lease lost (drop, do not ack).
_ADMIT_LUA = """
local alive = redis.call('ZSCORE', KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  if alive then return {2} end
  return {3}
end
if not alive then return {0} end
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', string.format('%d.%06d', math.floor(deadline / 1000000), deadline % 1000000), ARGV[1])
local owner = ARGV[4]
local ttl = tonumber(ARGV[3])
redis.call('HSETNX', KEYS[3], owner, owner)
local own = tonumber(ARGV[5])
if own > 0 then redis.call('SADD', KEYS[own], owner) end
local out = {1}
for i = 6, #ARGV, 3 do
  local fp = ARGV[i]
  local idx = tonumber(ARGV[i + 1])
  local ok = fp ~= owner and (redis.call('HSETNX', KEYS[3], fp, owner) == 1 or redis.call('HGET', KEYS[3], fp) == owner)
  if ok and idx > 0 and redis.call('SISMEMBER', KEYS[idx], fp) == 0 then
    if redis.call('SCARD', KEYS[idx]) < tonumber(ARGV[i + 2]) then
      redis.call('SADD', KEYS[idx], fp)
    else
      ok = false
    end
  end
  out[#out + 1] = ok and 1 or 0
end
for k = 3, #KEYS do redis.call('PEXPIRE', KEYS[k], ttl) end
return out
"""


class Verdict(enum.Enum):
    """What :meth:`CrawlRuntime.admit` found about a fetched page's lease."""

    EMIT = 1
    """The lease is ours (renewed): emit the item and queue the admitted links."""
    EMIT_NO_LINKS = 2
    """The crawl is stopped but this lease was taken after the stop (a resubmitted seed, API.md
    §3.9): emit the item, follow no link."""
    CANCELLED = 3
    """The crawl was stopped or expired while the page was in flight: no item, no links; ack."""
    LOST = 0
    """The lease is gone (reclaimed after expiry): no item, no links, no ack (another crawler has
    the request now)."""


@dataclass(eq=False)
class LeaseContext:
    """One leased request while this process works on it (kept in request meta, see requests.py).

    Attributes:
        lease: what the frontier pop returned.
        fingerprint: Scrapy's fingerprint of the request as first built (hex).
        children: the links to queue when the page is finished (after dedupe and page caps).
        pending_items: items handed to the pipeline and not yet acknowledged by Kafka.
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

    @property
    def request(self) -> FrontierRequest:
        return self.lease.request


_RUNTIMES: weakref.WeakKeyDictionary[Crawler, CrawlRuntime] = weakref.WeakKeyDictionary()


class CrawlRuntime:
    """The shared state of one crawler process (see the module docstring).

    Args:
        crawler: the Scrapy crawler (for its signals and request fingerprinter).
        settings: crawlhive settings.
        spider: the spider type this process crawls (its frontier and stats name).
        redis: a bytes Redis client (blocking calls off the hot path: renewals, acks, stats).
        producer: a Kafka producer (``make_producer``).
        aredis: an asyncio Redis client for the hot path (pops and admits, through a
            :class:`ScriptBatcher`); None builds one from *settings*.
    """

    def __init__(
        self,
        crawler: Crawler,
        settings: Settings,
        spider: str,
        redis: Redis,
        producer: KafkaProducer,
        aredis: AsyncRedis | None = None,
    ) -> None:
        self.crawler = crawler
        self.settings = settings
        self.spider = spider
        self.redis = redis
        self.producer = producer
        self.batcher = ScriptBatcher(aredis if aredis is not None else async_redis_from_settings(settings))
        self.keys = Keys(settings["REDIS_KEY_PREFIX"])
        self.worker = FrontierWorker.from_settings(redis, settings)
        self.frontier = Frontier.from_settings(redis, settings)
        self.stats = Stats(redis, self.keys, settings.getlist("STATS_TIMES"))
        self.node_id = new_node_id()
        self.host = settings.node_name
        self.heartbeat = Heartbeat(
            redis,
            self.keys,
            stat_names.CRAWLER,
            self.node_id,
            self.host,
            settings.getfloat("HEARTBEAT_TIMEOUT"),
            extra={"spider": spider},
        )
        self.lease_s = settings.getfloat("LEASE_TIMEOUT")
        # Longer than any legitimate life of a page here (every redirect downloaded, the item sent):
        # only a bug keeps one in flight this long, and renewing its lease forever would stop its
        # crawl from ever completing.
        self.max_hold_s = 30 * settings.getfloat("DOWNLOAD_TIMEOUT") + self.lease_s
        self.filter_ttl_ms = max(1, int(settings.getfloat("DUPEFILTER_TIMEOUT") * 1000))
        self.global_cap: int | None = settings["GLOBAL_PAGE_PER_DOMAIN_LIMIT"]
        self.max_item_bytes = settings.getint("KAFKA_PRODUCER_MAX_REQUEST_SIZE")
        self.base64 = settings.getbool("KAFKA_BASE_64_ENCODE")
        self.appid_topics = settings.getbool("KAFKA_APPID_TOPICS")
        self.response_codes = {int(c) for c in settings.getlist("STATS_RESPONSE_CODES")}
        self.firehose = settings.topic("crawled_firehose")
        self.dead_letter_topic = settings.topic("dead_letter")
        self.inflight: dict[bytes, LeaseContext] = {}
        self._admit = redis.register_script(_ADMIT_LUA)
        self._finishing: list[tuple[LeaseContext, str]] = []
        self._flush_call: Any = None
        self._counts: collections.Counter[str] = collections.Counter()
        self._appid_topics: dict[str, Any] = {}  # topic -> True (exists) or waiters while being created
        self._loops: list[task.LoopingCall] = []
        self._reported_stopped: set[tuple[str, str]] = set()
        self.closed = False
        self.worker.load_scripts()
        redis.script_load(_ADMIT_LUA)
        crawler.signals.connect(self._opened, signal=signals.spider_opened)
        crawler.signals.connect(self._closed, signal=signals.spider_closed)

    @classmethod
    def of(cls, crawler: Crawler) -> CrawlRuntime:
        """The runtime of *crawler*, created (connected) on first use.

        Reads the crawlhive settings object from the Scrapy setting ``CRAWLHIVE_SETTINGS`` and the
        spider type from ``CRAWLHIVE_SPIDER`` (both set by :func:`crawlhive.crawler.settings.scrapy_settings`).

        Raises:
            BackendUnavailable: Redis or Kafka cannot be reached (names the setting to check).
        """
        runtime = _RUNTIMES.get(crawler)
        if runtime is None:
            settings: Settings = crawler.settings["CRAWLHIVE_SETTINGS"]
            redis = redis_from_settings(settings)
            producer = make_producer(settings)
            runtime = cls(crawler, settings, crawler.settings["CRAWLHIVE_SPIDER"], redis, producer)
            _RUNTIMES[crawler] = runtime
        return runtime

    # --- life cycle -------------------------------------------------------------------------------

    def _opened(self, spider: Spider) -> None:
        self.heartbeat.beat()
        for interval, func in (
            (self.settings.getfloat("HEARTBEAT_INTERVAL"), self._beat),
            (self.settings.getfloat("CRAWLER_STATS_FLUSH_S"), self.flush_stats),
            (max(0.2, self.lease_s / 4), self.renew_all),
        ):
            loop = task.LoopingCall(func)
            loop.start(interval, now=False).addErrback(self._loop_failed)
            self._loops.append(loop)

    def _loop_failed(self, failure: Any) -> None:
        logger.error("crawler maintenance loop failed", exc_info=(failure.type, failure.value, failure.tb))

    def _beat(self) -> None:
        try:
            self.heartbeat.beat()
        except RedisError:
            logger.warning("heartbeat failed; check REDIS_URL", exc_info=True)

    def _closed(self, spider: Spider, reason: str) -> defer.Deferred[None]:
        """Flush what is pending, stop the producer and the heartbeat; fires when the asyncio Redis
        client is closed too (Scrapy waits for it)."""
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self.flush_finished()
        self.flush_stats()
        self.closed = True
        try:
            self.producer.flush(timeout=5)
        except Exception:  # kafka-python raises several types; the leases stay and are reclaimed
            logger.warning("Kafka producer flush failed on close", exc_info=True)
        self.producer.close(timeout=5)
        try:
            self.heartbeat.stop()
        except RedisError:
            logger.warning("could not remove the heartbeat", exc_info=True)
        if self.inflight:
            logger.warning("%d leases still in flight at close; they will be reclaimed", len(self.inflight))
        self.redis.close()
        return defer.Deferred.fromFuture(asyncio.ensure_future(self.batcher.close()))

    # --- taking work ------------------------------------------------------------------------------

    async def take(self, spider: Spider, count: int) -> tuple[list[Request], float | None]:
        """Lease up to *count* requests this process may fetch now, as Scrapy requests.

        The pops go out together (one round trip, shared with other pages' admits; see
        :class:`ScriptBatcher`), each one its own atomic pop-and-lease under the throttle.

        Returns:
            ``(requests, wait_s)``: *wait_s* is None when nothing is queued for the spider at all,
            else, when no request could be leased, the time until a queued domain may be fetched.

        Raises:
            RedisError: every pop failed (the pops that succeeded beside a failed one are kept).
        """
        keys, args = self.worker.pop_call(self.spider)
        script = self.worker.pop_script
        replies = await asyncio.gather(
            *(self.batcher.call(script, keys, args) for _ in range(count)), return_exceptions=True
        )
        requests: list[Request] = []
        waits: list[float | None] = []
        errors: list[BaseException] = []
        for reply in replies:
            if isinstance(reply, BaseException):
                errors.append(reply)
                continue
            outcome = self.worker.pop_outcome(reply)
            if outcome.lease is None:
                waits.append(outcome.wait_s)
                continue
            request = self._leased(outcome, spider)
            if request is not None:
                requests.append(request)
        if errors and not requests:
            raise errors[0]
        if requests:
            return requests, None
        if not waits:
            return [], 0.0  # every pop leased an expired crawl's request (acked): pop again now
        known = [w for w in waits if w is not None]
        return [], min(known) if known else None

    def _leased(self, outcome: PopOutcome, spider: Spider) -> Request | None:
        """The Scrapy request of a fresh lease, registered in flight; None for a request of an
        expired crawl (acked at once: API.md §3.4, an expired crawl's request is never fetched)."""
        lease = outcome.lease
        assert lease is not None
        request = lease.request
        if request.expires and request.expires <= time.time():
            try:
                self.worker.ack(lease, "")
            except RedisError:  # the lease expires, is reclaimed, and is dropped here again
                logger.warning("could not drop a request of an expired crawl; check REDIS_URL", exc_info=True)
            return None
        context = LeaseContext(lease)
        built = scrapy_request(request, spider, context)
        context.fingerprint = self.crawler.request_fingerprinter.fingerprint(built).hex()
        self.inflight[lease.member] = context
        return built

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
            self.abandon(stale)
        contexts = [c for c in self.inflight.values() if not c.done]
        if not contexts:
            return
        try:
            statuses = self.worker.touch_many([c.lease for c in contexts])
        except RedisError:
            logger.warning("renewing %d leases failed; check REDIS_URL", len(contexts), exc_info=True)
            return
        lost = sum(1 for s in statuses if s is TouchStatus.LOST)
        if lost:
            logger.info("%d in-flight leases were lost (reclaimed or cancelled)", lost)

    # --- a parsed page ----------------------------------------------------------------------------

    def page_cap(self, request: FrontierRequest) -> int:
        """The page cap of *request*'s crawl in any domain (API.md §3.6); 0 = none."""
        caps = [c for c in (request.domain_max_pages, self.global_cap) if c]
        return min(caps) if caps else 0

    def child(self, context: LeaseContext, request: Request, spider: Spider) -> tuple[FrontierRequest, str]:
        """The frontier request (and fingerprint) of *request*, yielded on *context*'s page."""
        return (
            child_request(context.request, request, spider),
            self.crawler.request_fingerprinter.fingerprint(request).hex(),
        )

    def admit(self, context: LeaseContext, children: list[tuple[FrontierRequest, str]]) -> Verdict:
        """Check *context*'s lease and filter its page's links (dedupe, page caps), atomically.

        Sets ``context.children`` to the admitted links. One blocking round trip; the crawler's
        spider middleware uses :meth:`admit_async`.
        """
        keys, args, unique = self._admit_call(context, children)
        return self._admitted(context, unique, self._admit(keys=keys, args=args))

    async def admit_async(self, context: LeaseContext, children: list[tuple[FrontierRequest, str]]) -> Verdict:
        """:meth:`admit` without blocking the reactor (batched with other pages' calls)."""
        keys, args, unique = self._admit_call(context, children)
        return self._admitted(context, unique, await self.batcher.call(self._admit, keys, args))

    def _admit_call(
        self, context: LeaseContext, children: list[tuple[FrontierRequest, str]]
    ) -> tuple[list[str], list[Any], dict[str, FrontierRequest]]:
        """KEYS and ARGV of the admit script for *context*'s page, and its links by fingerprint."""
        r = context.request
        keys = self.keys
        cap = self.page_cap(r)
        cap_keys: dict[str, int] = {}
        script_keys = [
            keys.leases(r.spiderid),
            keys.crawl_stopped(r.spiderid, r.appid, r.crawlid),
            keys.dupefilter(r.spiderid, r.appid, r.crawlid),
        ]

        def cap_index(domain: str) -> int:
            if not cap:
                return 0
            if domain not in cap_keys:
                script_keys.append(keys.page_caps(r.spiderid, r.appid, r.crawlid, domain))
                cap_keys[domain] = len(script_keys)
            return cap_keys[domain]

        args: list[Any] = [context.lease.member, int(self.lease_s * 1_000_000), self.filter_ttl_ms]
        args += [context.fingerprint, cap_index(r.domain)]
        unique: dict[str, FrontierRequest] = {}
        for child, fingerprint in children:
            unique.setdefault(fingerprint, child)
        for fingerprint, child in unique.items():
            args += [fingerprint, cap_index(child.domain), cap]
        return script_keys, args, unique

    def _admitted(self, context: LeaseContext, unique: dict[str, FrontierRequest], reply: list[Any]) -> Verdict:
        """The verdict of an admit *reply*; sets ``context.children`` to the admitted links."""
        r = context.request
        verdict = Verdict(int(reply[0]))
        if verdict is Verdict.EMIT:
            context.children = [c for c, ok in zip(unique.values(), reply[1:], strict=True) if int(ok)]
        elif verdict is not Verdict.LOST:
            crawl = (r.appid, r.crawlid)
            if crawl not in self._reported_stopped:  # log once per crawl
                self._reported_stopped.add(crawl)
                logger.info("crawl %s/%s is stopped; dropping its in-flight work", r.appid, r.crawlid)
        return verdict

    # --- outcomes ---------------------------------------------------------------------------------

    def emit(self, item: CrawledItem) -> defer.Deferred[None]:
        """Send *item* to the firehose (and its appid topic); fires when the broker acknowledged it.

        When the last item of a page is acknowledged the page is finished (:meth:`finish`).

        Raises (in the Deferred):
            DropItem: the item was not sent (too large: a dead letter was written instead; or Kafka
                failed: the lease is left to expire and be reclaimed).
        """
        context = item.context
        data = ujson.dumps(dict(item), ensure_ascii=False, escape_forward_slashes=False).encode()
        if len(data) > self.max_item_bytes:
            return self._too_large(context, len(data))
        topics = [self.firehose]
        appid = str(item.get("appid", ""))
        if self.appid_topics:
            if _APPID_TOPIC.match(appid) and len(self.settings.topic(f"crawled_{appid}")) <= 249:
                topics.append(self.settings.topic(f"crawled_{appid}"))
            else:
                logger.warning("appid %r is not a legal topic name fragment; firehose only", appid)
        result: defer.Deferred[None] = defer.gatherResults([self._send(t, data) for t in topics], consumeErrors=True)

        def sent(_: Any) -> None:
            if context is not None:
                context.pending_items -= 1
                self._maybe_finish(context)

        def failed(failure: Any) -> None:
            error = failure.value.subFailure.value if isinstance(failure.value, defer.FirstError) else failure.value
            if _is_too_large(error):
                self._too_large(context, len(data))
                raise DropItem(f"item too large for Kafka ({len(data)} bytes); dead letter written")
            logger.error("Kafka did not accept an item of %s: %r; its lease will be reclaimed", item.get("url"), error)
            if context is not None:
                self.abandon(context)
            raise DropItem(f"Kafka failed: {error!r}")

        result.addCallbacks(sent, failed)
        return result

    def _too_large(self, context: LeaseContext | None, size: int) -> defer.Deferred[None]:
        error = f"item too large: {size} bytes > KAFKA_PRODUCER_MAX_REQUEST_SIZE {self.max_item_bytes}"
        if context is not None:
            context.pending_items -= 1
            self.fail(context, error)
        return defer.fail(DropItem(error))

    def fail(self, context: LeaseContext, error: str) -> None:
        """End *context* with a crawl dead letter (API.md §6 b); acked as failed once Kafka has it."""
        if context.done or context.failed:
            return
        context.failed = True
        letter = crawl_dead_letter(context.request, error)
        data = ujson.dumps(letter, ensure_ascii=False, escape_forward_slashes=False).encode()

        def sent(_: Any) -> None:
            self._count(stat_names.failed_counter_name(self.spider))
            context.parsed = True
            self._maybe_finish(context)

        def failed(failure: Any) -> None:
            logger.error("Kafka did not accept a dead letter for %s: %r", context.request.url, failure.value)
            self.abandon(context)

        self._send(self.dead_letter_topic, data).addCallbacks(sent, failed)

    def _maybe_finish(self, context: LeaseContext) -> None:
        if context.parsed and context.pending_items <= 0 and not context.done:
            self.finish(context, "failed" if context.failed else "crawled")

    def page_parsed(self, context: LeaseContext, items: int) -> None:
        """The spider's output for *context*'s page is handled; *items* went to the pipeline."""
        context.pending_items += items
        context.parsed = True
        if items == 0 and not context.failed:
            self.finish(context, "")
        else:
            self._maybe_finish(context)

    def drop(self, context: LeaseContext) -> None:
        """End *context* as a policy drop (nothing emitted, no counter)."""
        context.children = []
        self.finish(context, "")

    def finish(self, context: LeaseContext, counter: str) -> None:
        """Queue *context*'s links and ack its lease with *counter*, in one ``MULTI`` shared with
        every page finished in the same reactor turn."""
        if context.done:
            return
        context.done = True
        self.inflight.pop(context.lease.member, None)
        if counter == "crawled":
            self._count(stat_names.items_counter_name(self.spider))
        self._finishing.append((context, counter))
        if self._flush_call is None and not self.closed:
            self._flush_call = reactor.callLater(0, self.flush_finished)

    def flush_finished(self) -> None:
        """Write the pending :meth:`finish` batch now (links first, then the acks)."""
        self._flush_call = None
        batch, self._finishing = self._finishing, []
        if not batch:
            return
        for attempt in (1, 2):
            try:
                pipe = self.redis.pipeline(transaction=True)
                self.frontier.push([c for context, _ in batch for c in context.children], pipe)
                for context, counter in batch:
                    self.worker.queue_ack(context.lease, counter, pipe)
                pipe.execute()
                return
            except NoScriptError:
                if attempt == 2:
                    raise
                self.worker.load_scripts()
            except RedisError:
                logger.error("finishing %d pages failed; their leases will be reclaimed", len(batch), exc_info=True)
                return

    def retry(self, context: LeaseContext) -> None:
        """Put *context*'s request back in the frontier as a retry (API.md §3.10), for any crawler."""
        if context.done:
            return
        context.done = True
        self.inflight.pop(context.lease.member, None)
        if self.worker.requeue(context.lease.member, retried(context.request)):
            self.wake_crawlers(context.request.spiderid)

    def give_back(self, context: LeaseContext) -> None:
        """Hand an unstarted request back to the frontier unchanged (graceful shutdown)."""
        if context.done:
            return
        context.done = True
        self.inflight.pop(context.lease.member, None)
        if self.worker.requeue(context.lease.member, context.request):
            self.wake_crawlers(context.request.spiderid)

    def wake_crawlers(self, spider: str) -> None:
        """Tell idle crawlers of *spider* that work was queued (``requeue`` does not publish)."""
        try:
            self.redis.publish(self.keys.wake_channel(spider), b"1")
        except RedisError:
            logger.warning("could not publish a wake-up; idle crawlers find the work later", exc_info=True)

    def abandon(self, context: LeaseContext) -> None:
        """Stop working on *context* without ending its lease: it expires and is reclaimed."""
        context.done = True
        self.inflight.pop(context.lease.member, None)

    # --- Kafka --------------------------------------------------------------------------------------

    def _send(self, topic: str, data: bytes) -> defer.Deferred[None]:
        """Produce *data* to *topic*; the Deferred fires in the reactor thread on the broker's ack."""
        result: defer.Deferred[None] = defer.Deferred()
        ready = self._topic_ready(topic)

        def send(_: Any) -> None:
            try:
                future = self.producer.send(topic, data)
            except Exception as exc:  # kafka-python raises e.g. KafkaTimeoutError, MessageSizeTooLargeError
                result.errback(exc)
                return
            future.add_callback(lambda _meta: reactor.callFromThread(result.callback, None))
            future.add_errback(lambda exc: reactor.callFromThread(result.errback, exc))

        ready.addCallbacks(send, result.errback)
        return result

    def _topic_ready(self, topic: str) -> defer.Deferred[Any]:
        """Fires once *topic* exists (per-appid topics are created on first use, in a thread)."""
        state = self._appid_topics.get(topic)
        if topic in (self.firehose, self.dead_letter_topic) or state is True:
            return defer.succeed(True)
        waiter: defer.Deferred[Any] = defer.Deferred()
        if state is None:
            waiters: list[defer.Deferred[Any]] = [waiter]
            self._appid_topics[topic] = waiters

            def done(result: Any) -> None:
                self._appid_topics.pop(topic, None)
                if isinstance(result, Failure):
                    logger.error("could not create topic %s: %s", topic, result.value)
                else:
                    self._appid_topics[topic] = True
                for w in waiters:
                    w.errback(result) if isinstance(result, Failure) else w.callback(True)

            threads.deferToThread(ensure_topics, self.settings, [topic]).addBoth(done)
        else:
            state.append(waiter)
        return waiter

    # --- stats --------------------------------------------------------------------------------------

    def count_response(self, code: int) -> None:
        """Count one response with status *code* (a network failure as 504), API.md §4.7."""
        if code in self.response_codes:
            self._count(stat_names.crawler_counter_name(self.spider, code))
            self._count(stat_names.machine_counter_name(self.host, code))

    def _count(self, name: str) -> None:
        self._counts[name] += 1

    def flush_stats(self) -> None:
        """Write the buffered counters (one ``MULTI``)."""
        counts, self._counts = self._counts, collections.Counter()
        if not counts:
            return
        try:
            self.stats.incr_many([(stat_names.CRAWLER, name, n) for name, n in counts.items()])
        except RedisError:
            logger.warning("writing crawler stats failed; check REDIS_URL", exc_info=True)


def _is_too_large(error: Any) -> bool:
    from kafka.errors import MessageSizeTooLargeError

    return isinstance(error, MessageSizeTooLargeError)
