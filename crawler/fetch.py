"""Which way a page is fetched, and the ``auto`` ladder (docs/contract.md §25).

The ways (*rungs*), cheapest first: ``plain`` (Scrapy's own client), ``impersonate`` (a browser's
TLS and HTTP/2 fingerprint: :mod:`crawlhive.crawler.impersonate`), ``render`` (a rendering
crawler's headless Chromium, §15). A page's *mode* is one rung, or ``auto``. The mode comes from,
first found: the request's meta (a spider's choice), the crawl's ``fetch``, its domain's
``domain-update`` ``fetch``, the cluster default FETCH.

:class:`FetchChoiceMiddleware` (order 460: after the site gate, before proxies) writes the rung
into the request's meta (:data:`~crawlhive.crawler.impersonate.FETCH_META`), which the download
handler reads. For ``auto`` that rung is the one remembered for the page's site (its tenant site
on a shared suffix, else its domain: ``keys.fetch_rung``), else ``plain``.

:class:`FetchLadderMiddleware` (order 589.5: after decoding at 590, before a proxy ban is counted
at 589 and before Scrapy's retry at 550 sees the response) climbs: an ``auto`` page whose answer is
*wall-shaped* (a status in FETCH_WALL_STATUSES, or a body matching FETCH_WALL_PATTERNS: the
interstitials of the common bot walls) is sent again at the next rung without spending one of its
retries; a rung that got a page past a wall is remembered for its site for FETCH_LADDER_TTL
seconds, so the site's next pages start there.

The rung above ``impersonate`` is ``render``, the rendering crawlers' (§15): a page walled at
``impersonate`` is handed to the frontier's rendering lane (:meth:`FetchState.hand_over`: the same
lease moved back as a ``render: true`` request, no attempt counted) when a live rendering crawler
serves its spider type (their heartbeats, read at most every LOCAL_CACHE_S) and the page can be
rendered (a GET without the crawl's ``headers``, not through a proxy: what ``render: true`` allows,
§15, §21.1); its site then remembers ``render``, and its later ``auto`` pages go to the rendering
lane without being fetched here (:class:`FetchRenderMiddleware`, order 720: once the proxy is
known). Otherwise the ladder stops at ``impersonate``: the wall is the page's answer (an item, or a
retry of a 429/503 as usual) and the item's ``fetch_stopped`` says why.

Items of pages whose mode was not plain carry ``fetch`` (the rung that fetched them); Scrapy's
stats count ``fetch/<rung>`` per response and ``fetch/wall/<rung>`` per climb.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import TYPE_CHECKING, Any, Self

from redis.exceptions import RedisError
from scrapy.exceptions import IgnoreRequest

from crawlhive.crawler.impersonate import curl_target
from crawlhive.crawler.items import FETCH_META, FETCH_RECORD_META, FETCH_STOPPED_META
from crawlhive.crawler.requests import context_of
from crawlhive.crawler.runtime import CrawlRuntime
from crawlhive.utils.config.errors import SettingsError
from crawlhive.utils.frontier.model import OptionSet
from crawlhive.utils.rules.domains import domain_of_url, tenant_site
from crawlhive.utils.rules.patterns import PatternLimits, check_patterns, search_any
from crawlhive.utils.state.heartbeat import crawler_lanes

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.statscollectors import StatsCollector

    from crawlhive.crawler.leases import LeaseContext
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

#: The ways a crawl (``fetch``) or a domain may ask its pages to be fetched.
FETCH_MODES = ("plain", "impersonate", "render", "auto")
#: The rungs of the ladder, cheapest first.
RUNGS = ("plain", "impersonate", "render")
#: The rungs a plain crawler fetches on itself.
CRAWLER_RUNGS = ("plain", "impersonate")
#: Request meta key: the page is on the ``auto`` ladder.
LADDER_META = "crawlhive_fetch_ladder"
#: Request meta key: the page's site remembers ``render`` (:class:`FetchRenderMiddleware`).
RENDER_NEXT_META = "crawlhive_fetch_render_next"
#: Seconds a process keeps what it read of a site's remembered rung or a domain's mode.
LOCAL_CACHE_S = 10.0
#: Entries of each local cache before it is emptied.
LOCAL_CACHE_MAX = 10_000
#: Characters of a body searched for a wall's interstitial.
WALL_SEARCH_CHARS = 65_536


def check_fetch_settings(settings: Settings) -> None:
    """Raises SettingsError naming FETCH, FETCH_PROFILE, FETCH_SESSION_PROFILES, FETCH_WALL_STATUSES,
    FETCH_LADDER_TTL or FETCH_WALL_PATTERNS."""
    if settings.FETCH not in FETCH_MODES or settings.FETCH == "render":
        raise SettingsError(f"FETCH: {settings.FETCH!r} is not one of plain, impersonate, auto")
    curl_target(settings.FETCH_PROFILE)
    for profile in settings.FETCH_SESSION_PROFILES:
        try:
            curl_target(str(profile))
        except SettingsError as exc:
            raise SettingsError(str(exc).replace("FETCH_PROFILE", "FETCH_SESSION_PROFILES", 1)) from None
    if any(not 100 <= int(s) <= 599 for s in settings.FETCH_WALL_STATUSES):
        raise SettingsError(f"FETCH_WALL_STATUSES: HTTP statuses (100-599), got {settings.FETCH_WALL_STATUSES!r}")
    if settings.FETCH_LADDER_TTL <= 0:
        raise SettingsError(f"FETCH_LADDER_TTL: must be positive seconds, got {settings.FETCH_LADDER_TTL}")
    refused = check_patterns(
        {"FETCH_WALL_PATTERNS": list(settings.FETCH_WALL_PATTERNS)}, PatternLimits.from_settings(settings)
    )
    if refused is not None:
        raise SettingsError(f"FETCH_WALL_PATTERNS: {refused[0]} ({refused[1]})")


def site_of(url: str) -> tuple[str, str | None]:
    """``(domain, tenant site or None)`` of *url* (the scope of a remembered rung)."""
    from urllib.parse import urlsplit

    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        host = ""
    return domain_of_url(url), tenant_site(host) if host else None


class _Expiring:
    """A small map whose entries are forgotten after LOCAL_CACHE_S."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[float, str | None]] = {}

    def get(self, key: str) -> tuple[bool, str | None]:
        hit = self.values.get(key)
        if hit is None or hit[0] < time.monotonic():
            return False, None
        return True, hit[1]

    def put(self, key: str, value: str | None) -> None:
        if len(self.values) >= LOCAL_CACHE_MAX:
            self.values.clear()
        self.values[key] = (time.monotonic() + LOCAL_CACHE_S, value)


