"""Proxies, sticky sessions, bans and the adaptive throttle in the crawler (docs/contract.md §21).

Two downloader middlewares:

* :class:`ProxyMiddleware` (order 700: after the request is shaped and its site gate passed,
  before Scrapy's ``HttpProxyMiddleware`` at 750 turns the proxy URL's credentials into a
  ``Proxy-Authorization`` header). For a request whose domain has a pool (the operator's
  PROXY_DOMAIN_POOLS, else a ``domain-update``'s where PROXY_POOL_DOMAIN_UPDATES allows it, else
  the crawl's ``proxy_pool``, else PROXY_POOL_DEFAULT) it asks Redis for the pool's least
  recently used proxy that does not rest for the domain (or for the tenant site of a shared
  suffix, :func:`scope_of`: one site's bans, sessions and slow-downs are not its siblings'), nor
  for the crawl after its own ``ban_regex`` bans (``utils/backends/lua/proxy_choose.lua``: one call,
  through the crawler's asyncio batcher, so the reactor never blocks and calls share round trips);
  a sticky crawl keeps its session's proxy and cookies (a cookie jar with cookie-jar rules:
  :mod:`crawlhive.crawler.cookies`) and, for impersonated pages, one browser profile of
  FETCH_SESSION_PROFILES (:func:`~crawlhive.crawler.impersonate.session_profile`, §25). A
  rendering crawler's page whose choice names a pool is a
  dead letter, never a direct load (the browser does not go through proxies). Then the
  **network guard**: the target host is resolved by the guarded resolver (the one every direct
  connection uses) *before* the request goes to a proxy, and a blocked target fails exactly as it does without one (its
  ``DNSLookupError`` reaches :class:`~crawlhive.crawler.netguard.NetworkGuardMiddleware`), so the
  proxy never hears of it. Proxy hosts themselves are operator configuration: Scrapy connects to
  them through the same resolver, which lets the configured proxy hosts through
  (:func:`allow_proxy_hosts`). When every proxy rests for the domain, the request goes back to the
  frontier for that long (:meth:`LeaseTable.postpone`, no attempt counted), as a paused site's do.
  A failure to reach the proxy counts as a ban (``process_exception``) and is switched.
* :class:`ProxyResponseMiddleware` (order 589: after decompression at 590, before Scrapy's
  ``RetryMiddleware`` at 550 and the meta-refresh at 580 see the response): a status in
  PROXY_BAN_STATUSES or a body matching the crawl's ``ban_regex`` (RE2, within the pattern bounds)
  is a ban of the proxy for the domain (``utils/backends/lua/proxy_report.lua``: PROXY_BAN_THRESHOLD in a
  row rests it, PROXY_COOLDOWN doubling up to PROXY_COOLDOWN_MAX; a ``ban_regex`` match, or any
  ban without PROXY_SHARED_BANS, for that crawl alone) and the page is sent again through another
  proxy without using one of its retries (up to PROXY_MAX_SWITCHES; never a ``POST``). The adaptive
  throttle: a 429 or 503 that was not switched, or a response slower than AUTOTHROTTLE_LATENCY,
  halves the domain's rate cluster-wide (``utils/backends/lua/autothrottle_slow.lua``; the pop script's
  throttle rule applies the factor and regains it step by step, ``utils/backends/lua/lib/throttle.lua``), so
  nothing is sent to Redis for a page that is neither banned nor slow.

Proxies are named by ``host:port`` (never their URL) in every count, log line and stat. Outcomes
are counted per pool, proxy and outcome in ``keys.proxy_stats()`` (flushed at most once a second),
what ``stats proxies`` and ``/metrics`` read. The pool choice, ban rules and rest keys are in
:mod:`crawlhive.utils.rules.proxy_pools` and ``utils/backends/keys.py``.
"""

from __future__ import annotations

import collections
import json
import logging
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

from redis.exceptions import RedisError
from scrapy import signals
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import TextResponse
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import task
from twisted.internet.error import DNSLookupError

