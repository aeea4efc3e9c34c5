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

import dataclasses
import enum
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Self

import ujson

from crawlhive.utils.domains import domain_of_url
from crawlhive.utils.keys import Keys
from crawlhive.utils.queues import SCORE_LUA, decode_priority, encode_score
from crawlhive.utils.throttle import THROTTLE_LUA

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import Pipeline
    from redis.commands.core import Script

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
    scrapy_request: dict[str, Any] | None = None
    """A followed request that is more than a plain GET of ``url`` (its own method, body, headers,
    cookies, callback, meta or cb_kwargs) as ``scrapy.Request.to_dict`` made JSON-safe by
    ``crawlhive.crawler.requests``; None for a seed or a plain link."""

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
    domain = domain_of_url(message["url"])
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
        seed_domain=domain,
        domain=domain,  # a seed is queued under its own domain; computed once
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

        Costs one round trip now (the arrival sequence). The writes are grouped: one multi-member
        ``ZADD NX`` per crawl queue, one ``ZADD LT`` per (crawl, domain) with the best score of the
        batch there, one ``ZADD NX`` of the new domains per spider, and per crawl one ``SADD`` of its
        domains plus its record (``HSET``, ``EXPIRE``, the expiry timer) and index entries, so a batch
        costs a few commands per queue touched rather than ~9 per request. The result is the same as
        pushing the requests one by one in list order (for ``expires``, the last non-zero value of a
        crawl wins), and as idempotent: a request already queued (same encoding) is left as it is.
        """
        if not requests:
            return
        first = self.reserve_sequence(len(requests))
        now = int(time.time())
        keys = self.keys
        # queue key -> {member: score}; (spider, domain) -> {crawl member: best score}
        queues: dict[str, dict[bytes, int]] = {}
        best: dict[tuple[str, str], dict[str, int]] = {}
        spider_domains: dict[str, set[str]] = {}
        # (spider, appid, crawlid) -> (domains, last non-zero expires)
        crawls: dict[tuple[str, str, str], tuple[set[str], int]] = {}
        for offset, request in enumerate(requests):
            domain = request.domain
            spider, appid, crawlid = request.spiderid, request.appid, request.crawlid
            value = encode_score(request.priority, first + offset)
            queue = keys.crawl_queue(spider, appid, crawlid, domain)
            members = queues.get(queue)
            if members is None:
                members = queues[queue] = {}
            members.setdefault(request.encode(), value)
            crawl_best = best.setdefault((spider, domain), {})
            crawl_member = keys.crawl_member(appid, crawlid)
            if value < crawl_best.get(crawl_member, value + 1):
                crawl_best[crawl_member] = value
            spider_domains.setdefault(spider, set()).add(domain)
            crawl = (spider, appid, crawlid)
            domains, expires = crawls.get(crawl) or (set(), 0)
            domains.add(domain)
            crawls[crawl] = (domains, request.expires or expires)
        for queue, members in queues.items():
            pipe.zadd(queue, members, nx=True)  # type: ignore[arg-type]
        for (spider, domain), crawl_best in best.items():
            pipe.zadd(keys.domain_crawls(spider, domain), crawl_best, lt=True)  # type: ignore[arg-type]
        for spider, domains in spider_domains.items():
            pipe.zadd(keys.domains(spider), dict.fromkeys(domains, 0), nx=True)
        apps: dict[tuple[str, str], set[str]] = {}
        refs = []
        for (spider, appid, crawlid), (domains, expires) in crawls.items():
            ref = keys.crawl_ref(spider, appid, crawlid)
            refs.append(ref)
            apps.setdefault((spider, appid), set()).add(crawlid)
            pipe.sadd(keys.crawl_domains(spider, appid, crawlid), *domains)
            record = keys.crawl(spider, appid, crawlid)
            pipe.hset(record, mapping={"appid": appid, "crawlid": crawlid, "spiderid": spider, "last_activity": now})
            if expires:
                pipe.hset(record, "expires", expires)
                pipe.zadd(keys.expiries(), {ref: expires})
            pipe.expire(record, self.record_ttl_s)
        for (spider, appid), crawlids in apps.items():
            pipe.sadd(keys.app_crawls(spider, appid), *crawlids)
        pipe.sadd(keys.active_crawls(), *refs)
        for spider in spider_domains:
            pipe.publish(keys.wake_channel(spider), b"1")


# --- taking work: pop-and-lease, renew, ack, requeue (crawler side) ------------------------------

#: Domains one pop considers at most before it reports "nothing ready" (bounds the script's work).
POP_SCAN_DOMAINS = 16
#: Seconds a blacklisted or paused domain waits before the scheduler looks at it again, so a
#: ``blacklist-remove`` or ``domain-update`` applies within this time (API.md §3.11: within 2 s).
RECHECK_S = 1.0

# KEYS: 1 domains(spider), 2 leases(spider), 3 domain_config, 4 domain_blacklist.
# ARGV: 1 crawl_queue prefix, 2 domain_crawls prefix, 3 crawl_domains prefix, 4 crawl prefix,
#       5 crawl_leases prefix, 6 throttle prefix, 7 default hits, 8 default window (us),
#       9 '1' if moderated, 10 lease (us), 11 domains to scan, 12 recheck (us), 13 window margin (us).
# Returns {1, member, domain, crawl member, deadline_s, deadline_us} when a request was leased;
# {2, wait_us} when domains exist but none may be fetched now; {0} when there is nothing queued.
_POP_LUA = (
    THROTTLE_LUA
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local recheck = tonumber(ARGV[12])
local ready = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', secs(now), 'LIMIT', 0, tonumber(ARGV[11]))
for _, domain in ipairs(ready) do
  local dq = ARGV[2] .. domain
  local hits, window = tonumber(ARGV[7]), tonumber(ARGV[8])
  local cfg = redis.call('HGET', KEYS[3], domain)
  if cfg then
    local c = cjson.decode(cfg)
    hits = math.floor(c.hits * c.scale + 1e-9)
    window = c.window * 1000000
  end
  if redis.call('SISMEMBER', KEYS[4], domain) == 1 or hits <= 0 then
    redis.call('ZADD', KEYS[1], secs(now + recheck), domain)
  else
    local tkey = ARGV[6] .. domain
    local margin = tonumber(ARGV[13])
    local wait = throttle_wait(tkey, now, hits, window, ARGV[9] == '1', margin)
    if wait > 0 then
      redis.call('ZADD', KEYS[1], secs(now + wait), domain)
    else
      while true do
        local best = redis.call('ZRANGE', dq, 0, 0)
        if #best == 0 then
          redis.call('ZREM', KEYS[1], domain)
          break
        end
        local crawl = best[1]
        local cq = ARGV[1] .. crawl .. ':' .. domain
        local popped = redis.call('ZPOPMIN', cq)
        local head = redis.call('ZRANGE', cq, 0, 0, 'WITHSCORES')
        if #head == 0 then
          redis.call('ZREM', dq, crawl)
          redis.call('SREM', ARGV[3] .. crawl, domain)
        else
          redis.call('ZADD', dq, head[2], crawl)
        end
        if #popped > 0 then
          if redis.call('ZCARD', dq) == 0 then
            redis.call('ZREM', KEYS[1], domain)
          elseif ARGV[9] == '1' then
            redis.call('ZADD', KEYS[1], secs(now + math.ceil(window / hits)), domain)
          else
            redis.call('ZADD', KEYS[1], secs(now), domain)
          end
          throttle_record(tkey, now, window + margin)
          local deadline = now + tonumber(ARGV[10])
          redis.call('ZADD', KEYS[2], secs(deadline), popped[1])
          redis.call('HINCRBY', ARGV[4] .. crawl, 'inflight', 1)
          redis.call('SADD', ARGV[5] .. crawl, popped[1])
          return {1, popped[1], domain, crawl, math.floor(deadline / 1000000), deadline % 1000000}
        end
      end
    end
  end
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #nxt == 0 then
  return {0}
end
local wait = micros(nxt[2]) - now
if wait < 0 then wait = 0 end
return {2, wait}
"""
)