class Walls:
    """What a wall looks like: FETCH_WALL_STATUSES, FETCH_WALL_PATTERNS (module docstring)."""

    def __init__(self, statuses: frozenset[int], patterns: tuple[str, ...], limits: PatternLimits) -> None:
        self.statuses = statuses
        self.patterns = patterns
        self.limits = limits

    @classmethod
    def from_settings(cls, settings: Settings) -> Walls:
        return cls(
            frozenset(int(s) for s in settings.FETCH_WALL_STATUSES),
            tuple(str(p) for p in settings.FETCH_WALL_PATTERNS),
            PatternLimits.from_settings(settings),
        )

    def walled(self, response: Response) -> bool:
        """Whether *response* is wall-shaped."""
        if response.status in self.statuses:
            return True
        if not self.patterns:
            return False
        text = getattr(response, "text", None)
        return isinstance(text, str) and search_any(self.patterns, text[:WALL_SEARCH_CHARS], self.limits)


class FetchState:
    """What the two middlewares share: the cluster default, the local caches, Redis."""

    def __init__(self, settings: Settings, runtime: CrawlRuntime, stats: StatsCollector) -> None:
        self.default = settings.FETCH
        self.ttl_s = int(settings.FETCH_LADDER_TTL)
        self.walls = Walls.from_settings(settings)
        self.runtime = runtime
        self.stats = stats
        self.rungs = _Expiring()
        self.domains = _Expiring()
        self._lanes: tuple[float, set[tuple[str, bool]]] = (0.0, set())

    @classmethod
    def of(cls, crawler: Crawler) -> FetchState:
        state = getattr(crawler, "_crawlhive_fetch", None)
        if state is None:
            settings: Settings = crawler.settings["CRAWLHIVE_SETTINGS"]
            check_fetch_settings(settings)
            assert crawler.stats is not None
            state = cls(settings, CrawlRuntime.of(crawler), crawler.stats)
            crawler._crawlhive_fetch = state  # type: ignore[attr-defined]
        return state

    async def domain_mode(self, domain: str) -> str | None:
        """The ``fetch`` of *domain*'s ``domain-update``, or None."""
        known, mode = self.domains.get(domain)
        if known:
            return mode
        keys = self.runtime.keys
        try:
            key = keys.domain_config(keys.shard_of(domain))
            raw = await self.runtime.batcher.command(key, "HGET", key, domain)
        except RedisError as exc:
            logger.debug("could not read the domain config of %s: %s", domain, exc)
            return None
        try:
            config = json.loads(raw) if raw else {}
        except ValueError:
            config = {}
        value = config.get("fetch") if isinstance(config, dict) else None
        mode = value if value in FETCH_MODES else None
        self.domains.put(domain, mode)
        return mode

    async def remembered(self, domain: str, site: str | None) -> str | None:
        """The rung remembered for the site, or None."""
        scope = site or domain
        known, rung = self.rungs.get(scope)
        if known:
            return rung
        key = self.runtime.keys.fetch_rung(domain, site)
        try:
            raw = await self.runtime.batcher.command(key, "GET", key)
        except RedisError as exc:
            logger.debug("could not read the fetch rung of %s: %s", scope, exc)
            return None
        rung = raw.decode() if isinstance(raw, bytes) else raw
        rung = rung if rung in RUNGS else None
        self.rungs.put(scope, rung)
        return rung

    def remember(self, domain: str, site: str | None, rung: str) -> None:
        """Remember *rung* for the site (FETCH_LADDER_TTL), sent without waiting."""
        self.rungs.put(site or domain, rung)
        key = self.runtime.keys.fetch_rung(domain, site)

        def done(future: Any) -> None:
            if not future.cancelled() and future.exception() is not None:
                logger.warning("could not remember the fetch rung of %s: %s", site or domain, future.exception())

        self.runtime.batcher.command(key, "SET", key, rung, "EX", self.ttl_s).add_done_callback(done)

    def render_served(self, spider: str) -> bool:
        """Whether a live rendering crawler serves *spider* (their heartbeats, read at most every
        LOCAL_CACHE_S; a Redis error: not known to, so no page is handed over blindly)."""
        read_at, lanes = self._lanes
        if time.monotonic() - read_at >= LOCAL_CACHE_S:
            try:
                lanes = crawler_lanes(self.runtime.redis, self.runtime.keys)
            except RedisError as exc:
                logger.debug("could not read the crawlers' heartbeats: %s", exc)
                lanes = set()
            self._lanes = (time.monotonic(), lanes)
        return (spider, True) in lanes

    def render_refusal(self, request: Request, context: LeaseContext | None) -> str | None:
        """Why *request* cannot climb to the render rung, or None when it can (module docstring)."""
        if context is None:
            return "not a frontier request (robots.txt, a sitemap)"
        page = context.request
        if page.headers:
            return "the crawl sends headers, which rendered pages do not carry (docs/contract.md §15)"
        if request.meta.get("proxy"):
            return "the page goes through a proxy, which rendered pages do not (docs/contract.md §21.1)"
        if request.method != "GET":
            return f"a {request.method[:10]} request is not rendered"
        if request.body:
            return "a request with a body is not rendered"
        if not self.render_served(page.spiderid):
            return (
                f"no live rendering crawler serves spider type {page.spiderid!r} "
                f"(start one with `crawlhive crawler --spider {page.spiderid} --render`)"
            )
        return None

    def hand_over(self, request: Request, context: LeaseContext) -> None:
        """Move *context*'s page to the rendering lane (``render: true``, ``fetch: render``: its
        item says ``render``) and remember ``render`` for its site.

        Raises:
            IgnoreRequest: always, the page having left this crawler.
        """
        page = context.request
        again = dataclasses.replace(page, render=True, fetch="render")
        again.option_set = OptionSet.of(again)
        domain, site = site_of(request.url)
        self.remember(domain, site, "render")
        self.runtime.leases.hand_over(context, again)
        raise IgnoreRequest(f"{request.url[:200]}: handed to the rendering crawlers (fetch: auto)")


