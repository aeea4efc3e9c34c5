"""The frontier's writer: how requests are stored, indexed and counted (see docs/architecture.md).

Layout (key formats in :mod:`crawlhive.utils.backends.keys`):

* one priority queue per **(spider, crawl, domain)** in each of two lanes (plain, and rendering
  for crawls with ``render: true``, §15: only rendering crawlers pop from it): ``crawl_queue``
  (member = ``FrontierRequest.member``: the URL, depth and the id of the crawl's option set, which
  the crawl record holds once; score from ``utils/frontier/model.py``: priority, then arrival order);
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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import ujson

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import is_cluster, keys_from_settings
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.backends.replication import ReplicaWait
from crawlhive.utils.frontier.bloom import MAX_LAYERS
from crawlhive.utils.frontier.model import FrontierRequest, OptionSet, encode_score
from crawlhive.utils.frontier.tails import TailLimits

if TYPE_CHECKING:
    from crawlhive.utils.backends.redis_types import RedisPipeline
    from crawlhive.utils.config.settings import Settings


#: Seconds between two spill flags of one queue by one process (FRONTIER_TAIL_URL, §23).
FLAG_EVERY_S = 1.0

#: The wake-up message that names no shard: work may be ready in any shard.
WAKE_ANY = b"*"


def wake_message(shards: Iterable[int]) -> bytes:
    """The message published on a wake channel when work was queued in *shards*: their numbers,
    comma-separated (a crawler then asks those shards again at once, see
    ``ShardCursor.wake`` in ``crawler/shards.py``)."""
    return ",".join(str(shard) for shard in sorted(set(shards))).encode() or WAKE_ANY


def woken_shards(data: object) -> set[int] | None:
    """The shards a wake-up message names; None when it names none (any shard may have work)."""
    text = data.decode(errors="replace") if isinstance(data, bytes) else str(data or "")
    try:
        shards = {int(part) for part in text.split(",")}
    except ValueError:
        return None
    return shards or None


def recrawl_record(request: FrontierRequest) -> str:
    """The crawl record's ``recrawl`` field for a seed sent with *request*'s ``recrawl``: the
    validated settings (defaults filled in by the kafka-monitor) and the seed's priority."""
    settings = dict(request.recrawl or {})
    settings["priority"] = request.priority
    return ujson.dumps(settings, sort_keys=True)


@dataclass
class PushPlan:
    """What a push of some requests writes, grouped (:func:`plan_push`; written by :meth:`Frontier.push`).

    Attributes:
        queues: queue key -> {member: score}.
        best: (spider, render, domain) -> {crawl member: best score of the batch there}.
        spider_domains: (spider, render, shard) -> the domains with work there.
        crawls: (spider, appid, crawlid) -> the last non-zero ``expires`` of its requests.
        lane_domains: (spider, appid, crawlid, render, shard) -> the crawl's domains there.
        budgets: crawl -> ``max_pages`` (§10.7), shown by info.
        option_sets: (spider, appid, crawlid, shard) -> the option sets its requests there name.
        recrawls: crawl -> its recrawl settings (§19), JSON, from a seed sent with ``recrawl``.
        restarts: (spider, appid, crawlid, shard) of those crawls that were stopped or expired
            there (:meth:`Frontier.push` finds them): sent with ``recrawl``, such a crawl starts
            afresh (§19.1): its stopped marker and dupefilter (and its Bloom filter) there are deleted.
    """

    queues: dict[str, dict[bytes, int]] = field(default_factory=dict)
    best: dict[tuple[str, bool, str], dict[str, int]] = field(default_factory=dict)
    spider_domains: dict[tuple[str, bool, int], set[str]] = field(default_factory=dict)
    crawls: dict[tuple[str, str, str], int] = field(default_factory=dict)
    lane_domains: dict[tuple[str, str, str, bool, int], set[str]] = field(default_factory=dict)
    budgets: dict[tuple[str, str, str], int] = field(default_factory=dict)
    option_sets: dict[tuple[str, str, str, int], dict[str, OptionSet]] = field(default_factory=dict)
    recrawls: dict[tuple[str, str, str], str] = field(default_factory=dict)
    restarts: list[tuple[str, str, str, int]] = field(default_factory=list)
    shards: dict[str, int] = field(default_factory=dict)
    """queue key -> its frontier shard."""


