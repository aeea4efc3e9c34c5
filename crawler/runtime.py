"""What one crawler process shares between its Scrapy components: the wiring of its parts.

The scheduler, the middlewares, the pipeline and the extensions of one crawler each get the same
:class:`CrawlRuntime` through :meth:`CrawlRuntime.of` (one per Scrapy ``Crawler``). It builds, once:

* the connections (a blocking Redis client, an asyncio one behind a
  :class:`~crawlhive.crawler.batching.ScriptBatcher` for the hot path, a Kafka producer, or none
  in Redis-only mode);
* :attr:`leases` (:class:`~crawlhive.crawler.leases.LeaseTable`): the in-flight leases and how each
  ends;
* :attr:`admission` (:class:`~crawlhive.crawler.admit.Admission`): the atomic lease check and link
  filter of a parsed page;
* :attr:`shard_cursor` (:class:`~crawlhive.crawler.shards.ShardCursor`): which frontier shards
  the next pops go to, with several shards;
* :attr:`emitter` (:class:`~crawlhive.crawler.emitter.Emitter`): items and dead letters to Kafka
  (or to Redis lists in Redis-only mode, where :attr:`seeds` reads seeds from a Redis list:
  :mod:`crawlhive.crawler.redis_only`);
* the heartbeat, the response counters, and the looping calls that renew leases and write stats
  (the loops other than the lease renewal are Scrapy extensions: :mod:`crawlhive.crawler.extensions`).

The life of a leased request:

1. the scheduler takes it (:meth:`take`: pop-and-lease under the cluster-wide throttle; a request of
   an expired crawl is dropped here and never fetched);
2. while it is downloaded a looping call renews every in-flight lease (``leases.renew_all``);
3. when its response has been parsed, ``admission.admit_async`` checks the lease (stopped crawl? lost
   lease?) and filters the links (dupefilter, page caps), in one Lua script;
4. its items go through the item pipelines to Kafka (``emitter.emit``); when the broker has
   acknowledged every one, the links are queued and the lease is acked, on the batcher
   (``leases.finish``);
5. or instead the lease ends another way (dead letter, retry, drop, give-back, abandon: see
   :mod:`crawlhive.crawler.leases`).

The calls on the hot path, the pop, the admit and the finish (links queued, lease acked), do not
block the reactor: they go through the batcher, which sends the calls of several pages in one
round trip (one pipeline per node of a Redis Cluster) when the crawler is busy. The other writes
(renewals, stats) are batched per interval.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import sys
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Self

from redis.exceptions import RedisError
from scrapy import signals
from twisted.internet import defer, task, threads

from crawlhive.crawler.admit import Admission
from crawlhive.crawler.batching import ScriptBatcher
from crawlhive.crawler.emitter import Emitter, KafkaOutput, Output, RedisOutput
from crawlhive.crawler.extensions import maintenance_loops
from crawlhive.crawler.leases import LeaseContext, LeaseTable
from crawlhive.crawler.links import LinkLimits
from crawlhive.crawler.redis_only import SeedReader
from crawlhive.crawler.requests import scrapy_request, unfetchable
from crawlhive.crawler.settings import spider_lists
from crawlhive.crawler.shards import ShardCursor
from crawlhive.utils.backends import tracing
from crawlhive.utils.backends.redis_clients import async_redis_from_settings, redis_from_settings
from crawlhive.utils.backends.redis_types import AsyncRedisClient, RedisClient
from crawlhive.utils.backends.scripts import scripts
from crawlhive.utils.frontier import Frontier, FrontierLeaser, PopOutcome, reclaim_expired_leases, retry_backoff
from crawlhive.utils.process.loop import ClusterGone, Outage, cluster_gone, is_cluster_transient, uses_up_state
from crawlhive.utils.process.worker import ProcessContext
from crawlhive.utils.rules.domains import domain_of_url
from crawlhive.utils.state import stats as stat_names
from crawlhive.utils.state.response_metrics import ResponseMetrics

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

_RUNTIMES: weakref.WeakKeyDictionary[Crawler, CrawlRuntime] = weakref.WeakKeyDictionary()


#: Seconds between two checks that the ``crawlhive up`` whose addresses the crawler uses still runs.
UP_WATCH_S = 2.0
#: Seconds a crawler whose ``up`` is gone has to close before it exits at once (:meth:`CrawlRuntime._watch_up`).
UP_GONE_EXIT_S = 25.0


def existing_runtime(crawler: Crawler) -> CrawlRuntime | None:
    """The runtime of *crawler* if one was created (:meth:`CrawlRuntime.of` creates it)."""
    return _RUNTIMES.get(crawler)


class RuntimeComponent:
    """A Scrapy component that needs only its crawl's runtime, built ``from_crawler`` with
    :meth:`CrawlRuntime.of`: the common constructor of crawlhive's middlewares."""

    def __init__(self, runtime: CrawlRuntime) -> None:
        self.runtime = runtime

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(CrawlRuntime.of(crawler))