class FetchChoiceMiddleware:
    """Sets each request's rung (module docstring). Order 460."""

    def __init__(self, state: FetchState) -> None:
        self.state = state

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(FetchState.of(crawler))

    async def process_request(self, request: Request) -> None:
        context = context_of(request)
        if self.state.runtime.render:  # a rendering crawler's pages are all rendered (its own handler)
            request.meta[FETCH_META] = "render"
            if context is not None and context.request.fetch in FETCH_MODES:  # said: a page the ladder handed over
                request.meta[FETCH_RECORD_META] = True
            return
        if request.meta.get(FETCH_META) in CRAWLER_RUNGS:
            return  # a spider's choice, or a rung the ladder chose
        domain, site = site_of(request.url)
        mode = getattr(context.request, "fetch", None) if context is not None else None
        if mode not in FETCH_MODES:
            mode = await self.state.domain_mode(domain) or self.state.default
        if mode == "auto":
            request.meta[LADDER_META] = True
            remembered = await self.state.remembered(domain, site)
            if remembered == "render":
                # the site needs a browser: handed over unfetched once its proxy is known
                # (FetchRenderMiddleware), else fetched at the highest rung here
                request.meta[RENDER_NEXT_META] = True
                remembered = "impersonate"
            mode = remembered if remembered in CRAWLER_RUNGS else "plain"
        if mode not in CRAWLER_RUNGS:
            mode = "impersonate"  # render is the rendering crawlers' (a crawl's render: true)
        request.meta[FETCH_META] = mode
        if mode != "plain" or request.meta.get(LADDER_META):
            request.meta[FETCH_RECORD_META] = True