def plan_push(keys: Keys, requests: list[FrontierRequest], next_seq: dict[int, int]) -> PushPlan:
    """The writes that add *requests*, grouped per key (no I/O): scores from each request's priority
    and the next arrival sequence of its shard (*next_seq*, advanced here, one per request)."""
    plan = PushPlan()
    queues, best, spider_domains, crawls = plan.queues, plan.best, plan.spider_domains, plan.crawls
    for request in requests:
        shard = keys.shard_of(request.domain)
        options = request.option_set
        if options is None:
            options = request.option_set = OptionSet.of(request)
        domain = request.domain
        spider, appid, crawlid, render = request.spiderid, request.appid, request.crawlid, request.render
        value = encode_score(request.priority, next_seq[shard])
        next_seq[shard] += 1
        queue = keys.crawl_queue(spider, appid, crawlid, domain, render)
        members = queues.get(queue)
        if members is None:
            members = queues[queue] = {}
            plan.shards[queue] = shard
        members.setdefault(request.member(), value)
        crawl_best = best.setdefault((spider, render, domain), {})
        crawl_member = keys.crawl_member(appid, crawlid)
        if value < crawl_best.get(crawl_member, value + 1):
            crawl_best[crawl_member] = value
        spider_domains.setdefault((spider, render, shard), set()).add(domain)
        plan.lane_domains.setdefault((spider, appid, crawlid, render, shard), set()).add(domain)
        crawl = (spider, appid, crawlid)
        crawls[crawl] = request.expires or crawls.get(crawl, 0)
        plan.option_sets.setdefault((spider, appid, crawlid, shard), {})[options.id] = options
        if request.max_pages:
            plan.budgets[crawl] = request.max_pages
        if request.recrawl and request.depth == 0:  # a seed with recrawl: the settings in force (§19.1)
            plan.recrawls[crawl] = recrawl_record(request)
    return plan