from crawlhive.crawler import cookies as session_cookies
from crawlhive.crawler.impersonate import PROFILE_META, session_profile
from crawlhive.crawler.netguard import installed_resolver
from crawlhive.crawler.requests import IDEMPOTENT_METHODS, context_of, end_for_good
from crawlhive.crawler.runtime import CrawlRuntime
from crawlhive.crawler.sitemaps import SITEMAP
from crawlhive.utils.backends.scripts import scripts
from crawlhive.utils.rules.domains import domain_of_url, tenant_site
from crawlhive.utils.rules.patterns import PatternLimits, search_any
from crawlhive.utils.rules.proxy_pools import Proxy, ProxyPools, pools_from_settings

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from crawlhive.crawler.leases import LeaseContext
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

#: Request meta key of the proxy a request went through: ``(pool, proxy id, bans in a row, switches)``.
PROXY_USED = "crawlhive_proxy"
#: Request meta key counting the proxy switches of one page (kept across switches).
PROXY_SWITCHES = "crawlhive_proxy_switches"
#: Request meta key of the sticky session's cookie jar as the request was sent with it (stored JSON).
SESSION_JAR = "crawlhive_session_jar"
#: Request meta key of the request's own ``Cookie`` header (the crawl's, §3.7) before a session's
#: cookies were added to it (None: it had none), restored when the request goes through another proxy.
OWN_COOKIE = "crawlhive_own_cookie"
#: Request meta key of the ``Cookie`` header written with a session's cookies.
SESSION_COOKIE = "crawlhive_session_cookie"
#: Milliseconds the proxy state of a (pool, domain) lives after its last use.
PROXY_STATE_TTL_S = 86_400
#: Characters of a body searched by ``ban_regex`` (a CAPTCHA page says so near its top).
BAN_SEARCH_CHARS = 65_536
#: Seconds between two flushes of the proxy outcome counters.
COUNT_FLUSH_S = 1.0
#: Domains whose pool (a domain-update's) this process remembers.
DOMAIN_POOLS_MAX = 10_000
#: Statuses that slow a domain down (AUTOTHROTTLE) when they were not switched to another proxy.
SLOW_DOWN_STATUSES = frozenset({429, 503})


def scope_of(url: str) -> tuple[str, str | None]:
    """``(domain, site)`` of *url*: its bucket (§3.2) and, for a tenant of a shared suffix, its site
    (:func:`~crawlhive.utils.rules.domains.tenant_site`), else None. Proxy rests, rotation, sessions and
    the adaptive throttle are kept per site when there is one (``mallory.github.io``'s bans and
    429s are its own, not every ``*.github.io``'s), else per domain."""
    domain = domain_of_url(url)
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        host = ""
    return domain, tenant_site(host) if host else None


def allow_proxy_hosts(pools: ProxyPools) -> set[str]:
    """Let the reactor's guarded resolver resolve the proxies' own hosts: a proxy is operator
    configuration, not a crawl's target, and is not held to CRAWLER_ALLOWED_NETWORKS (§21.5).
    Returns those hosts: a request whose *target* is one of them is still checked
    (:meth:`GuardedResolver.check_target`), so a crawl cannot reach a proxy's host past the guard."""
    hosts = {(urlsplit(p.url).hostname or "").lower() for ps in pools.pools().values() for p in ps}
    resolver = installed_resolver()
    if resolver is not None:
        resolver.exempt = hosts
    return hosts