class CrawlRuntime:
    """The shared parts of one crawler process (see the module docstring).

    Args:
        crawler: the Scrapy crawler (for its signals and request fingerprinter).
        settings: crawlhive settings.
        spider: the spider type this process crawls (its frontier and stats name).
        redis: a bytes Redis client (blocking calls off the hot path: renewals, acks, stats).
        output: where items and dead letters go (Kafka, or Redis lists in Redis-only mode).
        aredis: an asyncio Redis client for the hot path (pops and admits, through a
            :class:`ScriptBatcher`); None builds one from *settings*.
    """

    def __init__(
        self,
        crawler: Crawler,
        settings: Settings,
        spider: str,
        redis: RedisClient,
        output: Output,
        aredis: AsyncRedisClient | None = None,
    ) -> None:
        self.crawler = crawler
        self.settings = settings
        self.spider = spider
        self.render = settings.RENDER
        """A rendering crawler: it pops the rendering lane of the frontier (§15)."""
        self.redis = redis
        self.output = output
        self.batcher = ScriptBatcher(aredis if aredis is not None else async_redis_from_settings(settings))
        self.context = ProcessContext.create(
            settings, redis, stat_names.CRAWLER, heartbeat_extra={"spider": spider, "render": self.render}
        )
        self.keys = self.context.keys
        self.shard_cursor = ShardCursor(self.keys.shards)
        """Which frontier shards the next pops go to (several shards; :meth:`take`)."""
        self.node_id = self.context.node_id
        self.stats = self.context.stats
        self.heartbeat = self.context.heartbeat
        self.host = settings.node_name
        self.worker = FrontierLeaser.from_settings(redis, settings)
        self.lease_s = settings.LEASE_TIMEOUT
        self.leases = LeaseTable(
            redis,
            self.keys,
            self.worker,
            Frontier.from_settings(redis, settings),
            # Longer than any legitimate life of a page here (every redirect downloaded, the item sent).
            max_hold_s=30 * settings.DOWNLOAD_TIMEOUT + self.lease_s,
            on_crawled=lambda: self._count(stat_names.items_counter_name(spider)),
            batcher=self.batcher,
            on_backend_failed=self.backend_failed,
        )
        self.admission = Admission(
            crawler,
            redis,
            self.batcher,
            self.keys,
            self.lease_s,
            settings.DUPEFILTER_TIMEOUT,
            settings.GLOBAL_PAGE_PER_DOMAIN_LIMIT,
            settings.CRAWL_MAX_PAGES_DEFAULT,
            settings.CRAWL_RECORD_TTL,
            settings.DUPEFILTER_BLOOM_ABOVE,
            bool(str(settings.FRONTIER_TAIL_URL or "").strip()),
        )
        self.emitter = Emitter(
            settings, output, self.leases, on_failed=lambda: self._count(stat_names.failed_counter_name(spider))
        )
        self.seeds: SeedReader | None = None
        if isinstance(output, RedisOutput):
            lists = spider_lists(settings)
            self.seeds = SeedReader(redis, settings, spider, lists.start_urls(spider), lists.dead_letter(spider))
        self.response_codes = {int(c) for c in settings.STATS_RESPONSE_CODES}
        self.link_limits = LinkLimits.from_settings(settings)
        self._counts: collections.Counter[str] = collections.Counter()
        #: Pages per rung and climbs per crawl (docs/contract.md §25.7), flushed with the stats.
        self._fetch_counts: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
        #: Response times and per-domain outcomes for /metrics (docs/contract.md §22.3).
        self.response_metrics = ResponseMetrics(spider, self.keys, settings.METRICS_TOP_DOMAINS)
        #: One WARNING per Redis outage, not one per failed call (docs/contract.md §17.4).
        self.outage = Outage(settings, logger)
        #: Why the crawler stopped for good: the ``crawlhive up`` it took its addresses from exited.
        self.gone: str | None = None
        self._loops: list[task.LoopingCall] = []
        self._closing = threading.Event()
        self._progress: tuple[float, int, int] = (time.monotonic(), 0, 0)
        scripts(redis).load()  # the hot path sends EVALSHA without checking first
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
            spider = crawler.settings["CRAWLHIVE_SPIDER"]
            redis = redis_from_settings(settings)
            output: Output
            if settings.KAFKA_ENABLED:
                output = KafkaOutput(settings)
            else:
                lists = spider_lists(settings)
                output = RedisOutput(
                    redis, lists.items(spider), lists.dead_letter(spider), settings.topic("dead_letter")
                )
            runtime = cls(crawler, settings, spider, redis, output)
            _RUNTIMES[crawler] = runtime
        return runtime

    # --- life cycle -------------------------------------------------------------------------------

    def _opened(self, spider: Spider) -> None:
        """Start the lease renewal and the loops of the maintenance extensions (``EXTENSIONS``:
        :mod:`crawlhive.crawler.extensions`)."""
        for interval, func in (
            (max(0.2, self.lease_s / 4), self.leases.renew_all),
            *maintenance_loops(self.crawler, self),
        ):
            loop = task.LoopingCall(self._kept_running, func)
            loop.start(interval, now=False).addErrback(self._loop_failed)
            self._loops.append(loop)
        if uses_up_state(self.settings):
            threading.Thread(target=self._watch_up, name="crawlhive-up-watch", daemon=True).start()

    def _watch_up(self) -> None:
        """While the crawler runs on the addresses of a ``crawlhive up`` (up.json), check every
        UP_WATCH_S that this ``up`` still runs (:func:`~crawlhive.utils.process.loop.cluster_gone`); once it
        is gone, stop the crawler as a failed call would (:meth:`backend_failed`).

        Failed calls alone did not always tell: a crawler whose calls hung, or had nothing to call
        when ``up`` exited, ran on 45 s later (the README tour, 1 run in 5). A thread, so that a
        blocked reactor cannot keep it from acting: if the crawler has not closed UP_GONE_EXIT_S
        after that, the process says why in the one line ``main()`` would and exits 1 at once.
        Nothing is lost by that: the leases and the queue were in the Redis that went with ``up``."""
        while not self._closing.wait(UP_WATCH_S):
            why = cluster_gone(self.settings)
            if why is None:
                continue
            self.backend_failed(why)
            if self._closing.wait(UP_GONE_EXIT_S):
                return
            print(f"crawlhive crawler: {why}", file=sys.stderr, flush=True)
            os._exit(1)

    def read_seeds(self) -> defer.Deferred[None]:
        """Move the start-URLs list into the frontier, in a thread (validation takes CPU)."""
        seeds = self.seeds
        assert seeds is not None

        def read() -> None:
            try:
                while seeds.run_once():
                    pass
            except RedisError as exc:
                logger.warning("reading %s failed (%r); check REDIS_URL", seeds.start_urls_key, exc)

        return threads.deferToThread(read)

    def reclaim(self) -> defer.Deferred[None]:
        def reclaim() -> None:
            try:
                reclaim_expired_leases(self.worker, self.spider, self.settings.RETRY_TIMES)
            except RedisError as exc:
                logger.warning("reclaiming expired leases failed (%r); check REDIS_URL", exc)

        return threads.deferToThread(reclaim)

    def log_progress(self) -> None:
        """One INFO line per PROGRESS_EVERY_S while pages are fetched, nothing while idle (§17.4)."""
        stats = self.crawler.stats
        pages = int(stats.get_value("response_received_count", 0)) if stats else 0
        items = int(stats.get_value("item_scraped_count", 0)) if stats else 0
        now = time.monotonic()
        last_at, last_pages, last_items = self._progress
        self._progress = (now, pages, items)
        if pages > last_pages:
            elapsed = max(now - last_at, 1e-9)
            logger.info(
                "crawler %s: %d pages in %.0fs (%.1f/s), %d items; since start %d pages, %d items",
                self.spider,
                pages - last_pages,
                elapsed,
                (pages - last_pages) / elapsed,
                items - last_items,
                pages,
                items,
            )

    def backend_failed(self, what: str) -> None:
        """A Redis call failed (any thread): the outage's one WARNING, or, when the cluster is gone
        for good (:func:`~crawlhive.utils.process.loop.cluster_gone`), the crawler stops and
        ``crawlhive crawler`` exits 1 saying so (:func:`crawlhive.crawler.runner.run_crawler`)."""
        try:
            self.outage.failed(what)
        except ClusterGone as exc:
            if self.gone is None:
                self.gone = str(exc)
                self.context.backends_gone = True
                from twisted.internet import reactor

                reactor.callFromThread(self._stop_crawler)

    def _stop_crawler(self) -> None:
        from scrapy.utils.defer import deferred_from_coro

        deferred_from_coro(self.crawler.stop_async())

    def _kept_running(self, func: Any) -> Any:
        """Run one round of the maintenance task *func*; a failure is logged in one line and the
        task runs again in its next round (a LoopingCall whose function raises stops for good: a
        crawler would never renew its leases again after one unexpected error of a failover)."""
        name = getattr(func, "__name__", repr(func))

        def report(exc: BaseException) -> None:
            if isinstance(exc, RedisError) or is_cluster_transient(exc):
                self.backend_failed(f"{name} failed ({exc!r}); check REDIS_URL")
            else:
                logger.error("crawler task %s failed (%r); it runs again in its next round", name, exc)

        try:
            result = func()
        except Exception as exc:
            report(exc)
            return None
        if isinstance(result, defer.Deferred):

            def failed(failure: Any) -> None:
                report(failure.value)

            result.addErrback(failed)
        return result

    def _loop_failed(self, failure: Any) -> None:
        logger.error("crawler maintenance loop failed", exc_info=(failure.type, failure.value, failure.tb))

    def beat(self) -> None:
        try:
            self.heartbeat.beat()
        except RedisError as exc:
            self.backend_failed(f"heartbeat failed ({exc!r}); check REDIS_URL")
        else:
            self.outage.recovered()

    async def _closed(self, spider: Spider, reason: str) -> None:
        """Flush what is pending, stop the producer and the heartbeat; returns when the asyncio
        Redis client is closed too (Scrapy awaits it; a coroutine, as Scrapy 2.13+ wants)."""
        self._closing.set()
        for loop in self._loops:
            if loop.running:
                loop.stop()
        if self.gone is not None:  # nothing can be written any more: leave Redis alone
            self.leases.closed = True
            self.output.close()
            self.redis.close()
            await self.batcher.close()
            return
        await self.leases.drain()  # the finishes being written on the batcher
        self.leases.close()
        self.flush_stats()
        self.output.close()
        try:
            self.heartbeat.stop()
        except RedisError:
            logger.warning("could not remove the heartbeat", exc_info=True)
        if self.leases.inflight:
            logger.warning("%d leases still in flight at close; they will be reclaimed", len(self.leases.inflight))
        self.redis.close()
        await self.batcher.close()

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
        shards = self.worker.keys.shards
        if shards == 1:
            keys, args = self.worker.pop_call(self.spider, self.render)
            calls = [(keys, args)] * count
            asked = [0] * count
        else:  # the pops go to the shards that may have work, in turn from where the last ones began
            now = time.monotonic()
            asked = self.shard_cursor.plan(count, now)
            if not asked:
                return [], self.shard_cursor.wait_s(now)
            calls = [self.worker.pop_call(self.spider, self.render, k) for k in asked]
        replies = await asyncio.gather(
            *(self.batcher.call("frontier_pop", keys, args) for keys, args in calls), return_exceptions=True
        )
        requests: list[Request] = []
        waits: list[float | None] = []
        errors: list[BaseException] = []
        leased: set[int] = set()
        shard_waits: dict[int, float | None] = {}
        for shard, reply in zip(asked, replies, strict=True):
            if isinstance(reply, BaseException):
                errors.append(reply)
                leased.add(shard)  # unknown: ask it again next time
                continue
            outcome = self.worker.pop_outcome(reply, self.spider)
            if outcome.lease is None:
                waits.append(outcome.wait_s)
                known = shard_waits.get(shard)
                if outcome.wait_s is not None and (known is None or outcome.wait_s < known):
                    shard_waits[shard] = outcome.wait_s
                else:
                    shard_waits.setdefault(shard, None)
                continue
            leased.add(shard)
            request = self._leased(outcome, spider)
            if request is not None:
                requests.append(request)
        if shards > 1:
            self.shard_cursor.record(leased, shard_waits, time.monotonic())
        if errors and not requests:
            raise errors[0]
        if requests:
            return requests, None
        if not waits:
            return [], 0.0  # every pop leased an expired crawl's request (acked): pop again now
        if shards > 1:
            now = time.monotonic()
            if self.shard_cursor.any_ready(now):
                return [], 0.0  # shards not asked yet may have work: pop again now
            return [], self.shard_cursor.wait_s(now)
        soonest = [w for w in waits if w is not None]
        return [], min(soonest) if soonest else None

    async def hop_wait(self, url: str) -> float | None:
        """Take one fetch start of the throttle of *url*'s domain for a redirect hop (the limit a
        pop of that domain obeys, cluster-wide, a Retry-After back-off included): 0.0 when it may
        be fetched now (the start is recorded), else the seconds to wait before asking again; None
        when the domain is blacklisted (never fetched).

        Raises:
            RedisError: the call failed.
        """
        keys, args = self.worker.hop_call(self.spider, domain_of_url(url), self.render)
        reply = int(await self.batcher.call("throttle_take", keys, args))
        return None if reply < 0 else reply / 1_000_000

    def _leased(self, outcome: PopOutcome, spider: Spider) -> Request | None:
        """The Scrapy request of a fresh lease, registered in flight; None for a request of an
        expired crawl (acked at once: docs/contract.md §3.4, an expired crawl's request is never
        fetched), or for one that is not http(s) (a crawl dead letter naming its scheme)."""
        lease = outcome.lease
        assert lease is not None
        request = lease.request
        if request.option_set is not None and request.option_set.lost:
            # its crawl record expired while it was queued: the reaper ends the lease with a
            # dead letter once it expires (crawling without the crawl's options would ignore them)
            logger.error(
                "%s: crawl %s/%s has no options left (CRAWL_RECORD_TTL); not fetched",
                request.url,
                request.appid,
                request.crawlid,
            )
            return None
        if request.expires and request.expires <= time.time():
            try:
                self.worker.ack(lease, "")
            except RedisError as exc:  # the lease expires, is reclaimed, and is dropped here again
                logger.warning("could not drop a request of an expired crawl (%r); check REDIS_URL", exc)
            return None
        context = LeaseContext(lease)
        if tracing.ON and request.trace is not None:  # §26.3: the page's spans, from its enqueue time
            from crawlhive.crawler.trace import PageTrace

            context.trace = PageTrace.start(request, time.time_ns())
        problem = unfetchable(request.url)
        built = None
        if problem is None:
            try:
                built = scrapy_request(request, spider, context)
            except ValueError as exc:  # Scrapy refuses the URL (no scheme, …)
                problem = f"not a request Scrapy can build: {str(exc)[:200]}"
            else:
                problem = unfetchable(built.url)
        self.leases.add(context)
        if built is None or problem is not None:
            # Never fetched: Scrapy's handlers for other schemes are disabled too (crawler/settings.py),
            # but a request that got into the frontier past its checks ends here, with its reason.
            logger.warning("%s: %s; not fetched", request.url[:200], problem)
            self.emitter.fail(context, problem or "not fetched")
            return None
        context.fingerprint = self.crawler.request_fingerprinter.fingerprint(built).hex()
        return built

    def retry_wait(self, failures: int, retry_after: Any = None) -> float:
        """Seconds the retry after the *failures*-th failed attempt waits (docs/contract.md §14):
        its back-off (RETRY_BACKOFF_BASE doubling up to RETRY_BACKOFF_MAX, jittered), or the
        response's ``Retry-After`` (*retry_after*, seconds) when that is later."""
        wait = retry_backoff(failures, self.settings.RETRY_BACKOFF_BASE, self.settings.RETRY_BACKOFF_MAX)
        if isinstance(retry_after, int | float) and retry_after > wait:
            wait = float(retry_after)
        return wait

    # --- stats --------------------------------------------------------------------------------------

    def count_response(self, code: int) -> None:
        """Count one response with status *code* (a network failure as 504), §4.7."""
        if code in self.response_codes:
            self._count(stat_names.crawler_counter_name(self.spider, code))
            self._count(stat_names.machine_counter_name(self.host, code))

    def observe_response(self, url: str, seconds: float | None, status: int | None) -> None:
        """One response of *url* (status None: a network failure) that took *seconds* to download,
        for ``crawlhive_response_seconds`` and the per-domain counters (§22.3); flushed with the stats."""
        self.response_metrics.observe(domain_of_url(url), seconds, status)

    def _count(self, name: str) -> None:
        self._counts[name] += 1

    def count_fetch(self, what: str, crawl: tuple[str, str, str] | None) -> None:
        """Count one page rung *what* fetched (or, *what* ``climbs``, one climb of the ``auto``
        ladder) for this spider type, this host and *crawl* (``(spider, appid, crawlid)``; None: a
        robots.txt or sitemap), §25.7; written with the stats."""
        self._count(stat_names.fetch_counter_name(self.spider, what))
        self._count(stat_names.machine_fetch_counter_name(self.host, what))
        if crawl is not None:
            self._fetch_counts[(*crawl, what)] += 1

    def flush_stats(self) -> None:
        """Write the buffered counters (one ``MULTI``), then the crawls' fetch counts (one pipeline)."""
        counts, self._counts = self._counts, collections.Counter()
        fetched, self._fetch_counts = self._fetch_counts, collections.Counter()
        try:
            self.response_metrics.flush(self.redis)
            if counts:
                self.stats.incr_many([(stat_names.CRAWLER, name, n) for name, n in counts.items()])
            if fetched:
                pipe = self.redis.pipeline(transaction=False)
                for (spider, appid, crawlid, what), n in fetched.items():
                    key = self.keys.crawl_fetch(spider, appid, crawlid)
                    pipe.hincrby(key, what, n)
                    pipe.expire(key, int(self.settings.CRAWL_RECORD_TTL))
                pipe.execute()
        except RedisError as exc:
            self.backend_failed(f"writing crawler stats failed ({exc!r}); check REDIS_URL")