# KEYS: 1 leases, 2 crawl record, 3 crawl leases. ARGV: 1 member, 2 counter ('crawled', 'failed' or
# '' for a policy drop), 3 record TTL (s). Returns 1 if this call ended the lease, else 0 (it had
# been reclaimed or cancelled by a stop: the caller's result no longer counts).
_ACK_LUA = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('SREM', KEYS[3], ARGV[1])
redis.call('HINCRBY', KEYS[2], 'inflight', -1)
if ARGV[2] ~= '' then
  redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
end
redis.call('HSET', KEYS[2], 'last_activity', redis.call('TIME')[1])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return 1
"""

# KEYS: 1 leases, 2 crawl stopped marker. ARGV: 1 member, 2 lease (us).
# Returns 1 lease renewed, 0 lease gone (reclaimed or cancelled), 2 crawl stopped (lease kept: the
# caller drops its result and acks).
_TOUCH_LUA = """
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 2
end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', string.format('%d.%06d', math.floor(deadline / 1000000), deadline % 1000000), ARGV[1])
return 1
"""

# KEYS: 1 leases, 2 crawl leases, 3 crawl record, 4 crawl queue, 5 domain crawls, 6 domains,
#       7 crawl domains, 8 queue sequence. ARGV: 1 leased member, 2 member to queue, 3 priority,
#       4 crawl member, 5 domain. Moves a lease back into the queue if (and only if) it is still
#       leased; returns 1 if moved, 0 if the lease was already gone.
_REQUEUE_LUA = (
    SCORE_LUA
    + """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('HINCRBY', KEYS[3], 'inflight', -1)