class ProxyState:
    """What both middlewares share in one crawler process: the pools, the settings of §21, the
    outcome counters and the pools of domains (a ``domain-update``'s) seen lately."""

    def __init__(self, runtime: CrawlRuntime, settings: Settings, pools: ProxyPools) -> None:
        self.runtime = runtime
        self.pools = pools
        self.ban_statuses = {int(s) for s in settings.PROXY_BAN_STATUSES}
        self.threshold = settings.PROXY_BAN_THRESHOLD
        self.shared_bans = settings.PROXY_SHARED_BANS
        self.cooldown_us = int(settings.PROXY_COOLDOWN * 1_000_000)
        self.cooldown_max_us = int(settings.PROXY_COOLDOWN_MAX * 1_000_000)
        self.max_switches = settings.PROXY_MAX_SWITCHES
        self.session_max = settings.SESSION_MAX_REQUESTS
        self.session_ttl_ms = int(settings.SESSION_TTL * 1000)
        self.autothrottle = settings.AUTOTHROTTLE
        self.latency_s = settings.AUTOTHROTTLE_LATENCY
        self.step = settings.AUTOTHROTTLE_STEP
        self.min_factor = settings.AUTOTHROTTLE_MIN
        self.default_hits = settings.QUEUE_HITS
        self.default_window_us = int(settings.QUEUE_WINDOW * 1_000_000)
        self.pattern_limits = PatternLimits.from_settings(settings)
        self.session_profiles = tuple(str(p) for p in settings.FETCH_SESSION_PROFILES)
        self.domain_pools: dict[str, str] = {}
        #: domain -> the pool of the last page request for it, for the requests of no lease that
        #: Scrapy makes for a page before it reaches ProxyMiddleware (robots.txt, order 100).
        self.recent_pools: dict[str, str] = {}
        self.counts: collections.Counter[str] = collections.Counter()
        self._generation = -1
        self.exempt: set[str] = set()
        self._loop: task.LoopingCall | None = None

    _STATES: dict[int, ProxyState] = {}

    @classmethod
    def of(cls, crawler: Crawler) -> ProxyState:
        """The state of *crawler*'s process, built once.

        Raises:
            ProxyConfigError: PROXY_POOLS, PROXY_POOLS_FILE or PROXY_POOL_DEFAULT cannot be used.
        """
        state = cls._STATES.get(id(crawler))
        if state is None:
            runtime = CrawlRuntime.of(crawler)
            state = cls(runtime, runtime.settings, pools_from_settings(runtime.settings))
            cls._STATES[id(crawler)] = state
            if state.pools:
                crawler.signals.connect(state._opened, signal=signals.spider_opened)
                crawler.signals.connect(state._closed, signal=signals.spider_closed)
        return state

    def _opened(self, spider: Any) -> None:
        self._loop = task.LoopingCall(self.flush)
        self._loop.start(COUNT_FLUSH_S, now=False).addErrback(
            lambda failure: logger.warning("proxy counters: %s", failure.getErrorMessage())
        )

    def _closed(self, spider: Any) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self.flush(blocking=True)  # the batcher may be closing

    def refresh(self) -> None:
        """After the pools changed (a new PROXY_POOLS_FILE): let the resolver through to their hosts."""
        if self.pools.generation != self._generation:
            self._generation = self.pools.generation
            self.exempt = allow_proxy_hosts(self.pools)

    def count(self, pool: str, proxy: str, outcome: str) -> None:
        self.counts[f"{pool}|{proxy}|{outcome}"] += 1

    def flush(self, blocking: bool = False) -> None:
        """Add the counted outcomes to ``keys.proxy_stats()`` (every COUNT_FLUSH_S, and at close,
        *blocking*, on the process's blocking client)."""
        if not self.counts:
            return
        pairs: list[Any] = []
        for field, n in self.counts.items():
            pairs += [field, n]
        self.counts.clear()
        keys = [self.runtime.keys.proxy_stats()]
        if not blocking:
            self.fire("proxy_count", keys, pairs, "count proxy outcomes")
            return
        try:
            scripts(self.runtime.redis)["proxy_count"](keys=keys, args=pairs)
        except RedisError as exc:
            logger.warning("could not count proxy outcomes: %s (check REDIS_URL)", exc)

    def fire(self, script: str, keys: list[Any], args: list[Any], what: str) -> None:
        """Call *script* without waiting for it; a Redis error is logged (the page goes on)."""

        def done(future: Any) -> None:
            if not future.cancelled() and future.exception() is not None:
                logger.warning("could not %s: %s (check REDIS_URL)", what, future.exception())

        self.runtime.batcher.call(script, keys, args).add_done_callback(done)

    def slow_down(self, domain: str, site: str | None = None) -> None:
        """Halve *domain*'s rate, cluster-wide (AUTOTHROTTLE, §21.4); for a tenant site of a shared
        suffix (*site*), that site's alone (the site gate spaces its fetches, §21.4)."""
        keys = self.runtime.keys
        shard = keys.shard_of(domain)
        args = [domain, self.default_hits, self.default_window_us, self.step, self.min_factor, site or domain]
        self.fire("autothrottle_slow", [keys.domain_config(shard), keys.crawl_delay(domain)], args, "slow down")
        logger.info("%s is slowed down by the adaptive throttle", site or domain)

    def report(
        self,
        context: LeaseContext,
        used: tuple[str, str, int],
        url: str,
        banned: bool,
        own: bool = False,
    ) -> None:
        """Count the outcome of *used* (pool, proxy id, bans in a row before) for the scope of *url*
        (its domain, or tenant site) in Redis: a ban always, a success only when it ends a run of
        bans (nothing sent otherwise). An *own* ban (the crawl's ``ban_regex``) counts for this
        crawl alone: a request can only ever change its own crawl's proxy choice (§21.3)."""
        pool, proxy, fails = used
        self.count(pool, proxy, "ban" if banned else "ok")
        if not banned and fails == 0:
            return
        keys = self.runtime.keys
        crawl = context.request
        domain, site = scope_of(url)
        session = keys.proxy_session(crawl.spiderid, crawl.appid, crawl.crawlid, domain, site)
        shared = keys.proxy_health(pool, domain, site)
        mine = keys.proxy_crawl_health(crawl.spiderid, crawl.appid, crawl.crawlid, pool, domain, site)
        args = [
            proxy,
            "ban" if banned else "ok",
            self.threshold,
            self.cooldown_us,
            self.cooldown_max_us,
            "" if own else f"{pool}|{proxy}|{site or domain}",
            PROXY_STATE_TTL_S * 1000,
            "1" if crawl.sticky == "domain" else "",
            pool,
        ]
        shard = keys.shard_of(domain)
        counted, other = (mine, shared) if own else (shared, mine)
        call_keys = [counted, keys.proxy_rests(shard), session, keys.proxy_sessions(shard), other]
        self.fire("proxy_report", call_keys, args, "count a ban")

    def switched(self, request: Request, reason: str) -> Request | None:
        """*request* again, to go through another proxy without using a retry; None after
        PROXY_MAX_SWITCHES switches, and for a request whose method is not idempotent (a ``POST``
        is never sent twice: its first answer, or failure, is the page's, as §3.10 has it), unless
        its spider asked for retries (``dont_retry: False``)."""
        switches = int(request.meta.get(PROXY_SWITCHES, 0))
        if switches >= self.max_switches:
            return None
        if request.method.upper() not in IDEMPOTENT_METHODS and request.meta.get("dont_retry", True) is not False:
            logger.info("%s: %s; not sent again (a %s is never replayed)", request.url[:200], reason, request.method)
            return None
        again = request.replace(dont_filter=True)
        again.meta[PROXY_SWITCHES] = switches + 1
        for name in (PROXY_USED, SESSION_JAR, PROFILE_META, "proxy", "download_latency", "_auth_proxy"):
            again.meta.pop(name, None)
        again.headers.pop(b"Proxy-Authorization", None)
        logger.info("%s: %s; sending it through another proxy (switch %d)", request.url[:200], reason, switches + 1)
        return again


