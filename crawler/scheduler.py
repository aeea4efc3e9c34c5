"""The distributed scheduler: Scrapy asks it for requests, it leases them from the Redis frontier.

``next_request`` serves requests this process has leased. When it has none left and the downloader
has free slots, it leases up to as many requests as there are free slots (fewer while the throttle
leaves pops empty: see ``_take_size``) from the frontier of this
process's spider type (:meth:`CrawlRuntime.take`: one Lua script per request, round robin across
ready domains under the cluster-wide throttle, domain config and blacklist applied live), without
blocking the reactor: the pops go out together and, when they come back, the first request is handed
to the engine with ``engine.crawl``, which makes the engine ask for the rest right away (otherwise
Scrapy re-polls a scheduler that answered None only on its 5 s slot heartbeat). A leased request is
therefore started in the reactor turn its pop returns in, never held back, which keeps the
throttle's spacing exact. When nothing may be fetched it does not ask Redis again until either the
time the pop reported (``wait_s``: the next domain's throttle opens) has passed or a message on
``keys.wake_channel(spider)`` (published by every ``Frontier.push``) says new work arrived; no
``KEYS`` scans, no polling while idle.

Requests that Scrapy hands back to the scheduler (``enqueue_request``) all belong to a lease: a
retry from Scrapy's ``RetryMiddleware`` (its ``retry_times`` meta went up) goes back to the frontier
for any crawler once its back-off has passed (:meth:`CrawlRuntime.retry_wait`, docs/contract.md
§14). A redirect (from Scrapy's ``RedirectMiddleware`` or ``MetaRefreshMiddleware``, which hand the
new request to the engine, and so here, without the frontier) stays with its lease but is a fetch
of its target's domain like any other: it first takes a start of that domain's cluster-wide throttle
(:meth:`CrawlRuntime.hop_wait`, the limit a pop obeys), waiting here as long as the throttle says,
then is served first; a redirect into a blacklisted domain drops its page. Spiders' own requests
never arrive here: the spider middleware turns them into frontier requests.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Self

from redis.exceptions import RedisClusterException, RedisError
from scrapy import signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.exceptions import DontCloseSpider
from scrapy.utils.defer import deferred_from_coro
from twisted.internet import reactor

from crawlhive.crawler.requests import RETRY_AFTER, context_of
from crawlhive.crawler.runtime import CrawlRuntime
from crawlhive.utils.frontier import woken_shards

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: Seconds one blocking read of the wake channel may take (well under redis-py's 5 s timeout).
WAKE_READ_S = 1.0
#: Seconds an idle scheduler (nothing queued for its spider type) waits before it asks Redis again
#: without a wake-up: a safety net for work queued without a publish (e.g. a lease reclaimed by
#: the redis-monitor) or a message lost while the subscription reconnected. It matches Scrapy's
#: engine heartbeat, which is what calls ``next_request`` then, so no timer of our own runs.
IDLE_RECHECK_S = 5.0
#: Seconds before the frontier is asked again after a pop failed on a Redis error.
ERROR_RETRY_S = 1.0
#: Seconds after which pops still out are given up on (Redis replies within its 5 s socket
#: time-out or fails): a safety net so that no lost reply can stop a crawler for good. Requests
#: that such pops lease later are still crawled; unanswered ones expire and are reclaimed.
TAKE_STUCK_S = 30.0
#: Request meta key of a redirect that has taken its start of its domain's throttle (set just
#: before it is handed to the engine again, removed when it comes back here).
HOP_GRANTED = "crawlhive_hop_granted"


class WakeListener:
    """Subscribes to one wake channel in a thread and calls *on_wake* in the reactor thread with the
    message (the frontier shards it names, :func:`~crawlhive.utils.frontier.woken_shards`).

    The subscription is confirmed before :meth:`start` returns, so a push that follows a pop which
    found nothing is never missed. After a Redis error it resubscribes and reports a wake with no
    message (work may have arrived meanwhile, in any shard).
    """

    def __init__(self, runtime: CrawlRuntime, channel: str, on_wake: Any) -> None:
        self.runtime = runtime
        self.channel = channel
        self.on_wake = on_wake
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._down = False  # the subscription failed and has not been made again since
        self._thread = threading.Thread(target=self._run, name=f"wake-{channel}", daemon=True)

    def start(self, timeout_s: float = 5.0) -> None:
        self._thread.start()
        self._ready.wait(timeout_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAKE_READ_S + 1)

    def _run(self) -> None:
        while not self._stop.is_set():
            pubsub = self.runtime.redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]  # RedisCluster.pubsub is unannotated
            try:
                pubsub.subscribe(self.channel)
                pubsub.get_message(timeout=WAKE_READ_S)  # the subscribe confirmation
                self._ready.set()
                self._down = False
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=WAKE_READ_S)
                    if message is not None:
                        reactor.callFromThread(self.on_wake, message.get("data"))
            except (RedisError, RedisClusterException, OSError) as exc:  # a cluster's slot map being read again
                what = f"wake channel {self.channel} failed ({exc!r}); check REDIS_URL"
                if self._down:  # the same outage (other calls may have ended the runtime's meanwhile)
                    logger.debug("%s (still)", what)
                else:
                    self._down = True
                    self.runtime.backend_failed(what)
                self._stop.wait(1.0)
                reactor.callFromThread(self.on_wake, None)
            finally:
                pubsub.close()


class FrontierScheduler(BaseScheduler):
    """Scrapy scheduler over the Redis frontier (see the module docstring).

    Args:
        crawler: the crawler (its engine is nudged on wake-ups).
        runtime: the process's shared runtime.
    """

    def __init__(self, crawler: Crawler, runtime: CrawlRuntime) -> None:
        self.crawler = crawler
        self.runtime = runtime
        self.spider: Spider | None = None
        self._local: collections.deque[Request] = collections.deque()
        self._sleeping = False  # the last pop found nothing to fetch
        self._next_pop = 0.0  # while sleeping: monotonic time before which Redis is not asked
        self._timer: Any = None
        self._listener: WakeListener | None = None
        self._closing = False
        self._taking = False  # pops are out
        self._taking_since = 0.0
        self._take_size = 1  # pops per take: grows while takes are filled, shrinks when throttled
        # redirects waiting for their domain's throttle: id(request) -> (request, timer or None)
        self._hops: dict[int, tuple[Request, Any]] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler, CrawlRuntime.of(crawler))

    def open(self, spider: Spider) -> None:
        self.spider = spider
        self.crawler.signals.connect(self._keep_alive, signal=signals.spider_idle)
        self._listener = WakeListener(
            self.runtime, self.runtime.keys.wake_channel(self.runtime.spider, self.runtime.render), self._woken
        )
        self._listener.start()
        logger.info("crawling spider type %r from the frontier", self.runtime.spider)
        return None

    def close(self, reason: str) -> None:
        """Hand unstarted requests back to the frontier unchanged and stop listening."""
        self._closing = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        given = 0
        waiting = []
        for request, timer in self._hops.values():
            if timer is not None and timer.active():
                timer.cancel()
            waiting.append(request)
        self._hops.clear()
        for request in [*self._local, *waiting]:
            context = context_of(request)
            if context is not None and not context.done:
                self.runtime.leases.give_back(context)
                given += 1
        self._local.clear()
        if given:
            logger.info("handed %d unstarted requests back to the frontier", given)
        if self._listener is not None:
            self._listener.stop()
        return None

    def _keep_alive(self, spider: Spider) -> None:
        raise DontCloseSpider("the frontier may get work at any time")

    def has_pending_requests(self) -> bool:
        """True if requests are held in this process (redirects waiting to be followed); the
        frontier's backlog is the cluster's, not this process's."""
        return bool(self._local or self._hops)

    def enqueue_request(self, request: Request) -> bool:
        """Take back a request of a lease: a retry goes to the frontier, a redirect is kept.

        Returns:
            False for a request of no lease (nothing to attach it to; it is dropped).
        """
        context = context_of(request)
        if context is None or context.done:
            logger.warning("dropping %s: not a request of a frontier lease", request)
            return False
        failures = int(request.meta.get("retry_times", 0))
        if failures > context.request.retry_times:
            self.runtime.leases.retry(context, self.runtime.retry_wait(failures, request.meta.get(RETRY_AFTER)))
            return True
        if self._closing:  # close() already handed back what it held: this one goes back now
            self.runtime.leases.give_back(context)
            return True
        if request.meta.get("redirect_urls") and not request.meta.pop(HOP_GRANTED, False):
            self._hops[id(request)] = (request, None)
            self._ask_hop(request)  # a redirect: first a start of its domain's throttle
            return True
        self._local.append(request)
        return True

    def _ask_hop(self, request: Request) -> None:
        """Ask the throttle of *request*'s domain for a start (a redirect waiting in ``_hops``)."""
        self._hops[id(request)] = (request, None)
        deferred_from_coro(self.runtime.hop_wait(request.url)).addCallbacks(
            lambda wait: self._hop_answer(request, wait), lambda failure: self._hop_failed(request, failure)
        )

    def _hop_failed(self, request: Request, failure: Any) -> None:
        logger.warning(
            "asking the throttle for a redirect to %s failed (%s); retrying in %.0fs (check REDIS_URL)",
            request.url[:200],
            failure.getErrorMessage(),
            ERROR_RETRY_S,
        )
        self._hop_answer(request, ERROR_RETRY_S, granted=False)

    def _hop_answer(self, request: Request, wait: float | None, granted: bool = True) -> None:
        """Serve the redirect *request* now (*wait* 0: its start was taken), ask again after *wait*
        seconds, or drop its page (None: a blacklisted domain)."""
        if id(request) not in self._hops or self._closing:
            return  # the scheduler closed meanwhile: close() handed its lease back
        context = context_of(request)
        if context is None or context.done:
            self._hops.pop(id(request), None)
            return
        if wait is None:
            self._hops.pop(id(request), None)
            logger.info("not following a redirect to %s: its domain is blacklisted", request.url[:200])
            self.runtime.leases.drop(context)
            return
        if granted and wait <= 0:
            self._hops.pop(id(request), None)
            # the in-flight bound of a lease (max_hold_s) counts from its latest hop: a chain on a
            # slowly throttled domain is not given up (and fetched again) for waiting its turns
            context.started = time.monotonic()
            engine = self.crawler.engine
            if engine is None:
                self._local.appendleft(request)
                return
            request.meta[HOP_GRANTED] = True
            engine.crawl(request)  # back through enqueue_request, then served first
            return
        # Twisted's interface stubs declare callLater without self: mypy misreads the arguments.
        timer = reactor.callLater(max(wait, 0.001), self._ask_hop, request)  # type: ignore[arg-type]
        self._hops[id(request)] = (request, timer)

    def next_request(self) -> Request | None:
        if self._local:
            return self._local.popleft()
        self._take()
        return None

    def _take(self) -> None:
        """Lease requests for the downloader's free slots (at most one batch of pops out at a time)."""
        if self._taking and time.monotonic() - self._taking_since > TAKE_STUCK_S:
            logger.error("pops from the frontier got no answer in %.0fs; asking again", TAKE_STUCK_S)
            self._taking = False
        if self._taking or self._closing or self.spider is None:
            return
        if self._sleeping and time.monotonic() < self._next_pop:
            return
        engine = self.crawler.engine
        if engine is None or engine.needs_backout():
            return  # the engine asks again when a download slot frees up
        # redirects waiting for their domain's throttle hold their slot (and lease) meanwhile
        free = engine.downloader.total_concurrency - len(engine.downloader.active) - len(self._local) - len(self._hops)
        if free <= 0:
            return
        self._sleeping = False
        self._taking = True
        self._taking_since = time.monotonic()
        deferred_from_coro(self._take_async(min(free, self._take_size)))

    async def _take_async(self, count: int) -> None:
        assert self.spider is not None
        started = self._taking_since
        try:
            requests, wait_s = await self.runtime.take(self.spider, count)
        except RedisError as exc:
            self.runtime.backend_failed(f"leasing from the frontier failed ({exc!r}); check REDIS_URL")
            self._sleep(ERROR_RETRY_S)
            return
        except Exception:
            logger.exception("leasing from the frontier failed")
            self._sleep(ERROR_RETRY_S)
            return
        finally:
            if self._taking_since == started:  # not given up on meanwhile (TAKE_STUCK_S)
                self._taking = False
        self.runtime.outage.recovered()
        # As many pops as the last take could fill, doubled while they are all filled: an
        # unthrottled crawl soon asks for every free slot at once, while a throttled one (where a
        # pop that finds no ready domain scans up to POP_SCAN_DOMAINS for nothing) sends about one
        # pop more than it gets.
        self._take_size = count * 2 if len(requests) >= count else len(requests) + 1
        if self._closing:
            for request in requests:  # the scheduler closed meanwhile: hand them back
                context = context_of(request)
                if context is not None:
                    self.runtime.leases.give_back(context)
            return
        if not requests:
            self._sleep(wait_s)
            return
        self._local.extend(requests[1:])
        engine = self.crawler.engine
        if engine is None:
            self._local.appendleft(requests[0])
            return
        engine.crawl(requests[0])  # comes back through enqueue_request; the engine then asks for more

    def _sleep(self, wait_s: float | None) -> None:
        """Ask Redis again after *wait_s* (None: when woken by a push, or after IDLE_RECHECK_S)."""
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        self._sleeping = True
        if wait_s is None:
            self._next_pop = time.monotonic() + IDLE_RECHECK_S
        else:
            self._next_pop = time.monotonic() + wait_s
            # Twisted's interface stubs declare callLater without self: mypy misreads the arguments.
            self._timer = reactor.callLater(wait_s, self._wake)  # type: ignore[arg-type]

    def _woken(self, data: object) -> None:
        """A wake-up message (*data*: the shards it names, None after a lost subscription)."""
        self.runtime.shard_cursor.wake(woken_shards(data))
        self._wake()

    def _wake(self) -> None:
        """Work may be ready: lease at once (the engine gets the requests when the pops return)."""
        if self._closing or self.spider is None or not self._sleeping:
            return  # not idle: the engine is asking already
        self._next_pop = 0.0
        self._take()