local score = queue_score(ARGV[3], redis.call('INCR', KEYS[8]))
redis.call('ZADD', KEYS[4], 'NX', score, ARGV[2])
redis.call('ZADD', KEYS[5], 'LT', score, ARGV[4])
redis.call('ZADD', KEYS[6], 'NX', 0, ARGV[5])
redis.call('SADD', KEYS[7], ARGV[5])
return 1
"""
)


@dataclass(frozen=True, slots=True)
class Lease:
    """A request taken from the frontier by one crawler.

    Attributes:
        member: the exact bytes leased (the key of the lease; pass it back to ack/renew/requeue).
        request: the decoded request.
        deadline: Redis time (epoch s) after which the lease may be reclaimed unless renewed.
    """

    member: bytes
    request: FrontierRequest
    deadline: float


@dataclass(frozen=True, slots=True)
class PopOutcome:
    """What :meth:`Frontier.pop` found: a lease, or how long until a domain may be fetched.

    Attributes:
        lease: the leased request, or None.
        wait_s: when no lease: seconds until the next queued domain may be fetched, or None when
            nothing at all is queued for the spider (wait for the wake channel instead of polling).
    """

    lease: Lease | None
    wait_s: float | None


class TouchStatus(enum.Enum):
    """Outcome of :meth:`Frontier.touch`."""

    RENEWED = 1
    """The lease is ours and its deadline was extended."""
    LOST = 0
    """The lease is gone (reclaimed after expiry, or cancelled by stop): drop the result."""
    STOPPED = 2
    """The crawl was stopped or expired: drop the result, then :meth:`Frontier.ack` the lease."""


@dataclass(frozen=True, slots=True)
class ThrottleConfig:
    """Default throttle of one crawler process (overridden per domain by domain-config)."""

    hits: int
    window_s: float
    moderated: bool
    type_enabled: bool
    egress_id: str | None
    margin_s: float = 0.0
    """Added to every window when hits are counted (``QUEUE_WINDOW_MARGIN``)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> ThrottleConfig:
        egress = settings["CRAWLER_EGRESS_ID"] if settings.getbool("SCHEDULER_IP_ENABLED") else None
        return cls(
            hits=settings.getint("QUEUE_HITS"),
            window_s=settings.getfloat("QUEUE_WINDOW"),
            moderated=settings.getbool("QUEUE_MODERATED"),
            type_enabled=settings.getbool("SCHEDULER_TYPE_ENABLED"),
            egress_id=egress,
            margin_s=max(0.0, settings.getfloat("QUEUE_WINDOW_MARGIN")),
        )


