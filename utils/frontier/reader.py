"""The redis-monitor's side of the frontier: crawl state for ``info``, purge for ``stop``, the
completion scan, expiry timers, queue backlog per spider (``utils/backends/lua/crawl_*.lua``,
``complete_scan.lua``, ``expire_due.lua``, ``spider_backlog.lua``).

Notifications (complete, expire) are appended to the control stream by the same script that changes
the state (utils/state/control.py), so the redis-monitor emits each exactly once across monitors and loses
none when it crashes before Kafka acknowledged it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import is_cluster, keys_from_settings, write_pipeline
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.backends.scripts import scripts
from crawlhive.utils.frontier.model import FETCH_COUNTS, decode_priority, text
from crawlhive.utils.frontier.recrawl import RECORD_FIELD, RECURRING_FIELD, Schedule
from crawlhive.utils.frontier.tails import TailStore, parse_tail_member

if TYPE_CHECKING:
    from crawlhive.utils.backends.redis_types import RedisPipeline
    from crawlhive.utils.config.settings import Settings


logger = logging.getLogger(__name__)

#: Seconds between two reads of an active crawl's shards by the completion check on a Redis
#: Cluster (where a crawl's 64 shards cost 256 reads; on one Redis a script reads them).
CLUSTER_RECHECK_S = 1.0

#: The counters of a shard's ``tail_stats`` that :meth:`FrontierReader.tail_totals` sums.
TAIL_TOTALS = ("requests", "segments", "bytes", "waiting", "spilled", "refilled")

#: Crawls one ``crawls_backlog.lua`` call reads (bounds how long one call holds Redis).
CRAWLS_PER_READ = 50


@dataclass(frozen=True, slots=True)
class DomainBacklog:
    """Queued requests of one crawl in one domain (the per-domain entry of docs/contract.md §4.1)."""

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
    max_pages: int = 0
    """The crawl's page budget from its request (``max_pages``, §10.7); 0 = none."""
    lanes: frozenset[bool] = frozenset()
    """The frontier lanes the crawl has queued requests in: False plain, True rendering (§15)."""

    @property
    def pending(self) -> int:
        return sum(d.total for d in self.domains.values())