class RenderedThroughProxy(Exception):  # noqa: N818 - a failure of the page, named as its dead letter says
    """A rendered page whose pool choice names a pool (:meth:`ProxyMiddleware._refuse_rendered`)."""


class ProxyRouteNoteMiddleware:
    """Order 90, before Scrapy's ``RobotsTxtMiddleware`` (100): remembers the pool of each page's
    crawl for its domain, so that the robots.txt request Scrapy makes for the page (a request of no
    lease) goes through the same pool (a dict write per request; not installed without pools)."""

    def __init__(self, state: ProxyState) -> None:
        self.state = state

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        state = ProxyState.of(crawler)
        if not state.pools:
            raise NotConfigured
        return cls(state)

    def process_request(self, request: Request) -> None:
        context = context_of(request)
        if context is None:
            return
        recent = self.state.recent_pools
        if len(recent) >= DOMAIN_POOLS_MAX:
            recent.clear()
        recent[domain_of_url(request.url)] = context.request.proxy_pool or self.state.pools.default


class ProxyMiddleware:
    """Chooses the proxy of each request of a domain with a pool and checks its target first
    (module docstring). Order 700."""

    def __init__(self, state: ProxyState) -> None:
        self.state = state

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        state = ProxyState.of(crawler)
        if not state.pools:
            raise NotConfigured  # no pool: direct crawls pay nothing (no args: Scrapy warns of those)
        return cls(state)

    async def process_request(self, request: Request) -> None:
        state = self.state
        if state.runtime.render:
            await self._refuse_rendered(request)
            return
        state.refresh()
        if state.exempt and (urlsplit(request.url).hostname or "").lower() in state.exempt:
            await self._guard(request)  # a proxy's own host as a target: the guard's rule holds
        context = context_of(request)
        if context is not None and context.done:
            return
        domain, site = scope_of(request.url)
        if context is None:
            # a request of no lease (robots.txt): the pool of the page that asked for it
            crawl_pool = state.recent_pools.get(domain, state.pools.default)
        else:
            crawl_pool = context.request.proxy_pool or state.pools.default
        chosen = await self._choose(context, domain, site, crawl_pool)
        if chosen is None:
            if request.meta.pop(PROXY_USED, None) is not None:
                request.meta["proxy"] = None  # a redirect from a proxied domain to a direct one
            return
        pool, proxy, fails, cookies = chosen
        await self._guard(request)  # raises for a blocked target: the proxy never hears of it
        request.meta["proxy"] = proxy.url
        request.meta[PROXY_USED] = (pool, proxy.id, fails)
        if context is not None and context.request.sticky == "domain":
            self._session_cookies(request, cookies, site or domain)
            if state.session_profiles:  # one browser for the session's life (§25)
                crawl = context.request
                session = state.runtime.keys.proxy_session(crawl.spiderid, crawl.appid, crawl.crawlid, domain, site)
                request.meta[PROFILE_META] = session_profile(f"{session}|{proxy.id}", state.session_profiles)

    @staticmethod
    def _session_cookies(request: Request, stored: str, scope: str) -> None:
        """Add the cookies the session's jar (*stored*) sends to this URL to the request's own
        ``Cookie`` header (the crawl's, §3.7); remembers both, so that a switch to another proxy, or
        a redirect, starts again from the request's own header."""
        request.meta[SESSION_JAR] = stored
        current = request.headers.get(b"Cookie")
        written = request.meta.get(SESSION_COOKIE)
        # the header we wrote, unchanged since (a switch, a same-origin redirect): its own part is
        # what we noted; anything else was set (or removed) since by the request's shaping
        own = request.meta.get(OWN_COOKIE) if written is not None and current == written else current
        pairs = session_cookies.header(stored, request.url, scope).encode("latin-1")
        value = b"; ".join(v for v in (own, pairs) if v)
        request.meta[OWN_COOKIE] = own
        request.meta[SESSION_COOKIE] = value
        if value:
            request.headers[b"Cookie"] = value
        else:
            request.headers.pop(b"Cookie", None)

    async def _refuse_rendered(self, request: Request) -> None:
        """A page a rendering crawler would load in the browser, whose pool choice names a pool: a
        crawl dead letter, never a direct load (§15, §21.1). The browser's connections go through
        the crawler's guard proxy, which does not forward to another proxy; a page its crawl, the
        operator's domain pools or PROXY_POOL_DEFAULT send through a proxy is refused rather than
        fetched from the crawler's own address. robots.txt and sitemaps (no browser) are fetched
        as before."""
        context = context_of(request)
        if context is None or context.done or request.meta.get(SITEMAP):
            return
        domain, site = scope_of(request.url)
        chosen = await self._choose(context, domain, site, context.request.proxy_pool or self.state.pools.default)
        if chosen is None:
            return
        reason = (
            f"render: true cannot go through a proxy: {site or domain} is fetched through pool {chosen[0]} "
            "(proxy_pool, PROXY_DOMAIN_POOLS or PROXY_POOL_DEFAULT), and a rendered page is never fetched directly"
        )
        end_for_good(request, reason)
        raise RenderedThroughProxy(reason)

    async def _choose(
        self, context: LeaseContext | None, domain: str, site: str | None, crawl_pool: str
    ) -> tuple[str, Proxy, int, str] | None:
        """(pool, proxy, bans in a row, session cookies) for a request of *context* (None: a
        request of no lease, such as robots.txt) to *domain* (and *site*, its tenant site of a
        shared suffix, whose proxy state is its own), or None to fetch directly. Raises
        IgnoreRequest, after postponing the request, when every proxy rests for it.

        The pool: the operator's for the domain (PROXY_DOMAIN_POOLS) wins; else a
        ``domain-update``'s, when PROXY_POOL_DOMAIN_UPDATES lets it; else the crawl's, else
        PROXY_POOL_DEFAULT (*crawl_pool*)."""
        state = self.state
        keys = state.runtime.keys
        crawl = context.request if context is not None else None
        sticky = crawl is not None and crawl.sticky == "domain"
        scope = site or domain
        pinned = state.pools.pin(domain, site)
        if pinned:
            crawl_pool, updates = pinned, False
        else:
            updates = state.pools.domain_updates
        pool = state.domain_pools.get(domain, crawl_pool) if updates else crawl_pool
        spider, appid, crawlid = (crawl.spiderid, crawl.appid, crawl.crawlid) if crawl else ("-", "-", "-")
        shard = keys.shard_of(domain)
        for _ in range(3):  # the domain's pool may differ from what was assumed (a domain-update)
            proxies = state.pools.get(pool) or ()
            call_keys = [
                keys.domain_config(shard),
                keys.proxy_lru(pool or "-", domain, site),
                keys.proxy_health(pool or "-", domain, site),
                keys.proxy_session(spider, appid, crawlid, domain, site),  # not read without a crawl
                keys.proxy_waiting(shard),
                keys.proxy_sessions(shard),
                keys.proxy_crawl_health(spider, appid, crawlid, pool or "-", domain, site),
            ]
            args = [
                domain,
                crawl_pool,
                pool,
                "1" if sticky else "",
                state.session_max,
                state.session_ttl_ms,
                PROXY_STATE_TTL_S * 1000,
                scope,
                "1" if updates else "",
                *(p.id for p in proxies),
            ]
            try:
                reply = await state.runtime.batcher.call("proxy_choose", call_keys, args)
            except RedisError as exc:
                # Not knowing the proxy, the request is given back (its lease is requeued) rather
                # than sent directly, which its crawl or domain did not ask for.
                logger.warning("could not choose a proxy for %s: %s (check REDIS_URL)", scope, exc)
                if context is not None:
                    state.runtime.leases.postpone(context, 1.0)
                raise IgnoreRequest("no proxy could be chosen") from None
            kind = int(reply[0])
            if kind == 0:
                return None
            if kind == 3:
                pool = reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
                if pool not in state.pools.pools():
                    logger.warning("%s: its proxy pool %s is not configured here; fetching it later", domain, pool)
                    if context is not None:
                        state.runtime.leases.postpone(context, 5.0)
                    raise IgnoreRequest(f"unknown proxy pool {pool}")
                if len(state.domain_pools) >= DOMAIN_POOLS_MAX:
                    state.domain_pools.clear()
                state.domain_pools[domain] = pool
                continue
            if pool != crawl_pool:
                state.domain_pools[domain] = pool
            else:
                state.domain_pools.pop(domain, None)
            if kind == 2:
                wait = max(int(reply[1]) / 1_000_000, 0.5)
                if context is not None:
                    state.runtime.leases.postpone(context, wait)
                raise IgnoreRequest(f"every proxy of pool {pool} rests for {scope}: {wait:.1f}s left")
            proxy_id = reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
            by_id = {p.id: p for p in proxies}
            cookies = reply[3].decode() if isinstance(reply[3], bytes) else str(reply[3] or "")
            return pool, by_id[proxy_id], int(reply[2]), cookies
        raise IgnoreRequest(f"the proxy pool of {domain} keeps changing")

    @staticmethod
    async def _guard(request: Request) -> None:
        """Resolve the target host through the guarded resolver (cached, so a dict lookup for a
        host seen before). A blocked address raises its ``BlockedNetwork`` (a ``DNSLookupError``),
        which ends the request as ``blocked network: …`` as for a direct fetch (§10.2, §21.5)."""
        resolver = installed_resolver()
        if resolver is None:
            raise IgnoreRequest("the network guard is not installed: not sending a request to a proxy")
        host = urlsplit(request.url).hostname or ""
        await maybe_deferred_to_future(resolver.check_target(host))

    def process_exception(self, request: Request, exception: Exception) -> Request | None:
        used = request.meta.get(PROXY_USED)
        if used is None or isinstance(exception, IgnoreRequest | DNSLookupError):
            return None
        context = context_of(request)
        if context is None or context.done:
            return None
        self.state.report(context, used, request.url, banned=True, own=not self.state.shared_bans)
        return self.state.switched(request, f"proxy {used[1]} failed ({type(exception).__name__})")