class FrontierWorker:
    """The crawler's side of the frontier: take, renew, finish and hand back requests.

    Every method is one Lua script (one round trip) on the Redis clock.
    """

    def __init__(self, redis: Redis, keys: Keys, lease_s: float, record_ttl_s: float, throttle: ThrottleConfig) -> None:
        self.redis = redis
        self.keys = keys
        self.lease_us = int(lease_s * 1_000_000)
        self.record_ttl_s = int(record_ttl_s)
        self.throttle = throttle
        self._pop = redis.register_script(_POP_LUA)
        self._ack = redis.register_script(_ACK_LUA)
        self._touch = redis.register_script(_TOUCH_LUA)
        self._requeue = redis.register_script(_REQUEUE_LUA)

    @classmethod
    def from_settings(cls, redis: Redis, settings: Settings) -> Self:
        return cls(
            redis,
            Keys(settings["REDIS_KEY_PREFIX"]),
            settings.getfloat("LEASE_TIMEOUT"),
            settings.getfloat("CRAWL_RECORD_TTL"),
            ThrottleConfig.from_settings(settings),
        )

    def pop(self, spider: str) -> PopOutcome:
        """Lease the best request of the next domain that its throttle allows, cluster-wide.

        Domains are served in the order they become ready (round robin); within a domain the crawl
        with the highest-priority head goes first. Blacklisted and paused (``hits`` 0) domains are
        skipped and looked at again after RECHECK_S.
        """
        keys, args = self.pop_call(spider)
        return self.pop_outcome(self._pop(keys=keys, args=args))

    @property
    def pop_script(self) -> Script:
        """The pop script, for callers that send :meth:`pop_call` themselves (pipelined, async)."""
        return self._pop

    def pop_call(self, spider: str) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of one :meth:`pop` for *spider*; decode the reply with :meth:`pop_outcome`."""
        keys = self.keys
        prefixes = keys.script_prefixes(spider)
        throttle = self.throttle
        return (
            [keys.domains(spider), keys.leases(spider), keys.domain_config(), keys.domain_blacklist()],
            [
                prefixes["crawl_queue"],
                prefixes["domain_crawls"],
                prefixes["crawl_domains"],
                prefixes["crawl"],
                prefixes["crawl_leases"],
                keys.throttle_prefix(spider if throttle.type_enabled else None, throttle.egress_id),
                throttle.hits,
                int(throttle.window_s * 1_000_000),
                "1" if throttle.moderated else "0",
                self.lease_us,
                POP_SCAN_DOMAINS,
                int(RECHECK_S * 1_000_000),
                int(throttle.margin_s * 1_000_000),
            ],
        )

    @staticmethod
    def pop_outcome(reply: list[Any]) -> PopOutcome:
        """The :class:`PopOutcome` of one pop script reply."""
        status = int(reply[0])
        if status == 1:
            member = bytes(reply[1])
            deadline = int(reply[4]) + int(reply[5]) / 1_000_000
            return PopOutcome(Lease(member, FrontierRequest.decode(member), deadline), None)
        if status == 2:
            return PopOutcome(None, int(reply[1]) / 1_000_000)
        return PopOutcome(None, None)

    def touch(self, lease: Lease) -> TouchStatus:
        """Renew *lease* for another LEASE_TIMEOUT unless its crawl was stopped or it was lost."""
        r = lease.request
        result = self._touch(
            keys=[self.keys.leases(r.spiderid), self.keys.crawl_stopped(r.spiderid, r.appid, r.crawlid)],
            args=[lease.member, self.lease_us],
        )
        return TouchStatus(int(result) if int(result) in (0, 2) else 1)

    def ack(self, lease: Lease, counter: str = "") -> bool:
        """End *lease*: its item or dead letter is acknowledged by Kafka, or it was dropped.

        Args:
            lease: what :meth:`pop` returned.
            counter: ``"crawled"`` (an item), ``"failed"`` (a crawl dead letter) or ``""`` (a policy
                drop: nothing is counted).

        Returns:
            True if this ended the lease; False if it had already been reclaimed or cancelled.
        """
        if counter not in ("", "crawled", "failed"):
            raise ValueError(f"counter must be 'crawled', 'failed' or '', got {counter!r}")
        r = lease.request
        keys = self.keys
        return bool(
            self._ack(
                keys=[
                    keys.leases(r.spiderid),
                    keys.crawl(r.spiderid, r.appid, r.crawlid),
                    keys.crawl_leases(r.spiderid, r.appid, r.crawlid),
                ],
                args=[lease.member, counter, self.record_ttl_s],
            )
        )

    def requeue(self, member: bytes, request: FrontierRequest) -> bool:
        """Move the leased *member* back into the queue as *request*, if it is still leased.

        Pass the decoded member unchanged to hand an unstarted request back (graceful shutdown), or
        a copy with ``retry_times + 1`` and ``priority - 10`` to retry it (lease reclaim).

        Returns:
            True if moved; False if the lease had already ended (acked, reclaimed, cancelled).
        """
        keys, args = self._move_back(member, request)
        return bool(self._requeue(keys=keys, args=args))

    def _move_back(self, member: bytes, r: FrontierRequest) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of the scripts that move a lease back into the queue (requeue, reclaim)."""
        keys = self.keys
        return (
            [
                keys.leases(r.spiderid),
                keys.crawl_leases(r.spiderid, r.appid, r.crawlid),
                keys.crawl(r.spiderid, r.appid, r.crawlid),
                keys.crawl_queue(r.spiderid, r.appid, r.crawlid, r.domain),
                keys.domain_crawls(r.spiderid, r.domain),
                keys.domains(r.spiderid),
                keys.crawl_domains(r.spiderid, r.appid, r.crawlid),
                keys.queue_sequence(),
            ],
            [member, r.encode(), r.priority, keys.crawl_member(r.appid, r.crawlid), r.domain],
        )

    def expired_leases(self, spider: str, limit: int = 500) -> list[tuple[bytes, FrontierRequest]]:
        """Leases of *spider* whose deadline passed on the Redis clock (oldest first), decoded."""
        now_s, now_us = self.redis.time()
        members = self.redis.zrangebyscore(
            self.keys.leases(spider), "-inf", f"{now_s}.{now_us:06d}", start=0, num=limit
        )
        return [(bytes(m), FrontierRequest.decode(m)) for m in members]

    @cached_property
    def _reclaim(self) -> Script:
        return self.redis.register_script(_RECLAIM_LUA)

    @cached_property
    def _exhaust(self) -> Script:
        return self.redis.register_script(_EXHAUST_LUA)

    def reclaim(self, member: bytes, request: FrontierRequest) -> bool:
        """:meth:`requeue`, but only if the lease of *member* still exists and has expired (so a
        crawler that renewed it in the meantime keeps it). Returns True if moved."""
        keys, args = self._move_back(member, request)
        return bool(self._reclaim(keys=keys, args=args))

    def exhaust(self, member: bytes, request: FrontierRequest, dead_letter: str) -> bool:
        """End the expired lease of *member* as :meth:`ack` with ``"failed"`` does, and append
        *dead_letter* (JSON) to the control stream as a ``dead-letter`` entry, atomically.

        Returns:
            True if done; False if the lease was gone or had been renewed (nothing changed).
        """
        keys = self.keys
        r = request
        return bool(
            self._exhaust(
                keys=[
                    keys.leases(r.spiderid),
                    keys.crawl(r.spiderid, r.appid, r.crawlid),
                    keys.crawl_leases(r.spiderid, r.appid, r.crawlid),
                    keys.control_stream(),
                ],
                args=[member, "failed", self.record_ttl_s, dead_letter],
            )
        )

    # --- crawler helpers: batched renewals and acks on a caller's pipeline -----------------------

    def touch_many(self, leases: list[Lease]) -> list[TouchStatus]:
        """:meth:`touch` of several leases in one pipelined round trip (the crawler's renewal loop)."""
        if not leases:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for lease in leases:
            r = lease.request
            self._touch(
                keys=[self.keys.leases(r.spiderid), self.keys.crawl_stopped(r.spiderid, r.appid, r.crawlid)],
                args=[lease.member, self.lease_us],
                client=pipe,
            )
        return [TouchStatus(int(x) if int(x) in (0, 2) else 1) for x in pipe.execute()]

    def queue_ack(self, lease: Lease, counter: str, pipe: Pipeline) -> None:
        """Queue :meth:`ack` of *lease* on *pipe* (the caller executes it; with ``MULTI`` it is
        atomic with the pipe's other writes, e.g. the :meth:`Frontier.push` of the page's links).

        Uses ``EVALSHA`` directly, so the pipe costs no script-existence check; call
        :meth:`load_scripts` once first (a ``NoScriptError`` from the pipe means Redis lost its
        scripts: load them again and retry).
        """
        if counter not in ("", "crawled", "failed"):
            raise ValueError(f"counter must be 'crawled', 'failed' or '', got {counter!r}")
        r = lease.request
        keys = self.keys
        pipe.evalsha(
            self._ack.sha,
            3,
            keys.leases(r.spiderid),
            keys.crawl(r.spiderid, r.appid, r.crawlid),
            keys.crawl_leases(r.spiderid, r.appid, r.crawlid),
            lease.member,
            counter,
            self.record_ttl_s,
        )

    def load_scripts(self) -> None:
        """Load this worker's Lua scripts into Redis (one round trip each; idempotent)."""
        for script in (self._pop, self._ack, self._touch, self._requeue):
            self.redis.script_load(script.script)