class FetchLadderMiddleware:
    """Climbs the ladder on a wall, remembers what worked (module docstring). Order 589.5."""

    def __init__(self, state: FetchState) -> None:
        self.state = state

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(FetchState.of(crawler))

    def process_response(self, request: Request, response: Response) -> Request | Response:
        rung = "render" if self.state.runtime.render else str(request.meta.get(FETCH_META) or "plain")
        self.state.stats.inc_value(f"fetch/{rung}")
        context = context_of(request)
        crawl = (context.request.spiderid, context.request.appid, context.request.crawlid) if context else None
        self.state.runtime.count_fetch(rung, crawl)
        if not request.meta.get(LADDER_META):
            return response
        domain, site = site_of(request.url)
        if self.state.walls.walled(response):
            at = CRAWLER_RUNGS.index(rung) if rung in CRAWLER_RUNGS else len(CRAWLER_RUNGS)
            if at >= len(CRAWLER_RUNGS):
                return response  # rendered: the top of the ladder, the wall is the page's answer
            if at + 1 >= len(CRAWLER_RUNGS):
                refused = self.state.render_refusal(request, context)
                if refused is None and context is not None:
                    self.state.stats.inc_value(f"fetch/wall/{rung}")
                    self.state.runtime.count_fetch("climbs", crawl)
                    logger.info(
                        "%s: a wall (%d) to the %s fetch; handing it to the rendering crawlers",
                        request.url[:200],
                        response.status,
                        rung,
                    )
                    self.state.hand_over(request, context)
                request.meta[FETCH_STOPPED_META] = refused
                return response  # the top of this crawler's ladder: the wall is the page's answer
            climbed = CRAWLER_RUNGS[at + 1]
            self.state.stats.inc_value(f"fetch/wall/{rung}")
            self.state.runtime.count_fetch("climbs", crawl)
            logger.info("%s: a wall (%d) to the %s fetch; trying %s", request.url[:200], response.status, rung, climbed)
            again = request.replace(dont_filter=True)
            again.meta[FETCH_META] = climbed
            again.meta.pop("download_latency", None)
            return again
        known, remembered = self.state.rungs.get(site or domain)
        if rung != "plain" and (not known or remembered != rung):
            self.state.remember(domain, site, rung)
        return response


class FetchRenderMiddleware:
    """Hands a page whose site remembers ``render`` to the rendering lane before it is fetched
    here, when it may climb there (:meth:`FetchState.render_refusal`); otherwise it is fetched at
    ``impersonate`` as :class:`FetchChoiceMiddleware` chose. Order 720: after the proxy is chosen
    (ProxyMiddleware, 700), which a rendered page could not go through."""

    def __init__(self, state: FetchState) -> None:
        self.state = state

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(FetchState.of(crawler))

    def process_request(self, request: Request) -> None:
        if not request.meta.pop(RENDER_NEXT_META, False):
            return
        context = context_of(request)
        if context is not None and not context.done and self.state.render_refusal(request, context) is None:
            self.state.hand_over(request, context)