class ProxyResponseMiddleware:
    """Bans, switches and the adaptive throttle on responses (module docstring). Order 589."""

    def __init__(self, state: ProxyState) -> None:
        self.state = state

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        state = ProxyState.of(crawler)
        if not state.pools and not state.autothrottle:
            raise NotConfigured
        return cls(state)

    def process_response(self, request: Request, response: Response) -> Request | Response:
        state = self.state
        used = request.meta.get(PROXY_USED)
        if used is None and not state.autothrottle:
            return response
        context = context_of(request)
        if context is None or context.done:
            return response
        if used is not None:
            by_status = response.status in state.ban_statuses
            by_body = not by_status and self._ban_body(context, response)
            # a ban_regex match is the crawl's own judgement: it counts for that crawl alone
            state.report(context, used, request.url, by_status or by_body, own=by_body or not state.shared_bans)
            if by_status or by_body:
                again = state.switched(request, f"proxy {used[1]} banned (status {response.status})")
                if again is not None:
                    return again
            elif context.request.sticky == "domain":
                self._keep_cookies(context, used, request, response)
        if state.autothrottle:
            latency = request.meta.get("download_latency")
            slow = isinstance(latency, int | float) and latency > state.latency_s
            if response.status in SLOW_DOWN_STATUSES or slow:
                state.slow_down(*scope_of(request.url))
        return response

    def _ban_body(self, context: LeaseContext, response: Response) -> bool:
        patterns = context.request.ban_regex
        if not patterns or not isinstance(response, TextResponse):
            return False
        return search_any(tuple(patterns), response.text[:BAN_SEARCH_CHARS], self.state.pattern_limits)

    def _keep_cookies(
        self, context: LeaseContext, used: tuple[str, str, int], request: Request, response: Response
    ) -> None:
        """Merge what a response's ``Set-Cookie`` headers change in its sticky session's jar
        (cookie-jar rules: :mod:`crawlhive.crawler.cookies`) into the session, cluster-wide."""
        set_cookies = response.headers.getlist(b"Set-Cookie")
        if not set_cookies:
            return
        domain, site = scope_of(request.url)
        changed = session_cookies.changes(request.meta.get(SESSION_JAR) or "", request.url, set_cookies, site or domain)
        if changed is None:
            return
        crawl = context.request
        keys = self.state.runtime.keys
        session = keys.proxy_session(crawl.spiderid, crawl.appid, crawl.crawlid, domain, site)
        args = [used[1], json.dumps(changed[0]), json.dumps(changed[1])]
        self.state.fire("proxy_session_cookies", [session], args, "keep a session's cookies")