def retried(request: FrontierRequest) -> FrontierRequest:
    """The retry of *request* (API.md §3.10): one more ``retry_times``, priority lowered by 10."""
    return dataclasses.replace(request, retry_times=request.retry_times + 1, priority=request.priority - 10)


# --- reading and purging crawls (redis-monitor side) ---------------------------------------------

# KEYS: 1 crawl domains, 2 crawl leases, 3 leases, 4 crawl record, 5 expiries, 6 stopped marker.
# ARGV: 1 crawl queue prefix + crawl member + ':', 2 domain crawls prefix, 3 crawl member,
#       4 crawl ref, 5 blacklist TTL (s). Returns the number of queued requests purged.
_PURGE_LUA = """
local purged = 0
for _, domain in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local cq = ARGV[1] .. domain
  purged = purged + redis.call('ZCARD', cq)
  redis.call('DEL', cq)
  redis.call('ZREM', ARGV[2] .. domain, ARGV[3])
end
redis.call('DEL', KEYS[1])
for _, member in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  redis.call('ZREM', KEYS[3], member)
end
redis.call('DEL', KEYS[2])
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('HSET', KEYS[4], 'inflight', 0)
  redis.call('HDEL', KEYS[4], 'expires')
end
redis.call('ZREM', KEYS[5], ARGV[4])
redis.call('SET', KEYS[6], '1', 'EX', ARGV[5])
return purged
"""


# KEYS: 1 crawl domains. ARGV: 1 crawl queue prefix + crawl member + ':'. Returns {domain, queued,
# best score, worst score, ...} for each domain of the crawl with queued requests (O(domains)).
_CRAWL_BACKLOG_LUA = """
local out = {}
for _, domain in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local queue = ARGV[1] .. domain
  local n = redis.call('ZCARD', queue)
  if n > 0 then
    local head = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
    local tail = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
    out[#out + 1] = domain
    out[#out + 1] = n
    out[#out + 1] = head[2]
    out[#out + 1] = tail[2]
  end
end
return out
"""


@dataclass(frozen=True, slots=True)
class DomainBacklog:
    """Queued requests of one crawl in one domain (the per-domain entry of API.md §4.1)."""

    total: int
    high_priority: int
    low_priority: int


@dataclass(frozen=True, slots=True)
class CrawlState:
    """Everything ``info`` reports about one crawl, read without scanning any queue."""

    spiderid: str
    appid: str
    crawlid: str
    domains: dict[str, DomainBacklog]
    inflight: int
    crawled: int
    failed: int
    expires: int

    @property
    def pending(self) -> int:
        return sum(d.total for d in self.domains.values())


