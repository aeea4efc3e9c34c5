"""The Redis frontier: how requests are stored, indexed and counted (see docs/architecture.md).

Layout (key formats in :mod:`crawlhive.utils.keys`):

* one priority queue per **(spider, crawl, domain)**: ``crawl_queue`` (member = encoded request,
  score from ``utils/queues.py``: priority, then arrival order);
* per (spider, domain) the crawls with work there, scored by their best queued score:
  ``domain_crawls`` — the scheduler serves a domain from its best crawl;
* per spider the domains with work, scored by when they may next be fetched: ``domains`` — new
  domains are registered with score 0 (ready), so no ``KEYS`` scan is ever needed;
* per crawl the domains it has queued work in (``crawl_domains``), per appid its crawls
  (``app_crawls``), a crawl record hash (``crawl``), the expiry timers (``expiries``) and the set of
  active crawls (``active_crawls``).

Queues per crawl make ``info`` and ``stop`` cost O(domains of the crawl), never O(backlog):
``ZCARD`` gives a domain's pending count and the first and last scores its high and low priority.

Every write here is idempotent for a given encoded request (``ZADD NX``, sets, hashes), so a
kafka-monitor that re-processes a batch after a crash creates no duplicate queue entry.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import ujson

from crawlhive.utils.domains import domain_of_url
from crawlhive.utils.keys import Keys
from crawlhive.utils.queues import encode_score

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import Pipeline

    from crawlhive.utils.settings import Settings


@dataclass
class FrontierRequest:
    """One request in the frontier, with every option of its crawl (API.md §2.2, §3).

    ``request_id`` makes the encoding unique per accepted submission: for a seed it is derived
    from the Kafka record, so a redelivered record encodes identically (and ``ZADD NX`` ignores
    it) while a deliberate resubmission of the same URL is a new request.
    """

    url: str
    appid: str
    crawlid: str
    spiderid: str = "link"
    priority: int = 1
    request_id: str = ""
    method: str = "GET"
    headers: dict[str, str] | None = None
    body: str | None = None
    cookies: dict[str, str] | None = None
    depth: int = 0
    retry_times: int = 0
    maxdepth: int = 0
    domain_max_pages: int | None = None
    allowed_domains: list[str] | None = None
    allow_regex: list[str] | None = None
    deny_regex: list[str] | None = None
    deny_extensions: list[str] | None = None
    expires: int = 0
    useragent: str | None = None
    cookie: str | None = None
    attrs: dict[str, Any] | None = None
    seed_domain: str = ""
    domain: str = ""
    """The queue bucket of ``url`` (API.md §3.2); filled in from ``url`` when empty."""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.domain:
            self.domain = domain_of_url(self.url)

    def encode(self) -> bytes:
        """Deterministic JSON (sorted keys), so equal requests are equal members."""
        data: bytes = ujson.dumps(self.__dict__, sort_keys=True, ensure_ascii=False).encode()
        return data

    @classmethod
    def decode(cls, raw: bytes | str) -> Self:
        return cls(**ujson.loads(raw))


def seed_from_request(message: dict[str, Any], origin: str) -> FrontierRequest:
    """The frontier request of an accepted crawl request (defaults filled in) from Kafka *origin*."""
    return FrontierRequest(
        url=message["url"],
        appid=message["appid"],
        crawlid=message["crawlid"],
        spiderid=message["spiderid"],
        priority=message["priority"],
        request_id=origin,
        method=message["method"],
        headers=message["headers"],
        body=message["body"],
        cookies=message["cookies"],
        maxdepth=message["maxdepth"],
        domain_max_pages=message["domain_max_pages"],
        allowed_domains=message["allowed_domains"],
        allow_regex=message["allow_regex"],
        deny_regex=message["deny_regex"],
        deny_extensions=message["deny_extensions"],
        expires=message["expires"],
        useragent=message["useragent"],
        cookie=message["cookie"],
        attrs=message["attrs"],
        seed_domain=domain_of_url(message["url"]),
    )


class Frontier:
    """Writes and reads of the frontier layout described in the module docstring."""

    def __init__(self, redis: Redis, keys: Keys, record_ttl_s: float) -> None:
        self.redis = redis
        self.keys = keys
        self.record_ttl_s = int(record_ttl_s)

    @classmethod
    def from_settings(cls, redis: Redis, settings: Settings) -> Self:
        return cls(redis, Keys(settings["REDIS_KEY_PREFIX"]), settings.getfloat("CRAWL_RECORD_TTL"))

    def reserve_sequence(self, count: int) -> int:
        """First of *count* fresh arrival numbers (one round trip)."""
        last = int(self.redis.incrby(self.keys.queue_sequence(), count))
        return last - count + 1

    def push(self, requests: list[FrontierRequest], pipe: Pipeline) -> None:
        """Queue the writes that add *requests* on *pipe* (the caller executes it).

        Costs one round trip now (the arrival sequence) and adds ~9 commands per request to *pipe*.
        """
        if not requests:
            return
        first = self.reserve_sequence(len(requests))
        now = int(time.time())
        keys = self.keys
        spiders: set[str] = set()
        for offset, request in enumerate(requests):
            domain = request.domain
            spider, appid, crawlid = request.spiderid, request.appid, request.crawlid
            crawl_member = keys.crawl_member(appid, crawlid)
            value = encode_score(request.priority, first + offset)
            pipe.zadd(keys.crawl_queue(spider, appid, crawlid, domain), {request.encode(): value}, nx=True)
            pipe.zadd(keys.domain_crawls(spider, domain), {crawl_member: value}, lt=True)
            pipe.zadd(keys.domains(spider), {domain: 0}, nx=True)
            pipe.sadd(keys.crawl_domains(spider, appid, crawlid), domain)
            pipe.sadd(keys.app_crawls(spider, appid), crawlid)
            pipe.sadd(keys.active_crawls(), keys.crawl_ref(spider, appid, crawlid))
            record = keys.crawl(spider, appid, crawlid)
            pipe.hset(record, mapping={"appid": appid, "crawlid": crawlid, "spiderid": spider, "last_activity": now})
            if request.expires:
                pipe.hset(record, "expires", request.expires)
                pipe.zadd(keys.expiries(), {keys.crawl_ref(spider, appid, crawlid): request.expires})
            pipe.expire(record, self.record_ttl_s)
            spiders.add(spider)
        for spider in spiders:
            pipe.publish(keys.wake_channel(spider), b"1")