class Frontier:
    """Writes and reads of the frontier layout described in the module docstring."""

    def __init__(
        self, redis: RedisClient, keys: Keys, record_ttl_s: float, replicas: ReplicaWait | None = None
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.record_ttl_s = int(record_ttl_s)
        self.cluster = is_cluster(redis)
        self.replicas = replicas
        #: FRONTIER_TAIL_URL set: a push flags the queues it added to for the tail mover (§23).
        self.tails = False
        self._flagged: dict[str, float] = {}  # queue -> when this process last flagged it

    @classmethod
    def from_settings(cls, redis: RedisClient, settings: Settings) -> Self:
        frontier = cls(
            redis,
            keys_from_settings(settings),
            settings.CRAWL_RECORD_TTL,
            ReplicaWait.from_settings(redis, settings),
        )
        frontier.tails = TailLimits.from_settings(settings).enabled
        return frontier

    def reserve_sequence(self, count: int, shard: int = 0) -> int:
        """First of *count* fresh arrival numbers of *shard* (one round trip)."""
        last = int(self.redis.incrby(self.keys.queue_sequence(shard), count))
        return last - count + 1

    def reserve_sequences(self, counts: dict[int, int]) -> dict[int, int]:
        """:meth:`reserve_sequence` of several shards (shard -> count) in one round trip."""
        if len(counts) == 1:
            ((shard, count),) = counts.items()
            return {shard: self.reserve_sequence(count, shard)}
        pipe = self.redis.pipeline(transaction=False)
        for shard, count in counts.items():
            pipe.incrby(self.keys.queue_sequence(shard), count)
        lasts = pipe.execute()
        return {shard: int(last) - count + 1 for (shard, count), last in zip(counts.items(), lasts, strict=True)}

    def renew_records(self, requests: list[FrontierRequest], pipe: RedisPipeline) -> None:
        """Queue on *pipe* the renewal of the crawl records of *requests* (fetched pages) for
        CRAWL_RECORD_TTL. With one shard the ack does it (the record is the shard's part); with
        several the ack renews its shard's part only, and a crawl that fetches without queueing
        links would otherwise lose its record (its counters, its option sets' home) early."""
        if self.keys.shards == 1:
            return
        for spider, appid, crawlid in {(r.spiderid, r.appid, r.crawlid) for r in requests}:
            pipe.expire(self.keys.crawl(spider, appid, crawlid), self.record_ttl_s)

    def push(self, requests: list[FrontierRequest], pipe: RedisPipeline) -> None:
        """Queue the writes that add *requests* on *pipe* (the caller executes it).

        Costs one round trip now (the arrival sequence). The writes are grouped: one multi-member
        ``ZADD NX`` per crawl queue, one ``ZADD LT`` per (crawl, domain) with the best score of the
        batch there, one ``ZADD NX`` of the new domains per spider, and per crawl one ``SADD`` of its
        domains plus its record (``HSET``, ``EXPIRE``, the expiry timer) and index entries, so a batch
        costs a few commands per queue touched rather than ~9 per request. A batch with a seed
        sent with ``recrawl`` costs one more round trip: whether its crawl was stopped (§19.1).
        The result is the same as pushing the requests one by one in list order (for ``expires``,
        the last non-zero value of a crawl wins), and as idempotent: a request already queued
        (same encoding) is left as it is.

        **On a Redis Cluster** there is no ``MULTI`` across slots, so the writes come in two
        steps: the shards' writes (queues, indexes, the shards' parts of the crawl records) and a
        bump of each crawl record's push generation ``gen`` run now, in one round trip pipelined per
        node; only the cluster-wide writes (records, crawl sets, expiry timers, wake-ups) are
        queued on *pipe*. With REDIS_WAIT_REPLICAS the replicas confirm those writes first. So
        whatever the caller queues after them (the crawler's acks) lands after the requests, and
        the completion check (:meth:`FrontierReader.scan_complete`) sees every push that could
        hide work from it (the generation moved).
        """
        if not requests:
            return
        keys = self.keys
        counts: dict[int, int] = {}
        for request in requests:
            shard = keys.shard_of(request.domain)
            counts[shard] = counts.get(shard, 0) + 1
        plan = plan_push(keys, requests, self.reserve_sequences(counts))
        if plan.recrawls:
            plan.restarts = self.stopped_shards(list(plan.recrawls))
        self._write(plan, counts, pipe)

    def stopped_shards(self, crawls: list[tuple[str, str, str]]) -> list[tuple[str, str, str, int]]:
        """The (spider, appid, crawlid, shard) of *crawls* whose stopped marker (``stop``, expiry:
        §3.9) is set in that shard (one round trip)."""
        keys = self.keys
        where = [(*crawl, shard) for crawl in crawls for shard in range(keys.shards)]
        pipe = self.redis.pipeline(transaction=False)
        for spider, appid, crawlid, shard in where:
            pipe.exists(keys.crawl_stopped(spider, appid, crawlid, shard))
        return [place for place, found in zip(where, pipe.execute(), strict=True) if found]

    def _write(self, plan: PushPlan, counts: dict[int, int], pipe: RedisPipeline) -> None:
        """Queue (and on a cluster, run the shards' part of) the writes of *plan*: see :meth:`push`."""
        first = self.redis.pipeline(transaction=False) if self.cluster else pipe
        self.queue_shard_writes(plan, first)
        if self.cluster:
            first.execute()
            if self.replicas is not None:  # REDIS_WAIT_REPLICAS: replicated before the caller acks
                self.replicas.wait(counts)
        self.queue_cluster_writes(plan, pipe)

    def queue_shard_writes(self, plan: PushPlan, first: Any) -> None:
        """Queue on *first* the writes of *plan* in the shards (queues, indexes, the shards' parts of
        the crawl records) and, on a Redis Cluster, the bump of each crawl's push generation: what
        must have run before the pushing page is acked (see :meth:`push`). *first* is a pipeline or
        a :class:`~crawlhive.utils.backends.redis_clients.CommandList` (``Any``: redis-py types its command
        methods for its own clients only)."""
        keys = self.keys
        queues, best, spider_domains = plan.queues, plan.best, plan.spider_domains
        lane_domains, option_sets = plan.lane_domains, plan.option_sets
        for spider, appid, crawlid, shard in plan.restarts:  # a stopped crawl sent with recrawl starts afresh
            first.delete(keys.crawl_stopped(spider, appid, crawlid, shard))
            first.delete(keys.dupefilter(spider, appid, crawlid, shard))
            first.delete(keys.dupefilter_bloom(spider, appid, crawlid, shard))
            for layer in range(MAX_LAYERS):  # one key a DEL: a cluster pipeline takes no more
                first.delete(keys.dupefilter_bloom_layer(spider, appid, crawlid, layer, shard))
            # its log; a compacted base's pieces expire with DUPEFILTER_TIMEOUT (the new filter's
            # first compaction writes over those of its generation), its log's objects are swept
            first.delete(keys.dupefilter_bloom_log(spider, appid, crawlid, shard))
        for queue, members in queues.items():
            first.zadd(queue, members, nx=True)
        if self.tails:
            self._flag_spills(plan, first)
        for (spider, render, domain), crawl_best in best.items():
            first.zadd(keys.domain_crawls(spider, domain, render), crawl_best, lt=True)
        for (spider, render, shard), domains in spider_domains.items():
            first.zadd(keys.domains(spider, render, shard), dict.fromkeys(domains, 0), nx=True)
        for (spider, appid, crawlid, render, shard), domains in lane_domains.items():
            first.sadd(keys.crawl_domains(spider, appid, crawlid, render, shard), *domains)
        sharded = keys.shards > 1
        if sharded:  # each shard's part of the record holds the option sets its members name
            for (spider, appid, crawlid, shard), sets in option_sets.items():
                part = keys.crawl_shard(spider, appid, crawlid, shard)
                first.hset(part, mapping={o.field: o.json for o in sets.values()})
                first.expire(part, self.record_ttl_s)
        if self.cluster:
            for spider, appid, crawlid in plan.crawls:
                first.hincrby(keys.crawl(spider, appid, crawlid), "gen", 1)

    def _flag_spills(self, plan: PushPlan, first: Any) -> None:
        """Flag the queues *plan* adds to in their shard's ``tail_spill_wanted`` (the redis-monitor
        then checks their length), each at most once per FLAG_EVERY_S from this process: a crawler
        pushing a page's links every few milliseconds costs one flag a second per queue. A flag the
        redis-monitor put off (a small cold queue's, a failed spill's) is brought forward to now
        (``LT``): the queue may have grown past what put it off."""
        now = time.time()
        flagged = self._flagged
        if len(flagged) > 100_000:  # a long-lived process: forget the old ones
            self._flagged = flagged = {q: t for q, t in flagged.items() if now - t < FLAG_EVERY_S}
        for queue in plan.queues:
            if now - flagged.get(queue, 0.0) >= FLAG_EVERY_S:
                flagged[queue] = now
                first.zadd(self.keys.tail_spill_wanted(plan.shards[queue]), {queue: now}, lt=True)

    def queue_cluster_writes(self, plan: PushPlan, pipe: Any) -> None:
        """Queue on *pipe* the cluster-wide writes of *plan* (crawl records, crawl sets, expiry
        timers, wake-ups); on a Redis Cluster they follow :meth:`queue_shard_writes`' run."""
        keys = self.keys
        now = int(time.time())
        crawls, budgets, option_sets, recrawls = plan.crawls, plan.budgets, plan.option_sets, plan.recrawls
        sharded = keys.shards > 1
        apps: dict[tuple[str, str], set[str]] = {}
        refs = []
        for (spider, appid, crawlid), expires in crawls.items():
            ref = keys.crawl_ref(spider, appid, crawlid)
            refs.append(ref)
            apps.setdefault((spider, appid), set()).add(crawlid)
            record = keys.crawl(spider, appid, crawlid)
            fields: dict[str, str | int | bytes] = {
                "appid": appid,
                "crawlid": crawlid,
                "spiderid": spider,
                "last_activity": now,
            }
            if not sharded:  # one shard: its part of the record is the record
                for options in option_sets[(spider, appid, crawlid, 0)].values():
                    fields[options.field] = options.json
            pipe.hset(record, mapping=fields)
            pipe.hsetnx(record, "started", now)
            pipe.hdel(record, "ended", "ended_as")  # work again: active, not finished
            if expires:
                pipe.hset(record, "expires", expires)
                pipe.zadd(keys.expiries(), {ref: expires})
            if (spider, appid, crawlid) in budgets:
                pipe.hset(record, "max_pages", budgets[(spider, appid, crawlid)])
            if (spider, appid, crawlid) in recrawls:
                pipe.hset(record, mapping={"recrawl": recrawls[(spider, appid, crawlid)], "recurring": 1})
            pipe.expire(record, self.record_ttl_s)
        for (spider, appid), crawlids in apps.items():
            pipe.sadd(keys.app_crawls(spider, appid), *crawlids)
        pipe.sadd(keys.active_crawls(), *refs)
        pipe.zrem(keys.finished_crawls(), *refs)
        lanes: dict[tuple[str, bool], set[int]] = {}
        for spider, render, shard in plan.spider_domains:
            lanes.setdefault((spider, render), set()).add(shard)
        for (spider, render), shards_there in lanes.items():  # a cluster pipeline has no .publish
            pipe.execute_command("PUBLISH", keys.wake_channel(spider, render), wake_message(shards_there))