class FrontierReader:
    """The redis-monitor's side of the frontier: crawl state for ``info``, purge for ``stop``."""

    def __init__(self, redis: Redis, keys: Keys, record_ttl_s: float) -> None:
        self.redis = redis
        self.keys = keys
        self.record_ttl_s = int(record_ttl_s)
        self._purge = redis.register_script(_PURGE_LUA)

    @classmethod
    def from_settings(cls, redis: Redis, settings: Settings) -> Self:
        return cls(redis, Keys(settings["REDIS_KEY_PREFIX"]), settings.getfloat("CRAWL_RECORD_TTL"))

    def crawl_state(self, spider: str, appid: str, crawlid: str) -> CrawlState:
        """The state of one crawl; zeros and no domains for an unknown one (see :meth:`crawl_states`)."""
        return self.crawl_states(spider, appid, [crawlid])[0]

    def crawl_states(self, spider: str, appid: str, crawlids: list[str]) -> list[CrawlState]:
        """:meth:`crawl_state` of several crawls of one appid, in one pipeline (two round trips:
        redis-py first checks that the script is loaded).

        Per crawl one script reads, per domain with queued requests, the ``ZCARD`` and the first and
        last score of its queue inside Redis (O(domains), never O(backlog)), so a crawl over 1,000
        domains costs one reply of 4,000 values rather than 3,000 pipelined commands.
        """
        keys = self.keys
        prefix = keys.script_prefixes(spider)["crawl_queue"]
        pipe = self.redis.pipeline(transaction=False)
        for crawlid in crawlids:
            self._crawl_backlog(
                keys=[keys.crawl_domains(spider, appid, crawlid)],
                args=[prefix + keys.crawl_member(appid, crawlid) + ":"],
                client=pipe,
            )
            pipe.hgetall(keys.crawl(spider, appid, crawlid))
        replies = pipe.execute()
        states = []
        for i, crawlid in enumerate(crawlids):
            flat = replies[2 * i]
            backlog = {
                _text(flat[j]): DomainBacklog(
                    int(flat[j + 1]), decode_priority(float(flat[j + 2])), decode_priority(float(flat[j + 3]))
                )
                for j in range(0, len(flat), 4)
            }
            record = {_text(k): _text(v) for k, v in replies[2 * i + 1].items()}
            states.append(
                CrawlState(
                    spiderid=spider,
                    appid=appid,
                    crawlid=crawlid,
                    domains=dict(sorted(backlog.items())),
                    inflight=max(0, int(record.get("inflight", 0))),
                    crawled=int(record.get("crawled", 0)),
                    failed=int(record.get("failed", 0)),
                    expires=int(record.get("expires", 0)),
                )
            )
        return states

    @cached_property
    def _crawl_backlog(self) -> Script:
        return self.redis.register_script(_CRAWL_BACKLOG_LUA)

    def app_crawlids(self, spider: str, appid: str) -> list[str]:
        """Crawl ids of *appid* that have (or recently had) queued or in-flight work."""
        return sorted(c.decode() for c in self.redis.smembers(self.keys.app_crawls(spider, appid)))

    def purge(self, spider: str, appid: str, crawlid: str) -> int:
        """Stop one crawl atomically (API.md §3.9): delete its queued requests in every domain,
        cancel its leases, disarm its expiry timer and blacklist it for CRAWL_RECORD_TTL.

        Returns:
            The number of queued requests removed (``total_purged`` / ``total_expired``).
        """
        keys = self.keys
        prefixes = keys.script_prefixes(spider)
        member = keys.crawl_member(appid, crawlid)
        return int(
            self._purge(
                keys=[
                    keys.crawl_domains(spider, appid, crawlid),
                    keys.crawl_leases(spider, appid, crawlid),
                    keys.leases(spider),
                    keys.crawl(spider, appid, crawlid),
                    keys.expiries(),
                    keys.crawl_stopped(spider, appid, crawlid),
                ],
                args=[
                    prefixes["crawl_queue"] + member + ":",
                    prefixes["domain_crawls"],
                    member,
                    keys.crawl_ref(spider, appid, crawlid),
                    self.record_ttl_s,
                ],
            )
        )

    @cached_property
    def _complete_scan(self) -> Script:
        return self.redis.register_script(_COMPLETE_SCAN_LUA)

    @cached_property
    def _expire_due(self) -> Script:
        return self.redis.register_script(_EXPIRE_DUE_LUA)

    @cached_property
    def _spider_backlog(self) -> Script:
        return self.redis.register_script(_SPIDER_BACKLOG_LUA)

    def scan_complete(self, cursor: int = 0, count: int = 500) -> tuple[int, int]:
        """Check up to about *count* crawls of ``keys.active_crawls()`` from *cursor* (``SSCAN``):
        each that has nothing queued, no lease and no in-flight count leaves the active set and its
        appid's ``app_crawls``, and a ``complete`` entry (spiderid, appid, crawlid, total_crawled,
        total_failed) is appended to the control stream, in one script, so with several callers each
        completion is reported once. A later push makes the crawl active again.

        Returns:
            ``(next cursor, crawls found complete)``; cursor 0 means the pass is over.
        """
        prefixes = self.keys.crawl_ref_prefixes()
        cursor_out, found = self._complete_scan(
            keys=[self.keys.active_crawls(), self.keys.control_stream()],
            args=[
                cursor,
                count,
                prefixes["crawl_domains"],
                prefixes["crawl_leases"],
                prefixes["crawl"],
                prefixes["app_crawls"],
            ],
        )
        return int(cursor_out), int(found)

    def fire_expiries(self, limit: int = 1000) -> int:
        """Fire the expiry timers (``keys.expiries()``) whose time has passed on the Redis clock:
        each is removed from the set and an ``expire`` entry (spiderid, appid, crawlid, expires) is
        appended to the control stream, in one script (exactly one caller fires each).

        Returns:
            The number of timers fired (at most *limit*).
        """
        return int(self._expire_due(keys=[self.keys.expiries(), self.keys.control_stream()], args=[limit]))

    def spider_backlog(self, spider: str) -> dict[str, int]:
        """Queued requests per domain of *spider* (domains with none left out), in one script that
        sums the ``ZCARD`` of each domain's crawl queues: O(domains x crawls), not O(backlog)."""
        prefixes = self.keys.script_prefixes(spider)
        reply = self._spider_backlog(
            keys=[self.keys.domains(spider)], args=[prefixes["domain_crawls"], prefixes["crawl_queue"]]
        )
        return {_text(reply[i]): int(reply[i + 1]) for i in range(0, len(reply), 2)}

    def active_spiders(self) -> set[str]:
        """Spider types of the crawls in ``keys.active_crawls()`` (``SSCAN``, no ``KEYS``).

        A request is queued or leased only while its crawl is active, so these are the only spider
        types whose ``leases`` and ``domains`` keys can hold anything.
        """
        spiders = set()
        for ref in self.redis.sscan_iter(self.keys.active_crawls(), count=1000):
            try:
                spiders.add(self.keys.parse_crawl_ref(_text(ref))[0])
            except ValueError:
                continue
        return spiders