class FrontierReader:
    """The redis-monitor's side of the frontier: crawl state for ``info``, purge for ``stop``."""

    #: RECRAWL_STATE_BUCKETS (what :meth:`purge` deletes of a crawl's schedule; set by from_settings)
    recrawl_buckets = 32768

    def __init__(self, redis: RedisClient, keys: Keys, record_ttl_s: float) -> None:
        self.redis = redis
        self.keys = keys
        self.record_ttl_s = int(record_ttl_s)
        self.scripts = scripts(redis)
        # on a Redis Cluster: per active crawl, its push generation and when it was last seen, and
        # when its shards were last read (_scan_complete_cluster)
        self._seen: dict[str, tuple[object, float]] = {}
        self._checked: dict[str, float] = {}
        #: FRONTIER_TAIL_URL's store: :meth:`purge` deletes the segments of what it purged.
        self.tail_store: TailStore | None = None

    @classmethod
    def from_settings(cls, redis: RedisClient, settings: Settings) -> Self:
        reader = cls(redis, keys_from_settings(settings), settings.CRAWL_RECORD_TTL)
        reader.recrawl_buckets = settings.RECRAWL_STATE_BUCKETS
        reader.tail_store = TailStore.from_settings(settings)
        return reader

    def crawl_state(self, spider: str, appid: str, crawlid: str) -> CrawlState:
        """The state of one crawl; zeros and no domains for an unknown one (see :meth:`crawl_states`)."""
        return self.crawl_states(spider, appid, [crawlid])[0]

    def crawl_states(self, spider: str, appid: str, crawlids: list[str]) -> list[CrawlState]:
        """:meth:`crawl_state` of several crawls of one appid, in one pipeline (one round trip).

        Per shard one script call (``crawls_backlog.lua``) reads, for up to CRAWLS_PER_READ crawls,
        per domain with queued requests the ``ZCARD`` and the first and last score of its queue
        inside Redis (O(domains), never O(backlog)), and with shards each crawl's counters in that
        shard; then one ``HGETALL`` per crawl record. On a Redis Cluster (64 shards) 500 crawls cost
        640 script calls and 500 reads, not a script call per crawl, lane and shard (96,500
        commands, which took /crawls past 30 s).
        """
        keys = self.keys
        sharded = keys.shards > 1
        members = [keys.crawl_member(appid, crawlid) for crawlid in crawlids]
        chunks = [range(i, min(i + CRAWLS_PER_READ, len(crawlids))) for i in range(0, len(crawlids), CRAWLS_PER_READ)]

        def build() -> RedisPipeline:
            pipe = self.redis.pipeline(transaction=False)
            for shard in range(keys.shards):
                plain_prefixes = keys.script_prefixes(spider, False, shard)
                render_prefixes = keys.script_prefixes(spider, True, shard)
                plain, render = plain_prefixes["crawl_queue"], render_prefixes["crawl_queue"]
                tails = [plain_prefixes["tail_queue"], render_prefixes["tail_queue"]]
                for chunk in chunks:
                    script_keys = []
                    for i in chunk:
                        script_keys += [
                            keys.crawl_domains(spider, appid, crawlids[i], False, shard),
                            keys.crawl_domains(spider, appid, crawlids[i], True, shard),
                        ]
                        if sharded:
                            script_keys.append(keys.crawl_shard(spider, appid, crawlids[i], shard))
                    args = [plain, render, "1" if sharded else "0", *tails, *(members[i] for i in chunk)]
                    self.scripts.queue(pipe, "crawls_backlog", script_keys, args)
            for crawlid in crawlids:
                pipe.hgetall(keys.crawl(spider, appid, crawlid))
            return pipe

        replies = self.scripts.execute(build) if crawlids else []
        per_shard = [
            [part for reply in replies[s * len(chunks) : (s + 1) * len(chunks)] for part in reply]
            for s in range(keys.shards)
        ]
        records = replies[keys.shards * len(chunks) :]
        states = []
        for i, crawlid in enumerate(crawlids):
            backlog: dict[str, DomainBacklog] = {}
            lanes: set[bool] = set()
            counters = [0, 0, 0]
            for shard_parts in per_shard:
                plain_flat, render_flat, shard_counters = shard_parts[i]
                for render, flat in ((False, plain_flat), (True, render_flat)):
                    if flat:
                        lanes.add(render)
                    for j in range(0, len(flat), 4):
                        domain, queued = text(flat[j]), int(flat[j + 1])
                        high, low = decode_priority(float(flat[j + 2])), decode_priority(float(flat[j + 3]))
                        seen = backlog.get(domain)
                        if seen is not None:
                            queued = queued + seen.total
                            high, low = max(high, seen.high_priority), min(low, seen.low_priority)
                        backlog[domain] = DomainBacklog(queued, high, low)
                for j, value in enumerate(shard_counters):
                    counters[j] += int(value or 0)
            record = {text(k): text(v) for k, v in records[i].items()}
            if sharded:  # the counters live in the shards' parts
                record.update(inflight=str(counters[0]), crawled=str(counters[1]), failed=str(counters[2]))
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
                    max_pages=int(record.get("max_pages", 0)),
                    lanes=frozenset(lanes),
                )
            )
        return states

    def admitted(self, crawls: list[tuple[str, str, str]]) -> list[int]:
        """Requests each of *crawls* admitted so far, what its page budget counts (§10.7): the
        entries of its dupefilters and their Bloom filters (every shard's), or on a Redis Cluster
        the counter its admits keep in its record (while it has a budget); one round trip."""
        keys = self.keys
        cluster = is_cluster(self.redis)
        pipe = self.redis.pipeline(transaction=False)
        for spider, appid, crawlid in crawls:
            if cluster:
                pipe.hget(keys.crawl(spider, appid, crawlid), "admitted")
            else:
                for shard in range(keys.shards):
                    pipe.hlen(keys.dupefilter(spider, appid, crawlid, shard))
                    pipe.hget(keys.dupefilter_bloom(spider, appid, crawlid, shard), "count")
        replies = pipe.execute() if crawls else []
        if cluster:
            return [max(0, int(reply or 0)) for reply in replies]
        per = 2 * keys.shards
        return [sum(int(n or 0) for n in replies[i * per : (i + 1) * per]) for i in range(len(crawls))]

    def bloom_hits(self, spider: str, appid: str, crawlid: str) -> int | None:
        """Links of a crawl its Bloom seen-set answered "seen" for (DUPEFILTER_BLOOM_ABOVE, §3.8),
        every shard's; about 0.1 % of them were new URLs dropped. None while the crawl has no
        Bloom filter (its seen-set is all in its dupefilters)."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(self.keys.shards):
            pipe.hget(self.keys.dupefilter_bloom(spider, appid, crawlid, shard), "hits")
        hits = [int(h) for h in pipe.execute() if h is not None]
        return sum(hits) if hits else None

    def near_duplicates(self, spider: str, appid: str, crawlid: str) -> int | None:
        """Records of a crawl the cleaners found near-duplicates of earlier ones (docs/contract.md
        §26.1, the crawl record's ``near_duplicates``); None when none was found."""
        value = self.redis.hget(self.keys.crawl(spider, appid, crawlid), "near_duplicates")
        return None if value is None else int(value)

    def fetch_counts(self, crawls: list[tuple[str, str, str]]) -> list[dict[str, int] | None]:
        """How each of *crawls* (``(spider, appid, crawlid)``) had its pages fetched (docs/contract.md
        §25.7, ``Keys.crawl_fetch``): pages per rung (``plain``, ``impersonate``, ``render``) and
        ``climbs``, every one present; None for a crawl no crawler counted a page of. One round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for spider, appid, crawlid in crawls:
            pipe.hgetall(self.keys.crawl_fetch(spider, appid, crawlid))
        out: list[dict[str, int] | None] = []
        for reply in pipe.execute() if crawls else []:
            counted = {text(k): int(v) for k, v in reply.items()}
            out.append({what: counted.get(what, 0) for what in FETCH_COUNTS} if counted else None)
        return out

    def app_crawlids(self, spider: str, appid: str) -> list[str]:
        """Crawl ids of *appid* that have (or recently had) queued or in-flight work."""
        return sorted(text(c) for c in self.redis.smembers(self.keys.app_crawls(spider, appid)))

    def purge(self, spider: str, appid: str, crawlid: str, ended_as: str = "stopped") -> int:
        """Stop one crawl atomically (docs/contract.md §3.9): delete its queued requests in every domain,
        cancel its leases, disarm its expiry timer and blacklist it for CRAWL_RECORD_TTL. The
        blacklist marker holds when the stop took effect (epoch ms): the kafka-monitor queues no
        seed whose Kafka record is older, one sent before the stop but read after it (§3.9).

        Returns:
            The number of queued requests removed (``total_purged`` / ``total_expired``).
        """
        keys = self.keys
        member = keys.crawl_member(appid, crawlid)
        ref = keys.crawl_ref(spider, appid, crawlid)
        # the schedule first (§19.6): a release can then put nothing more in the queues purged below
        schedule = Schedule(self.redis, keys, self.recrawl_buckets, self.record_ttl_s)
        scheduled = schedule.purge(spider, appid, crawlid)
        schedule.forget(spider, appid, crawlid)  # its pages leave its appid's count (§19.1)

        sharded = keys.shards > 1
        stopped_at_ms = int(time.time() * 1000)  # the markers' value: seeds sent before it stay out

        def build() -> RedisPipeline:  # one MULTI (on a cluster, a pipeline): each shard's queues, leases, marker
            pipe = write_pipeline(self.redis)
            for shard in range(keys.shards):
                part = keys.crawl_shard(spider, appid, crawlid, shard)
                prefixes = keys.script_prefixes(spider, shard=shard)
                render_prefixes = keys.script_prefixes(spider, render=True, shard=shard)
                self.scripts.queue(
                    pipe,
                    "crawl_purge",
                    [
                        keys.crawl_domains(spider, appid, crawlid, shard=shard),
                        keys.crawl_leases(spider, appid, crawlid, shard),
                        keys.leases(spider, shard),
                        part,
                        part if sharded else keys.expiries(),  # with shards: disarmed below
                        keys.crawl_stopped(spider, appid, crawlid, shard),
                        keys.crawl_domains(spider, appid, crawlid, render=True, shard=shard),
                        keys.tail_stats(shard),
                        keys.tail_segments_base(shard),
                    ],
                    [
                        prefixes["crawl_queue"] + member + ":",
                        prefixes["domain_crawls"],
                        member,
                        "" if sharded else ref,
                        self.record_ttl_s,
                        ended_as,
                        render_prefixes["crawl_queue"] + member + ":",
                        render_prefixes["domain_crawls"],
                        stopped_at_ms,
                        prefixes["tail_queue"] + member + ":",
                        render_prefixes["tail_queue"] + member + ":",
                    ],
                )
            return pipe

        replies = self.scripts.execute(build)
        purged = sum(int(reply[0]) for reply in replies) + scheduled
        self._delete_segments({shard: list(reply[1:]) for shard, reply in enumerate(replies) if len(reply) > 1})
        self.redis.hdel(keys.crawl(spider, appid, crawlid), RECORD_FIELD, RECURRING_FIELD, "schedule_stopped")
        if sharded:  # the record itself and the expiry timer (the shards' scripts ended their parts)
            record = keys.crawl(spider, appid, crawlid)
            pipe = self.redis.pipeline(transaction=True)  # one slot: the cluster-wide keys
            pipe.zrem(keys.expiries(), ref)
            if self.redis.exists(record):
                pipe.hset(record, "inflight", 0)
                pipe.hsetnx(record, "ended_as", ended_as)  # a crawl that had ended keeps how
                pipe.hdel(record, "expires")
            pipe.execute()
        return purged

    def tail_totals(self) -> dict[str, int]:
        """The queue tails' counters summed over every shard (docs/contract.md §23): ``requests``
        and ``segments`` in the store now, ``bytes`` they take, ``waiting`` (requests a failed
        spill left in Redis), lifetime ``spilled`` and ``refilled``; zeros without tails."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(self.keys.shards):
            pipe.hmget(self.keys.tail_stats(shard), *TAIL_TOTALS)
        totals = dict.fromkeys(TAIL_TOTALS, 0)
        for values in pipe.execute():
            for name, value in zip(TAIL_TOTALS, values, strict=True):
                totals[name] += int(value or 0)
        return totals

    def _delete_segments(self, segments: dict[int, list[Any]]) -> None:
        """Delete from the tail store the segments a purge took out of Redis (shard -> tail members).
        Without FRONTIER_TAIL_URL here they are left (logged): no pointer names them any more."""
        if not segments:
            return
        if self.tail_store is None:
            logger.warning(
                "a purge dropped %d tail segments, but FRONTIER_TAIL_URL is not set here: "
                "their objects stay in the store",
                sum(len(m) for m in segments.values()),
            )
            return
        paths = []
        for shard, members in segments.items():
            for member in members:
                try:
                    paths.append(self.tail_store.path(shard, parse_tail_member(member)[0]))
                except ValueError:
                    continue
        self.tail_store.delete(paths)

    def scan_complete(self, cursor: int = 0, count: int = 500) -> tuple[int, int]:
        """Check up to about *count* crawls of ``keys.active_crawls()`` from *cursor* (``SSCAN``):
        each that has nothing queued, no lease and no in-flight count leaves the active set and its
        appid's ``app_crawls``, and a ``complete`` entry (spiderid, appid, crawlid, total_crawled,
        total_failed) is appended to the control stream, in one script, so with several callers each
        completion is reported once. A later push makes the crawl active again.

        Returns:
            ``(next cursor, crawls found complete)``; cursor 0 means the pass is over.
        """
        if is_cluster(self.redis):
            return self._scan_complete_cluster(cursor, count)
        prefixes = self.keys.crawl_ref_prefixes()
        args: list[Any] = [cursor, count, prefixes["crawl"], prefixes["app_crawls"], self.record_ttl_s]
        for shard in range(self.keys.shards):
            p = self.keys.crawl_ref_prefixes(shard)
            args += [p["crawl_domains"], p["render_crawl_domains"], p["crawl_leases"], p["crawl_shard"]]
        cursor_out, found = self.scripts["complete_scan"](
            keys=[self.keys.active_crawls(), self.keys.control_stream(), self.keys.finished_crawls()], args=args
        )
        return int(cursor_out), int(found)

    def _scan_complete_cluster(self, cursor: int, count: int) -> tuple[int, int]:
        """:meth:`scan_complete` on a Redis Cluster, where one script cannot read every shard.

        For each active crawl: read its push generation (``gen``, bumped by every push together
        with its shard writes, before the pushing crawler acks its page), then read every shard's
        queues, leases and counters twice, one pipelined round trip per read (per node in
        parallel), and declare it complete only if both reads found every shard idle and the
        generation did not move (``complete_declare.lua``, in the cluster-wide slot). Work only
        moves between shards by a push followed by the ack of the page that found it, so the second
        read sees whatever the first missed, unless a push happened since the first read of the
        generation, which the declare refuses (a double collect: a consistent snapshot without a
        lock). Costs 2 x 4 reads per shard of each idle-looking crawl; busy crawls 4 per shard.
        So a crawl is read when this reader first sees it, then only when its generation did not
        move since the previous pass (a crawl that keeps pushing is not done), at most every
        CLUSTER_RECHECK_S.
        """
        keys = self.keys
        cursor_out, raw_refs = self.redis.sscan(keys.active_crawls(), cursor, count=count)
        refs: list[str] = [text(r) for r in raw_refs]
        if not refs:
            return int(cursor_out), 0
        pipe = self.redis.pipeline(transaction=False)
        prefixes = keys.crawl_ref_prefixes()
        for ref in refs:
            pipe.hget(prefixes["crawl"] + ref, "gen")
        generations = pipe.execute()
        now = time.monotonic()
        idle = {}
        for ref, gen in zip(refs, generations, strict=True):
            seen = self._seen.get(ref)
            self._seen[ref] = (gen, now)
            if seen is None or (seen[0] == gen and now - self._checked.get(ref, 0.0) >= CLUSTER_RECHECK_S):
                idle[ref] = gen
                self._checked[ref] = now
        if int(cursor_out) == 0:  # a pass is over: forget crawls no longer active
            self._forget(set(refs))
        totals: dict[str, tuple[int, int]] = {}
        for _ in range(2):
            if not idle:
                break
            totals = self._idle_totals(list(idle))
            idle = {ref: gen for ref, gen in idle.items() if ref in totals}
        found = 0
        for ref, gen in idle.items():
            crawled, failed = totals[ref]
            found += int(
                self.scripts["complete_declare"](
                    keys=[keys.active_crawls(), keys.control_stream(), keys.finished_crawls(), prefixes["crawl"] + ref],
                    args=[
                        ref,
                        text(gen) if gen is not None else "",
                        crawled,
                        failed,
                        prefixes["crawl"],
                        prefixes["app_crawls"],
                        self.record_ttl_s,
                    ],
                )
            )
        return int(cursor_out), found

    def _forget(self, last: set[str]) -> None:
        """Drop what :meth:`_scan_complete_cluster` remembers of crawls not seen in the pass that
        just ended (*last*: the refs of its final chunk; the others were seen before it)."""
        horizon = time.monotonic() - 60 * CLUSTER_RECHECK_S
        for ref in [r for r, (_, at) in self._seen.items() if r not in last and at < horizon]:
            self._seen.pop(ref, None)
            self._checked.pop(ref, None)

    def _idle_totals(self, refs: list[str]) -> dict[str, tuple[int, int]]:
        """Of the crawls *refs*, those with nothing queued, leased or in flight in any shard, with
        their ``(crawled, failed)`` summed over the shards (one pipelined round trip)."""
        pipe = self.redis.pipeline(transaction=False)
        shard_prefixes = [self.keys.crawl_ref_prefixes(shard) for shard in range(self.keys.shards)]
        for ref in refs:
            for p in shard_prefixes:
                pipe.scard(p["crawl_domains"] + ref)
                pipe.scard(p["render_crawl_domains"] + ref)
                pipe.scard(p["crawl_leases"] + ref)
                pipe.hmget(p["crawl_shard"] + ref, "inflight", "crawled", "failed")
        replies = iter(pipe.execute())
        out: dict[str, tuple[int, int]] = {}
        for ref in refs:
            busy, crawled, failed = False, 0, 0
            for _ in shard_prefixes:
                queued, render_queued, leased, (inflight, done, lost) = (next(replies) for _ in range(4))
                busy = busy or bool(queued or render_queued or leased or int(inflight or 0) > 0)
                crawled += int(done or 0)
                failed += int(lost or 0)
            if not busy:
                out[ref] = (crawled, failed)
        return out

    def fire_expiries(self, limit: int = 1000) -> int:
        """Fire the expiry timers (``keys.expiries()``) whose time has passed on the Redis clock:
        each is removed from the set and an ``expire`` entry (spiderid, appid, crawlid, expires) is
        appended to the control stream, in one script (exactly one caller fires each).

        Returns:
            The number of timers fired (at most *limit*).
        """
        return int(self.scripts["expire_due"](keys=[self.keys.expiries(), self.keys.control_stream()], args=[limit]))

    def spider_backlog(self, spider: str, render: bool = False) -> dict[str, int]:
        """Queued requests per domain of *spider* in one lane (the rendering one if *render*;
        domains with none left out), in one script that sums the ``ZCARD`` of each domain's crawl
        queues: O(domains x crawls), not O(backlog)."""

        def build() -> RedisPipeline:  # one round trip for every shard
            pipe = self.redis.pipeline(transaction=False)
            for shard in range(self.keys.shards):
                prefixes = self.keys.script_prefixes(spider, render, shard)
                self.scripts.queue(
                    pipe,
                    "spider_backlog",
                    [self.keys.domains(spider, render, shard)],
                    [prefixes["domain_crawls"], prefixes["crawl_queue"], prefixes["tail_queue"]],
                )
            return pipe

        backlog: dict[str, int] = {}
        for reply in self.scripts.execute(build):
            backlog.update((text(reply[i]), int(reply[i + 1])) for i in range(0, len(reply), 2))
        return backlog

    def active_refs(self) -> list[tuple[str, str, str]]:
        """``(spider, appid, crawlid)`` of every crawl in ``keys.active_crawls()`` (``SSCAN``, no
        ``KEYS``; malformed members left out)."""
        refs = []
        for ref in self.redis.sscan_iter(self.keys.active_crawls(), count=1000):
            try:
                refs.append(self.keys.parse_crawl_ref(text(ref)))
            except ValueError:
                continue
        return refs

    def queued_lanes(self, crawls: list[tuple[str, str, str]]) -> list[frozenset[bool]]:
        """For each crawl ``(spider, appid, crawlid)``, the frontier lanes it has requests queued
        in (False plain, True rendering; :attr:`CrawlState.lanes` without reading the queues): one
        pipelined round trip of ``SCARD`` (two per shard and crawl)."""
        if not crawls:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for spider, appid, crawlid in crawls:
            for shard in range(self.keys.shards):
                for render in (False, True):
                    pipe.scard(self.keys.crawl_domains(spider, appid, crawlid, render, shard))
        replies = pipe.execute()
        per_crawl = 2 * self.keys.shards
        return [
            frozenset(j % 2 == 1 for j, count in enumerate(replies[i * per_crawl : (i + 1) * per_crawl]) if int(count))
            for i in range(len(crawls))
        ]

    def active_spiders(self) -> set[str]:
        """Spider types of the crawls in ``keys.active_crawls()`` (``SSCAN``, no ``KEYS``).

        A request is queued or leased only while its crawl is active, so these are the only spider
        types whose ``leases`` and ``domains`` keys can hold anything.
        """
        spiders = set()
        for ref in self.redis.sscan_iter(self.keys.active_crawls(), count=1000):
            try:
                spiders.add(self.keys.parse_crawl_ref(text(ref))[0])
            except ValueError:
                continue
        return spiders
