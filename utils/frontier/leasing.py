"""The crawler's side of the frontier: take (pop and lease), renew, finish and hand back requests.

Every call is one Lua script (``utils/backends/lua/frontier_pop.lua``, ``lease_*.lua``) on the Redis clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self, cast

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import is_cluster, keys_from_settings
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.backends.scripts import scripts
from crawlhive.utils.frontier.model import FrontierRequest, OptionSet, decode_priority, parse_lease_member
from crawlhive.utils.frontier.tails import REFILL_WAIT_US, TailLimits

if TYPE_CHECKING:
    from collections.abc import Mapping

    from crawlhive.utils.backends.redis_types import RedisPipeline
    from crawlhive.utils.config.settings import Settings

#: Domains one pop considers at most before it reports "nothing ready" (bounds the script's work).
POP_SCAN_DOMAINS = 16
#: Seconds a blacklisted or paused domain waits before the scheduler looks at it again, so a
#: ``blacklist-remove`` or ``domain-update`` applies within this time (docs/contract.md §3.11: within 2 s).
RECHECK_S = 1.0


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
        egress = settings.CRAWLER_EGRESS_ID if settings.SCHEDULER_IP_ENABLED else None
        return cls(
            hits=settings.QUEUE_HITS,
            window_s=settings.QUEUE_WINDOW,
            moderated=settings.QUEUE_MODERATED,
            type_enabled=settings.SCHEDULER_TYPE_ENABLED,
            egress_id=egress,
            margin_s=max(0.0, settings.QUEUE_WINDOW_MARGIN),
        )


def decode_lease(lease: bytes, spider: str, options: OptionSet | None) -> FrontierRequest:
    """The request of *lease* (a member of ``Keys.leases(spider)``) whose option set is *options*
    (as the crawl record holds it; None if it holds none; see :meth:`FrontierRequest.from_member`)."""
    return _leased_request(lease, parse_lease_member(lease), spider, options)


def _leased_request(
    lease: bytes, parsed: tuple[int, str, str, str, bytes] | None, spider: str, options: OptionSet | None
) -> FrontierRequest:
    """:func:`decode_lease` of a lease already parsed with ``parse_lease_member``."""
    if parsed is None:
        return FrontierRequest.decode(lease)  # leased before 2.1: self-contained
    priority, appid, crawlid, domain, member = parsed
    return FrontierRequest.from_member(
        member, spiderid=spider, appid=appid, crawlid=crawlid, domain=domain, priority=priority, options=options
    )


def member_option_id(member: bytes) -> str | None:
    """The option set id a queue member names (None for a self-contained one): the Python twin of
    the match in ``utils/backends/lua/frontier_pop.lua``."""
    if member[:6] == b'{"o":"':
        return member[6 : member.index(b'"', 6)].decode()
    if member[:1] == b"{":
        return None
    return member.split(b" ", 2)[1].decode()


class FrontierLeaser:
    """The crawler's side of the frontier: take, renew, finish and hand back requests (it holds
    leases; the loops that call it are the crawler's runtime and the redis-monitor's reaper).

    Every method is one Lua script (one round trip) on the Redis clock.
    """

    def __init__(
        self, redis: RedisClient, keys: Keys, lease_s: float, record_ttl_s: float, throttle: ThrottleConfig
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.lease_us = int(lease_s * 1_000_000)
        self.record_ttl_s = int(record_ttl_s)
        self.throttle = throttle
        self.scripts = scripts(redis)
        self._next_shard = 0
        #: When queues spill to tails and ask for refills (FRONTIER_TAIL_URL, §23).
        self.tails = TailLimits()

    @classmethod
    def from_settings(cls, redis: RedisClient, settings: Settings) -> Self:
        leaser = cls(
            redis,
            keys_from_settings(settings),
            settings.LEASE_TIMEOUT,
            settings.CRAWL_RECORD_TTL,
            ThrottleConfig.from_settings(settings),
        )
        leaser.tails = TailLimits.from_settings(settings)
        return leaser

    def pop(self, spider: str, render: bool = False, shard: int | None = None) -> PopOutcome:
        """Lease the best request of the next domain that its throttle allows, cluster-wide.

        Domains are served in the order they become ready (round robin); within a domain the crawl
        with the highest-priority head goes first. Blacklisted and paused (``hits`` 0) domains are
        skipped and looked at again after RECHECK_S. *render* selects the rendering lane (§15).

        With several frontier shards it pops from *shard*, or from each shard in turn until one
        leases a request (the outcome then says how long until the soonest shard has one ready).
        """
        if shard is not None or self.keys.shards == 1:
            keys, args = self.pop_call(spider, render, shard or 0)
            return self.pop_outcome(self.scripts["frontier_pop"](keys=keys, args=args), spider)
        waits: list[float] = []
        shards = self.keys.shards
        for i in range(shards):  # from the shard after the one that served last: round robin
            k = (self._next_shard + i) % shards
            outcome = self.pop(spider, render, k)
            if outcome.lease is not None:
                self._next_shard = (k + 1) % shards
                return outcome
            if outcome.wait_s is not None:
                waits.append(outcome.wait_s)
        return PopOutcome(None, min(waits) if waits else None)

    def pop_call(self, spider: str, render: bool = False, shard: int = 0) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of one :meth:`pop` for *spider* (in the rendering lane if *render*) from
        frontier *shard*; decode the reply with :meth:`pop_outcome`."""
        keys = self.keys
        prefixes = keys.script_prefixes(spider, render, shard)
        throttle = self.throttle
        tails = self.tails
        return (
            [
                keys.domains(spider, render, shard),
                keys.leases(spider, shard),
                keys.domain_config(shard),
                keys.domain_blacklist(shard),
                keys.tail_refill_wanted(shard),
                keys.tail_spill_wanted(shard),
            ],
            [
                prefixes["crawl_queue"],
                prefixes["domain_crawls"],
                prefixes["crawl_domains"],
                prefixes["crawl"],
                prefixes["crawl_leases"],
                keys.throttle_prefix(spider if throttle.type_enabled else None, throttle.egress_id, shard),
                throttle.hits,
                int(throttle.window_s * 1_000_000),
                "1" if throttle.moderated else "0",
                self.lease_us,
                POP_SCAN_DOMAINS,
                int(RECHECK_S * 1_000_000),
                int(throttle.margin_s * 1_000_000),
                keys.crawl_delay_prefix(shard),
                prefixes["tail_queue"] if tails.enabled else "",
                tails.refill_below,
                tails.spill_above,
                REFILL_WAIT_US,
                keys.tail_wake_channel(),
            ],
        )

    def hop_call(self, spider: str, domain: str, render: bool = False) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of ``throttle_take.lua`` for a redirect hop of *spider* (in the rendering
        lane if *render*) to *domain*: one fetch start under the limit a pop of *domain* would obey,
        a ``Retry-After`` back-off included (its reply: 0 = fetch now, -1 = blacklisted, else
        microseconds to wait)."""
        keys = self.keys
        throttle = self.throttle
        shard = keys.shard_of(domain)
        throttle_key = keys.throttle_key(domain, spider if throttle.type_enabled else None, throttle.egress_id)
        return (
            [
                keys.throttle(throttle_key),
                keys.domain_config(shard),
                keys.domain_blacklist(shard),
                keys.crawl_delay(domain),
                keys.domains(spider, render, shard),
            ],
            [
                domain,
                throttle.hits,
                int(throttle.window_s * 1_000_000),
                "1" if throttle.moderated else "0",
                int(throttle.margin_s * 1_000_000),
                int(RECHECK_S * 1_000_000),
            ],
        )

    @staticmethod
    def pop_outcome(reply: list[Any], spider: str) -> PopOutcome:
        """The :class:`PopOutcome` of one pop script reply for *spider* (a request whose option
        set is gone has a :attr:`OptionSet.lost` one: leave its lease to the reaper)."""
        status = int(reply[0])
        if status == 1:
            member = bytes(reply[1])
            deadline = int(reply[4]) + int(reply[5]) / 1_000_000
            options = OptionSet.from_json(reply[6]) if reply[6] else None
            return PopOutcome(Lease(member, decode_lease(member, spider, options), deadline), None)
        if status == 2:
            return PopOutcome(None, int(reply[1]) / 1_000_000)
        return PopOutcome(None, None)

    def touch(self, lease: Lease) -> TouchStatus:
        """Renew *lease* for another LEASE_TIMEOUT unless its crawl was stopped or it was lost."""
        result = self.scripts["lease_touch"](keys=self._touch_keys(lease.request), args=[lease.member, self.lease_us])
        return TouchStatus(int(result) if int(result) in (0, 2) else 1)

    def _touch_keys(self, r: FrontierRequest) -> list[str]:
        shard = self.keys.shard_of(r.domain)
        return [self.keys.leases(r.spiderid, shard), self.keys.crawl_stopped(r.spiderid, r.appid, r.crawlid, shard)]

    def park(self, lease: Lease, wait_s: float) -> TouchStatus:
        """Keep *lease* for *wait_s* seconds more and no longer renew it: a retry waiting out its
        back-off (docs/contract.md §14). When the wait is over, whoever comes first requeues it as a
        retry: the crawler that parked it, or any lease reaper (the lease has expired), so a waiting
        retry survives the restart of its crawler. Stopping the crawl cancels it like any lease."""
        result = self.scripts["lease_touch"](
            keys=self._touch_keys(lease.request), args=[lease.member, max(1, int(wait_s * 1_000_000))]
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
        return bool(
            self.scripts["lease_ack"](
                keys=self._ack_keys(lease.request), args=[lease.member, counter, self.record_ttl_s]
            )
        )

    def _ack_keys(self, r: FrontierRequest) -> list[str]:
        """The leases, the shard's part of the crawl record and the crawl's leases of *r*'s shard."""
        keys = self.keys
        shard = keys.shard_of(r.domain)
        return [
            keys.leases(r.spiderid, shard),
            keys.crawl_shard(r.spiderid, r.appid, r.crawlid, shard),
            keys.crawl_leases(r.spiderid, r.appid, r.crawlid, shard),
        ]

    def requeue(self, member: bytes, request: FrontierRequest) -> bool:
        """Move the leased *member* back into the queue as *request*, if it is still leased.

        Pass the decoded member unchanged to hand an unstarted request back (graceful shutdown), or
        a copy with ``retry_times + 1`` and ``priority - 10`` to retry it (lease reclaim).

        Returns:
            True if moved; False if the lease had already ended (acked, reclaimed, cancelled).
        """
        keys, args = self._move_back(member, request)
        return bool(self.scripts["lease_requeue"](keys=keys, args=args))

    def _move_back(self, member: bytes, r: FrontierRequest) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of the scripts that move a lease back into the queue (requeue, reclaim)."""
        keys = self.keys
        shard = keys.shard_of(r.domain)
        return (
            [
                keys.leases(r.spiderid, shard),
                keys.crawl_leases(r.spiderid, r.appid, r.crawlid, shard),
                keys.crawl_shard(r.spiderid, r.appid, r.crawlid, shard),
                keys.crawl_queue(r.spiderid, r.appid, r.crawlid, r.domain, r.render),
                keys.domain_crawls(r.spiderid, r.domain, r.render),
                keys.domains(r.spiderid, r.render, shard),
                keys.crawl_domains(r.spiderid, r.appid, r.crawlid, r.render, shard),
                keys.queue_sequence(shard),
            ],
            [
                member,
                r.member(),
                r.priority,
                keys.crawl_member(r.appid, r.crawlid),
                r.domain,
                r.option_set.field if r.option_set else "",
                r.option_set.json if r.option_set else "",
            ],
        )

    def queued_request(self, queue: str, member: bytes, score: float) -> FrontierRequest:
        """The request of *member* queued with *score* in crawl queue *queue* (a ``Keys.crawl_queue``
        key), with its option set read from the crawl record: for tools and tests that read a queue
        directly (crawlers pop)."""
        spider, appid, crawlid, domain = self.keys.parse_crawl_queue(queue)
        oid = member_option_id(member)
        if oid is None:
            return FrontierRequest.decode(member)  # self-contained, queued before 2.1
        part = self.keys.crawl_shard(spider, appid, crawlid, self.keys.shard_of(domain))
        raw = cast("bytes | None", self.redis.hget(part, "o:" + oid))
        return FrontierRequest.from_member(
            member,
            spiderid=spider,
            appid=appid,
            crawlid=crawlid,
            domain=domain,
            priority=decode_priority(score),
            options=OptionSet.from_json(raw) if raw else None,
        )

    def expired_leases(self, spider: str, limit: int = 500) -> list[tuple[bytes, FrontierRequest]]:
        """Leases of *spider* whose deadline passed on the Redis clock (oldest first), decoded
        with their option sets (read from the crawl records in one round trip). A request whose
        option set is gone (its crawl record expired) comes with a :attr:`OptionSet.lost` one."""
        now_s, now_us = self.redis.time()
        members: list[bytes] = []
        for shard in range(self.keys.shards):
            found_here = cast(
                "list[bytes]",
                self.redis.zrangebyscore(
                    self.keys.leases(spider, shard), "-inf", f"{now_s}.{now_us:06d}", start=0, num=limit - len(members)
                ),
            )
            members += found_here
            if len(members) >= limit:
                break
        # per lease: its parse and the (appid, crawlid, domain, option set id) whose set it needs
        leases = []
        for m in members:
            p = parse_lease_member(bytes(m))
            oid = member_option_id(p[4]) if p is not None else None
            leases.append((bytes(m), p, (p[1], p[2], p[3], oid) if p is not None and oid is not None else None))
        wanted = list(dict.fromkeys(need for _, _, need in leases if need is not None))
        pipe = self.redis.pipeline(transaction=False)
        for appid, crawlid, domain, oid in wanted:
            pipe.hget(self.keys.crawl_shard(spider, appid, crawlid, self.keys.shard_of(domain)), "o:" + oid)
        found = dict(zip(wanted, pipe.execute() if wanted else [], strict=True))
        out: list[tuple[bytes, FrontierRequest]] = []
        for member, p, need in leases:
            raw = found.get(need) if need is not None else None
            out.append((member, _leased_request(member, p, spider, OptionSet.from_json(raw) if raw else None)))
        return out

    def reclaim(self, member: bytes, request: FrontierRequest) -> bool:
        """:meth:`requeue`, but only if the lease of *member* still exists and has expired (so a
        crawler that renewed it in the meantime keeps it). Returns True if moved."""
        keys, args = self._move_back(member, request)
        return bool(self.scripts["lease_reclaim"](keys=keys, args=args))

    def exhaust(self, member: bytes, request: FrontierRequest, dead_letter: str) -> bool:
        """End the expired lease of *member* as :meth:`ack` with ``"failed"`` does, and append
        *dead_letter* (JSON) to the control stream as a ``dead-letter`` entry, atomically.

        Returns:
            True if done; False if the lease was gone or had been renewed (nothing changed).
        """
        ack_keys = self._ack_keys(request)
        if self.keys.shards == 1:
            return bool(
                self.scripts["lease_exhaust"](
                    keys=[*ack_keys, self.keys.control_stream()],
                    args=[member, "failed", self.record_ttl_s, dead_letter],
                )
            )
        # With shards the stream is in another slot (of a cluster): end the lease, then append the
        # dead letter (a reaper killed in between leaves the request failed without its letter).
        done = bool(
            self.scripts["lease_exhaust"](keys=[*ack_keys, ack_keys[0]], args=[member, "failed", self.record_ttl_s, ""])
        )
        if done:
            self.redis.xadd(self.keys.control_stream(), {"kind": "dead-letter", "request": dead_letter})
        return done

    # --- crawler helpers: batched renewals and acks on a caller's pipeline -----------------------

    def touch_many(self, leases: list[Lease]) -> list[TouchStatus]:
        """:meth:`touch` of several leases in one pipelined round trip (the crawler's renewal loop)."""
        if not leases:
            return []

        def build() -> RedisPipeline:
            pipe = self.redis.pipeline(transaction=False)
            for lease in leases:
                self.scripts.queue(pipe, "lease_touch", self._touch_keys(lease.request), [lease.member, self.lease_us])
            return pipe

        return [TouchStatus(int(x) if int(x) in (0, 2) else 1) for x in self.scripts.execute(build)]

    def queue_ack(
        self, lease: Lease, counter: str, pipe: RedisPipeline, records: Mapping[int, str] | None = None
    ) -> None:
        """Queue :meth:`ack` of *lease* on *pipe* (the caller executes it; with ``MULTI`` it is
        atomic with the pipe's other writes, e.g. the :meth:`Frontier.push` of the page's links).

        *records* (shard -> key) are the page's records of the links it added to a Bloom filter
        (``Keys.dupefilter_bloom_page``, ``LeaseContext.bloom_records``): the ack script deletes
        them when it ends the lease (its links are queued by then: the finish writes them first).
        On a Redis Cluster the script takes only those of the lease's slot; another shard's is
        deleted by a ``DEL`` in the same round trip (pages whose links the Bloom filter of another
        shard took only).

        Uses ``EVALSHA`` directly, so the pipe costs no script-existence check: run the pipe with
        ``scripts(redis).execute``, which loads the scripts and retries when Redis lost them.
        """
        if counter not in ("", "crawled", "failed"):
            raise ValueError(f"counter must be 'crawled', 'failed' or '', got {counter!r}")
        ack_keys = self._ack_keys(lease.request)
        if records:
            if is_cluster(self.redis):
                shard = self.keys.shard_of(lease.request.domain)
                for other, key in records.items():
                    if other != shard:
                        pipe.delete(key)
                ack_keys += [records[shard]] if shard in records else []
            else:
                ack_keys += list(records.values())
        self.scripts.queue(pipe, "lease_ack", ack_keys, [lease.member, counter, self.record_ttl_s])