# --- redis-monitor side: completion, expiry timers, lease reclaim, queue backlog -------------------
#
# Notifications (complete, expire, dead letters of reclaimed leases) are appended to the control
# stream by the same script that changes the state (utils/control.py), so the redis-monitor emits
# each exactly once across monitors and loses none when it crashes before Kafka acknowledged it.

#: Lua: ``unescape(part)`` inverts :func:`crawlhive.utils.keys.escape` (for ids parsed from refs).
_UNESCAPE_LUA = """
local function unescape(part)
  return (string.gsub(string.gsub(part, '%%3A', ':'), '%%25', '%%'))
end
"""

# KEYS: 1 active crawls, 2 control stream. ARGV: 1 SSCAN cursor, 2 SSCAN count, 3 crawl-domains
# prefix, 4 crawl-leases prefix, 5 crawl record prefix, 6 app-crawls prefix (each + crawl ref).
# Returns {next cursor, number of crawls found complete}. A crawl is complete when it has no domain
# with queued requests, no lease and no in-flight count; it then leaves the active set and its
# appid's crawl set, and a ``complete`` entry carrying its counters is appended to the stream.
_COMPLETE_SCAN_LUA = (
    _UNESCAPE_LUA
    + """
local scan = redis.call('SSCAN', KEYS[1], ARGV[1], 'COUNT', tonumber(ARGV[2]))
local found = 0
for _, ref in ipairs(scan[2]) do
  if redis.call('SCARD', ARGV[3] .. ref) == 0 and redis.call('SCARD', ARGV[4] .. ref) == 0 then
    local record = redis.call('HMGET', ARGV[5] .. ref, 'inflight', 'crawled', 'failed')
    if tonumber(record[1] or '0') <= 0 then
      local spider, appid, crawlid = string.match(ref, '^([^:]*):([^:]*):([^:]*)$')
      redis.call('SREM', KEYS[1], ref)
      if spider then
        redis.call('SREM', ARGV[6] .. spider .. ':' .. appid, unescape(crawlid))
        local event = cjson.encode({spiderid = unescape(spider), appid = unescape(appid),
          crawlid = unescape(crawlid), total_crawled = tonumber(record[2] or '0'),
          total_failed = tonumber(record[3] or '0')})
        redis.call('XADD', KEYS[2], '*', 'kind', 'complete', 'request', event)
        found = found + 1
      end
    end
  end
end
return {scan[1], found}
"""
)

# KEYS: 1 expiries, 2 control stream. ARGV: 1 most timers to fire. Fires the timers whose time has
# come on the Redis clock: each is removed from KEYS[1] (the claim: exactly one caller gets it) and
# an ``expire`` entry is appended to the stream. Returns the number fired.
_EXPIRE_DUE_LUA = (
    _UNESCAPE_LUA
    + """
local now = redis.call('TIME')[1]
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local fired = 0
for i = 1, #due, 2 do
  local ref = due[i]
  redis.call('ZREM', KEYS[1], ref)
  local spider, appid, crawlid = string.match(ref, '^([^:]*):([^:]*):([^:]*)$')
  if spider then
    local event = cjson.encode({spiderid = unescape(spider), appid = unescape(appid),
      crawlid = unescape(crawlid), expires = tonumber(due[i + 1])})
    redis.call('XADD', KEYS[2], '*', 'kind', 'expire', 'request', event)
    fired = fired + 1
  end
end
return fired
"""
)

# Prepended to a script whose KEYS[1] is a spider's leases and ARGV[1] a leased member: returns 0
# unless the lease still exists and its deadline has passed on the Redis clock (so a lease renewed
# after the reaper listed it is left alone).
_LEASE_EXPIRED_GUARD_LUA = """
local lease_deadline = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not lease_deadline then
  return 0
end
local lease_now = redis.call('TIME')
if tonumber(lease_deadline) > tonumber(lease_now[1]) + tonumber(lease_now[2]) / 1000000 then
  return 0
end
"""

# The requeue of _REQUEUE_LUA, only for a lease that has expired.
_RECLAIM_LUA = _LEASE_EXPIRED_GUARD_LUA + _REQUEUE_LUA

# KEYS: 1 leases, 2 crawl record, 3 crawl leases, 4 control stream. ARGV: 1 member, 2 'failed',
# 3 record TTL (s), 4 dead letter (JSON). The ack of _ACK_LUA counted as failed, plus a
# ``dead-letter`` entry on the stream, only for a lease that has expired. Returns 1 if done, else 0.
_ACK_BODY, _ACK_RETURN = _ACK_LUA.rsplit("return 1", 1)
assert not _ACK_RETURN.strip(), "_ACK_LUA must end with 'return 1'"
_EXHAUST_LUA = (
    _LEASE_EXPIRED_GUARD_LUA
    + _ACK_BODY
    + """
redis.call('XADD', KEYS[4], '*', 'kind', 'dead-letter', 'request', ARGV[4])
return 1
"""
)

# KEYS: 1 domains(spider). ARGV: 1 domain-crawls prefix, 2 crawl-queue prefix (+ crawl member + ':'
# + domain). Returns {domain, backlog, ...} of every domain with queued requests: the ZCARDs of its
# crawls' queues, O(domains x crawls per domain), never O(backlog).
_SPIDER_BACKLOG_LUA = """
local out = {}
for _, domain in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local total = 0
  for _, crawl in ipairs(redis.call('ZRANGE', ARGV[1] .. domain, 0, -1)) do
    total = total + redis.call('ZCARD', ARGV[2] .. crawl .. ':' .. domain)
  end
  if total > 0 then
    out[#out + 1] = domain
    out[#out + 1] = total
  end
end
return out
"""


def crawl_dead_letter(request: FrontierRequest, error: str, server_time: int | None = None) -> dict[str, Any]:
    """The crawl dead letter (API.md §6 b) of *request*, which failed permanently with *error*
    (``"<ExceptionClass>: <message>"``, ``"lease expired"``, or the item-too-large text)."""
    return {
        "stage": "crawl",
        "error": error,
        "url": request.url,
        "appid": request.appid,
        "crawlid": request.crawlid,
        "spiderid": request.spiderid,
        "retry_times": request.retry_times,
        "server_time": int(time.time()) if server_time is None else server_time,
    }


#: The ``error`` of the dead letter of a request whose lease expired once too often (API.md §3.12).
LEASE_EXPIRED = "lease expired"


@dataclass(frozen=True, slots=True)
class ReclaimResult:
    """What one :func:`reclaim_expired_leases` pass did."""

    requeued: int = 0
    """Expired leases put back in the frontier as retries (priority - 10, retry_times + 1)."""
    failed: int = 0
    """Expired leases whose retries were used up: counted as failed, dead letter on the stream."""


def reclaim_expired_leases(worker: FrontierWorker, spider: str, max_retries: int, limit: int = 500) -> ReclaimResult:
    """Reclaim the expired leases of *spider* (their crawler died or hung), API.md §3.12.

    Each lease whose deadline passed on the Redis clock counts as a failed attempt (§3.10): it goes
    back into the frontier as :func:`retried` while its ``retry_times`` is below *max_retries*;
    otherwise it ends counted as ``failed`` and a ``dead-letter`` entry (:func:`crawl_dead_letter`
    with error :data:`LEASE_EXPIRED`) is appended to the control stream, atomically, for the
    redis-monitor to produce. Each lease is claimed inside its script, so concurrent reapers never
    handle one twice, and a lease renewed in the meantime is left alone.

    Args:
        worker: the frontier client (its lease time is not used).
        spider: the spider type whose ``keys.leases(spider)`` to reap.
        max_retries: RETRY_TIMES.
        limit: most leases handled in this pass (oldest first).

    Raises:
        redis.RedisError: Redis failed; leases not yet handled stay leased for the next pass.
    """
    requeued = failed = 0
    for member, request in worker.expired_leases(spider, limit):
        if request.retry_times < max_retries:
            requeued += worker.reclaim(member, retried(request))
        else:
            letter = crawl_dead_letter(request, LEASE_EXPIRED)
            failed += worker.exhaust(member, request, ujson.dumps(letter, ensure_ascii=False))
    if requeued:
        worker.redis.publish(worker.keys.wake_channel(spider), b"1")  # idle crawlers take it at once
    return ReclaimResult(requeued, failed)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


# --- server-requested back-off (429 + Retry-After) -----------------------------------------------

#: Longest back-off one ``Retry-After`` may impose on a domain, in seconds (a bogus or hostile
#: value must not park a domain for days).
RETRY_AFTER_MAX_S = 3600.0

# KEYS: 1 domains(spider). ARGV: 1 domain, 2 delay (us). The domain's ready time becomes Redis time
# + delay unless it is already later (ZADD GT); returns the new score as a string.
_DEFER_DOMAIN_LUA = (
    THROTTLE_LUA
    + """
local t = redis.call('TIME')
local ready = secs(tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[2]))
redis.call('ZADD', KEYS[1], 'GT', ready, ARGV[1])
return redis.call('ZSCORE', KEYS[1], ARGV[1])
"""
)


def defer_domain(redis: Redis, keys: Keys, spider: str, domain: str, delay_s: float) -> float:
    """Let no crawler of *spider* fetch from *domain* for *delay_s* seconds, cluster-wide.

    Pushes the domain's ready time in ``keys.domains(spider)`` (what the scheduler pop reads) to
    Redis time + *delay_s* (capped at RETRY_AFTER_MAX_S), never earlier than it already is
    (``ZADD GT``). Called when a server answers 429 with ``Retry-After``. A domain with nothing
    queued is registered with that score and dropped by the next pop that finds it empty.

    Returns:
        The domain's ready time (Redis time, epoch s) after the call.

    Raises:
        redis.RedisError: nothing was changed; the caller may ignore it (the retry is still
            throttled by the domain's ordinary limits).
    """
    delay_us = int(min(max(delay_s, 0.0), RETRY_AFTER_MAX_S) * 1_000_000)
    score = redis.register_script(_DEFER_DOMAIN_LUA)(keys=[keys.domains(spider)], args=[domain, delay_us])
    return float(score)


def parse_retry_after(value: bytes | str | None, now: float | None = None) -> float | None:
    """Seconds to wait from an HTTP ``Retry-After`` value (delay-seconds or an HTTP-date), or None
    when it is absent or unparseable. Negative results become 0."""
    if value is None:
        return None
    text = _text(value).strip()
    if text.isdigit():
        return float(text)
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))
