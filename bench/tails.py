"""Benchmark: two-tier crawl queues (docs/contract.md §23): Redis memory per queued URL with the
queues' tails in FRONTIER_TAIL_URL, and the rate of spills and refills.

**Memory per queued URL.** Three shapes of backlog (the targets of issue 46), each pushed the way
a kafka-monitor or a crawler does (:meth:`crawlhive.utils.frontier.Frontier.push` with
FRONTIER_TAIL_URL set, batches of 2,000 followed links of ``--url-length`` characters, one crawl,
each domain's links spread over the whole run), with the redis-monitors' mover
(:class:`~crawlhive.utils.frontier.tail_mover.TailMover` on a local folder) settled after every
``--settle-every`` requests and at the end (``run_once`` over every shard until it does nothing):

* 20,000 queued on one host (target: at most 64 bytes per URL);
* ``--tail-queued`` over ``--tail-queued`` / 1,000 domains, 1,000 each (target 8, Bloom seen-set on);
* ``--tail-queued`` over ``--tail-queued`` / 10 domains, 10 each (target 64).

Queue memory is the growth of ``INFO memory`` ``used_memory`` less the clients' buffers (summed
over a Redis Cluster's primaries) from before the first push to after the settle: everything the pushes and the mover
left (heads, tail pointers, per-domain and per-crawl indexes, crawl records, flags, stats). The
dupefilter the real admit path writes for the same URLs is then added and measured the same way,
in three forms: every fingerprint in the crawl's dupefilter hashes (``HSETNX`` of the stored
fingerprint and a 4-byte owner, as bench/memory.py's "dedupe entry"), and with the Bloom seen-set
(DUPEFILTER_BLOOM_ABOVE = ``--bloom-after``, cluster-wide: each shard's share in the hash, the rest in the
filter, built bit for bit as ``lib/bloom.lua`` writes it, checked against ``BloomLayers``), scalable
(as without FRONTIER_TAIL_URL) and compacted (its fingerprints also in its log, as the logging
admits leave it, then the redis-monitors' :class:`BloomCompactor` run until idle: the log sealed
into the store, the filter rebuilt as one base), each with the filters' own bytes per fingerprint
in them (target at most 2). A
``MEMORY USAGE`` sum per kind of key (SCAN of the prefix) says what dominates. Beside it: the
store's bytes per URL (the segment files' sizes over the requests in them; goal at most 40).

With ``--tail-queued`` below 10,000,000, FRONTIER_HOT_DOMAINS is scaled by the same factor (the
domains keeping a head stay a tenth of the 1,000-each backlog's, as at 10M with the default 1,000).

**Spill and refill rate.** ``--rate-requests`` (200,000) pushed into 4 domains of one crawl, the
settle timed (spills: segments written and fsynced on a local folder), then every segment
refilled by the mover (each head emptied between refills, as pops would: not timed); requests per
second of the mover's wall time and per second of Redis CPU (``used_cpu_user + used_cpu_sys``),
medians of ``--repeats`` runs. Goal: at least 20,000/s per Redis primary.

Usage: ``.venv/bin/python bench/tails.py [--tail-queued N] [--cluster] [--redis-url URL]
[--bloom-after T] [--settle-every S] [--rate-requests R] [--repeats K] [--only memory|rate]``.
Without ``--redis-url`` a private redis-server is started (``--cluster``: a private 3-primary Redis
Cluster, 64 frontier shards); the segments go to a temporary folder, removed afterwards.
"""

from __future__ import annotations

import argparse
import copy
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import memory  # noqa: E402  (bench/memory.py)
from benchkit import bench_redis, clear_prefix, prefixed_redis  # noqa: E402  (bench/benchkit.py)
from memory import CRAWL_DEFAULTS, FILTER_TTL_MS, link_url  # noqa: E402
from redis.cluster import RedisCluster  # noqa: E402
from scrapy import Request  # noqa: E402

from crawlhive.crawler.admit import stored_fingerprint  # noqa: E402
from crawlhive.crawler.requests import child_request, url_fingerprint  # noqa: E402
from crawlhive.utils.backends.keys import Keys  # noqa: E402
from crawlhive.utils.backends.redis_clients import is_cluster, write_pipeline  # noqa: E402
from crawlhive.utils.backends.redis_types import RedisClient  # noqa: E402
from crawlhive.utils.config.settings import Settings  # noqa: E402
from crawlhive.utils.frontier import Frontier, FrontierRequest, OptionSet, seed_from_request  # noqa: E402
from crawlhive.utils.frontier.bloom import (  # noqa: E402
    FIRST_K,
    MAX_LAYERS,
    BloomLayers,
    capacity,
    first_exp,
    layer_bits,
)
from crawlhive.utils.frontier.bloom_compactor import BloomCompactor  # noqa: E402
from crawlhive.utils.frontier.tail_mover import TailMover  # noqa: E402

PREFIX = "benchtail"
SPIDER, APPID, CRAWLID = "link", "benchapp", "tails"
BATCH = 2000
URL_LENGTH = 85
#: The issue's scale: FRONTIER_HOT_DOMAINS is scaled by --tail-queued / this.
FULL_SCALE = 10_000_000
LINKS_PER_PAGE = 20


@dataclass(frozen=True)
class Case:
    """One backlog shape: *queued* requests over *domains* domains, and its target (bytes per URL)."""

    label: str
    queued: int
    domains: int
    target: int
    bloom_after: int
    """DUPEFILTER_BLOOM_ABOVE of the Bloom form (``--bloom-after`` when given)."""


def cases(queued: int, bloom_after: int | None) -> list[Case]:
    """The three backlogs; the Bloom form's threshold is 10,000 for the small one and a hundredth of
    the backlog (at least 10,000) for the large ones (docs/operations.md's advice for crawls this
    large: fewer Bloom layers), unless *bloom_after* is given."""
    large = bloom_after or max(10_000, queued // 100)
    return [
        Case("20,000 on one host", 20_000, 1, 64, bloom_after or 10_000),
        Case(f"{queued:,} over {queued // 1000:,} domains (1,000 each)", queued, max(1, queued // 1000), 8, large),
        Case(f"{queued:,} over {queued // 10:,} domains (10 each)", queued, max(1, queued // 10), 64, large),
    ]


# --- the requests ------------------------------------------------------------------------------


def _seed() -> FrontierRequest:
    message = {**CRAWL_DEFAULTS, "url": "http://www.site0000.com/", "appid": APPID, "crawlid": CRAWLID}
    message["maxdepth"] = 2
    return seed_from_request(message, origin="bench.tails/0/0@1714563600000")


def _link(seed: FrontierRequest, domain: int, i: int) -> FrontierRequest:
    return child_request(seed, Request(link_url(domain, i)), spider=None)  # type: ignore[arg-type]


def links(count: int, domains: int) -> Iterator[FrontierRequest]:
    """*count* followed links, round-robin over *domains* domains (``site<d>.com``): copies of one
    ``child_request`` with the URL and domain replaced (what ``child_request`` would make, checked
    on a sample; building each through Scrapy would cost 8x the time)."""
    seed = _seed()
    template = _link(seed, 0, 0)
    template.option_set = OptionSet.of(template)
    for check in (1, 7, count - 1):
        made = _link(seed, check % domains, check)
        made.option_set = template.option_set
        assert made == _copy(template, check % domains, check), "links differ from child_request's"
    for i in range(count):
        yield _copy(template, i % domains, i)


def _copy(template: FrontierRequest, domain: int, i: int) -> FrontierRequest:
    request = copy.copy(template)
    request.url = link_url(domain, i)
    request.domain = f"site{domain:04d}.com"
    return request


# --- filling and settling ------------------------------------------------------------------------


def settle(mover: TailMover) -> int:
    """Run the mover over every shard until a pass does nothing; returns the passes."""
    passes = 0
    while sum(mover.run_once(shard) for shard in range(mover.keys.shards)):
        passes += 1
    return passes


def settle_deferred(mover: TailMover) -> float:
    """Wait for the flags the mover deferred (a small cold queue spills COLD_WAIT_S after its first
    flag, as a running redis-monitor would then) and settle again; returns the seconds waited."""
    waited = 0.0
    while True:
        due: list[float] = []
        for shard in range(mover.keys.shards):
            last: list[Any] = mover.redis.zrange(mover.keys.tail_spill_wanted(shard), -1, -1, withscores=True)
            due += [float(score) for _member, score in last]
        if not due:
            return waited
        pause = max(due) - time.time()
        if pause > 0:
            time.sleep(pause + 0.1)
            waited += pause + 0.1
        if not settle(mover) and pause <= 0:
            return waited


def push_settled(
    client: RedisClient, settings: Settings, mover: TailMover, requests: Iterator[FrontierRequest], settle_every: int
) -> tuple[int, float]:
    """Push *requests* in batches, settling the mover after every *settle_every* and at the end;
    returns the requests pushed and the seconds spent settling."""
    frontier = Frontier.from_settings(client, settings)
    pushed = 0
    settling = 0.0
    batch: list[FrontierRequest] = []

    def flush() -> None:
        pipe = write_pipeline(client)
        frontier.push(batch, pipe)
        pipe.execute()
        batch.clear()

    for request in requests:
        batch.append(request)
        pushed += 1
        if len(batch) == BATCH:
            flush()
        if settle_every and pushed % settle_every == 0:
            if batch:
                flush()
            started = time.perf_counter()
            settle(mover)
            settling += time.perf_counter() - started
            frontier = Frontier.from_settings(client, settings)  # a fresh process: flags each queue again
    if batch:
        flush()
    started = time.perf_counter()
    settle(mover)
    waited = settle_deferred(mover)
    return pushed, settling + time.perf_counter() - started - waited


def store_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*.seg"))


# --- the dupefilter the admits write ---------------------------------------------------------------


def bloom_bits(fingerprints: list[bytes], threshold: int) -> BloomLayers:
    """The Bloom filter of *fingerprints* (stored, 12 bytes) continuing a dupefilter of *threshold*
    entries, as ``BloomLayers.add`` (and ``lib/bloom.lua``) would build it one by one, vectorised."""
    exp = first_exp(threshold)
    words = np.frombuffer(b"".join(fingerprints), dtype=">u4").reshape(-1, 3).astype(np.uint64)
    layers: list[bytearray] = []
    start = 0
    while start < len(fingerprints) or not layers:
        layer = len(layers)
        bits = layer_bits(exp, layer)
        end = len(fingerprints) if layer == MAX_LAYERS - 1 else min(len(fingerprints), start + capacity(exp, layer))
        h1, h2, h3 = (words[start:end, w] for w in range(3))
        flags = np.zeros(bits, dtype=bool)
        for j in range(FIRST_K + layer):
            flags[(h1 + np.uint64(j) * h2 + np.uint64(j * j + layer) * h3) % np.uint64(bits)] = True
        layers.append(bytearray(np.packbits(flags).tobytes()))  # bit 0 is the first byte's top bit
        start = end
    return BloomLayers(exp, layers, len(fingerprints))


def check_bloom_twin() -> None:
    """The vectorised filter equals ``BloomLayers``' (a small threshold: several layers)."""
    sample = [stored_fingerprint(url_fingerprint(link_url(i % 7, i))) for i in range(5000)]
    twin = BloomLayers.for_threshold(300)
    for fp in sample:
        twin.add(fp)
    assert bloom_bits(sample, 300).layers == twin.layers, "vectorised Bloom filter differs from BloomLayers"


NEW_LAYER = "return redis.call('SET', KEYS[1], string.rep('\\0', tonumber(ARGV[1])), 'PX', ARGV[2])"


def write_dupefilter(client: RedisClient, keys: Keys, case: Case, bloom_after: int, compact: bool = False) -> None:
    """The crawl's dupefilter of *case*'s URLs as the admits leave it: per shard, the first
    fingerprints of its share of *bloom_after* (DUPEFILTER_BLOOM_ABOVE is cluster-wide: divided by
    the shards, rounded up; all when 0) in the hash, the rest in the shard's Bloom filter; with
    *compact*, also in the filter's log (the redis-monitors' compactor then rebuilds it: see
    :func:`compact_filters`)."""
    bloom_after = -(-bloom_after // keys.shards)
    in_hash: dict[int, int] = {}
    rest: dict[int, list[bytes]] = {}
    shards = [keys.shard_of(f"site{d:04d}.com") for d in range(case.domains)]
    pipe = client.pipeline(transaction=False)
    owner = b""
    for i in range(case.queued):
        d = i % case.domains
        fp = stored_fingerprint(url_fingerprint(link_url(d, i)))
        if i % LINKS_PER_PAGE == 0:  # the page that queued the next links
            owner = fp[:4]
        shard = shards[d]
        if bloom_after and in_hash.get(shard, 0) >= bloom_after:
            rest.setdefault(shard, []).append(fp)
            continue
        in_hash[shard] = in_hash.get(shard, 0) + 1
        pipe.hsetnx(keys.dupefilter(SPIDER, APPID, CRAWLID, shard), fp, owner)
        if len(pipe) >= 5000:
            pipe.execute()
    for shard in in_hash:
        pipe.pexpire(keys.dupefilter(SPIDER, APPID, CRAWLID, shard), FILTER_TTL_MS)
    pipe.execute()
    for shard, fps in rest.items():
        bloom = bloom_bits(fps, bloom_after)
        state = keys.dupefilter_bloom(SPIDER, APPID, CRAWLID, shard)
        fields: dict[str, int | str] = {"count": bloom.count, "hits": 0, "exp": bloom.exp, "layers": len(bloom.layers)}
        if compact:  # every fingerprint also in the filter's log, as the logging admits leave it
            fields |= {"log": "1", "next": max(10_000, capacity(bloom.exp, 0) // 2)}
            log = Keys.bloom_log_of(state)
            data = b"".join(fps)
            for first in range(0, len(data), 12 << 20):
                client.append(log, data[first : first + (12 << 20)])
            client.pexpire(log, FILTER_TTL_MS)
            client.zadd(keys.bloom_wanted(shard), {state: 0})  # the admit's flag: seal and compact
        client.hset(state, mapping=fields)  # type: ignore[arg-type]
        client.pexpire(state, FILTER_TTL_MS)
        for layer, bits in enumerate(bloom.layers):
            name = keys.dupefilter_bloom_layer(SPIDER, APPID, CRAWLID, layer, shard)
            # made as lib/bloom.lua makes a layer (a SET of its zero bytes from a script: allocated
            # at its exact size; a large SET from a client may keep its query buffer's slack), then
            # its bits written in place
            client.eval(NEW_LAYER, 1, name, len(bits), FILTER_TTL_MS)
            for first in range(0, len(bits), 1 << 20):
                client.setrange(name, first, bytes(bits[first : first + (1 << 20)]))


def compact_filters(client: RedisClient, settings: Settings) -> tuple[float, int]:
    """Run the redis-monitors' Bloom compactor (:class:`BloomCompactor`, on the bench's store)
    over every shard until it has nothing left to do: each filter's log sealed into the store and
    the filter rebuilt as one base. Returns its seconds and the filters it compacted."""
    compactor = BloomCompactor.from_settings(client, settings)
    assert compactor is not None
    started = time.perf_counter()
    while sum(compactor.run_once(shard) for shard in range(compactor.keys.shards)):
        pass
    return time.perf_counter() - started, compactor.counts.compacted


def bloom_fingerprints(client: RedisClient, keys: Keys) -> int:
    """Fingerprints in the crawl's Bloom filters (every shard's ``count``)."""
    return sum(
        int(client.hget(keys.dupefilter_bloom(SPIDER, APPID, CRAWLID, s), "count") or 0) for s in range(keys.shards)
    )


def delete_dupefilter(client: RedisClient, keys: Keys) -> None:
    for shard in range(keys.shards):
        state = keys.dupefilter_bloom(SPIDER, APPID, CRAWLID, shard)
        names = [keys.dupefilter(SPIDER, APPID, CRAWLID, shard), state, Keys.bloom_log_of(state)]
        names += [keys.dupefilter_bloom_layer(SPIDER, APPID, CRAWLID, layer, shard) for layer in range(MAX_LAYERS)]
        gen, sizes = client.hmget(state, "gen", "pieces")
        if gen and sizes:
            names += [Keys.bloom_piece_of(state, int(gen), i) for i in range(str(sizes).count(",") + 1)]
        for name in names:  # one key at a time: a cluster takes no more; UNLINK: a 10M-field hash freed
            client.unlink(name)  # in the background (a DEL blocks Redis past the client's timeout)
    wait_freed(client)


def wait_freed(client: RedisClient, timeout_s: float = 600.0) -> None:
    """Until Redis has freed what UNLINK handed to its background thread: the next form's memory
    is measured from a mark taken after it, or the freeing shows as negative growth."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if is_cluster(client):
            infos = list(client.info("memory", target_nodes=RedisCluster.PRIMARIES).values())
        else:
            infos = [client.info("memory")]
        if all(int(i.get("lazyfree_pending_objects", 0)) == 0 for i in infos):
            return
        time.sleep(0.2)
    raise SystemExit(f"Redis still freeing the dupefilter after {timeout_s:.0f} s")


# --- what the keys hold ------------------------------------------------------------------------------


KINDS = {
    "cq": "heads (crawl queues)",
    "tq": "tail pointers",
    "dq": "per-domain crawls (dq)",
    "domains": "domains index",
    "crawl-domains": "crawl's domains",
    "dupefilter": "dupefilter hash",
    "dupefilter-bloom": "Bloom filter",
    "tail-segments": "live segment index",
}


def kind_of(name: str, prefix: str) -> str:
    rest = name[len(prefix) + 1 :]
    if rest.startswith("{"):
        rest = rest.split("}:", 1)[1]
    return KINDS.get(rest.split(":", 1)[0], "other (records, flags, stats)")


def bytes_by_kind(client: RedisClient, prefix: str) -> dict[str, int]:
    """``MEMORY USAGE`` (every element: ``SAMPLES 0``) of the prefix's keys, summed per kind."""
    totals: dict[str, int] = {}
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in client.scan_iter(match=f"{prefix}:*", count=5000)]
    for first in range(0, len(names), 1000):
        chunk = names[first : first + 1000]
        if is_cluster(client):
            sizes = [client.memory_usage(n, samples=0) for n in chunk]
        else:
            pipe = client.pipeline(transaction=False)
            for n in chunk:
                pipe.memory_usage(n, samples=0)
            sizes = pipe.execute()
        for n, size in zip(chunk, sizes, strict=True):
            kind = kind_of(n, prefix)
            totals[kind] = totals.get(kind, 0) + int(size or 0)
    return totals


def used_memory(client: RedisClient) -> int:
    """``used_memory`` less the clients' buffers (``mem_clients_normal``, ``mem_clients_slaves``:
    a pipeline's or a large SET's query buffer is kept for seconds), summed over a Redis Cluster's
    primaries: what the data and the keyspace take."""
    if is_cluster(client):
        infos = list(client.info("memory", target_nodes=RedisCluster.PRIMARIES).values())
    else:
        infos = [client.info("memory")]
    return sum(int(i["used_memory"]) - int(i["mem_clients_normal"]) - int(i["mem_clients_slaves"]) for i in infos)


# --- the memory cases -------------------------------------------------------------------------------


def memory_case(url: str, case: Case, args: argparse.Namespace, hot: int, folder: Path) -> None:
    overrides = {
        "FRONTIER_TAIL_URL": str(folder),
        "FRONTIER_HOT_DOMAINS": hot,
        "FRONTIER_HEAD_SIZE": args.head_size,
        "FRONTIER_SEGMENT_SIZE": args.segment_size,
        "CRAWL_MAX_PAGES_DEFAULT": 0,
    }
    with prefixed_redis(url, PREFIX, **overrides) as (settings, client, keys):
        mover = TailMover.from_settings(client, settings)
        assert mover is not None
        mover.scripts.load()
        warm = Frontier.from_settings(client, settings)  # scripts and the sequence key exist before
        pipe = write_pipeline(client)
        warm.push(list(links(1, 1)), pipe)
        pipe.execute()
        clear_prefix(client, PREFIX)
        shutil.rmtree(folder, ignore_errors=True)
        before = used_memory(client)
        started = time.perf_counter()
        pushed, settling = push_settled(client, settings, mover, links(case.queued, case.domains), args.settle_every)
        elapsed = time.perf_counter() - started
        queues = used_memory(client) - before
        stats = [client.hgetall(keys.tail_stats(shard)) for shard in range(keys.shards)]
        in_tails = sum(int(s.get(b"requests", 0)) for s in stats)
        segments = sum(int(s.get(b"segments", 0)) for s in stats)
        on_disk = store_bytes(folder)
        kinds = bytes_by_kind(client, PREFIX)
        print(
            f"\n{case.label}: pushed {pushed:,} in {elapsed:,.0f} s (settling {settling:,.0f} s); "
            f"{in_tails:,} in {segments:,} segments, {pushed - in_tails:,} in Redis heads"
        )
        print(f"  queues (everything the pushes and the mover left)   {queues / pushed:8.2f} bytes/URL")
        kinds_bloom: dict[str, int] = {}
        for bloom_after, compact in ((0, False), (case.bloom_after, False), (case.bloom_after, True)):
            mark = used_memory(client)
            write_dupefilter(client, keys, case, bloom_after, compact)
            took = ""
            if compact:
                seconds, compacted = compact_filters(client, settings.copy_with(DUPEFILTER_BLOOM_ABOVE=bloom_after))
                took = f" (compacted {compacted} filters in {seconds:.1f} s)"
            grown = used_memory(client) - mark
            kinds = bytes_by_kind(client, PREFIX)
            # the growth of used_memory, or what MEMORY USAGE lists for the dupefilter's keys if more
            # (the allocator's own bookkeeping moves used_memory by a few MB either way over a pass
            # this long): the larger is the figure
            listed = kinds.get("dupefilter hash", 0) + kinds.get("Bloom filter", 0)
            dupe = max(grown, listed)
            total = (queues + dupe) / pushed
            verdict = "met" if total <= case.target else f"NOT MET by {total - case.target:.1f}"
            form = "scalable" if not compact else "compacted"
            where = "dupefilter hash" if not bloom_after else f"Bloom after {bloom_after:,}, {form}"
            print(
                f"  + dupefilter ({where:<38})  {dupe / pushed:8.2f} bytes/URL -> total {total:6.2f} "
                f"(target <= {case.target}: {verdict}){took}; used_memory grew {grown / pushed:.2f}, "
                f"its keys' MEMORY USAGE {listed / pushed:.2f}"
            )
            if bloom_after:
                in_filters = bloom_fingerprints(client, keys)
                own = kinds.get("Bloom filter", 0) / max(1, in_filters)
                goal = "met" if own <= 2.0 else "NOT MET"
                print(
                    f"    the Bloom filters' own: {own:.2f} bytes per fingerprint in them ({in_filters:,}; "
                    f"target <= 2: {goal})"
                )
                if compact:
                    kinds_bloom = kinds
                    logged = sum(p.stat().st_size for p in folder.rglob("*.fps"))
                    print(f"    their logs in the store: {logged / max(1, in_filters):.1f} bytes per fingerprint")
            delete_dupefilter(client, keys)
        ranked = sorted((kinds_bloom or kinds).items(), key=lambda kv: -kv[1])
        share = ", ".join(f"{k} {v / pushed:.2f}" for k, v in ranked)
        print(f"  MEMORY USAGE by kind (Bloom form), bytes/URL: {share}")
        segment_goal = "met" if on_disk / max(1, in_tails) <= 40 else "NOT MET"
        print(
            f"  store: {on_disk / max(1, in_tails):.1f} bytes per URL in segments "
            f"({on_disk:,} bytes; goal <= 40: {segment_goal})",
            flush=True,
        )
        shutil.rmtree(folder, ignore_errors=True)


# --- spill and refill rate ----------------------------------------------------------------------------


def redis_cpu(client: RedisClient) -> float:
    if is_cluster(client):
        per_node = client.info("cpu", target_nodes=RedisCluster.PRIMARIES)
        return sum(float(i["used_cpu_user"]) + float(i["used_cpu_sys"]) for i in per_node.values())
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def primaries(client: RedisClient) -> int:
    return len(client.get_primaries()) if isinstance(client, RedisCluster) else 1


def rate_once(url: str, args: argparse.Namespace, folder: Path, domains: int) -> dict[str, float]:
    """Requests spilled and refilled per second of wall time, of Redis CPU and of the mover's CPU,
    in one run of ``--rate-requests`` over *domains* domains: the mover settles what the pushes
    flagged (timed), then, until nothing is left to refill, every head is emptied and every queue
    flagged for a refill as pops would (untimed) and the mover settles again (timed)."""
    overrides = {
        "FRONTIER_TAIL_URL": str(folder),
        "FRONTIER_HEAD_SIZE": args.head_size,
        "FRONTIER_SEGMENT_SIZE": args.segment_size,
        "CRAWL_MAX_PAGES_DEFAULT": 0,
    }
    with prefixed_redis(url, PREFIX + "rate", **overrides) as (settings, client, keys):
        mover = TailMover.from_settings(client, settings)
        assert mover is not None
        memory.push_all(client, Frontier.from_settings(client, settings), links(args.rate_requests, domains))
        cpu, own, started = redis_cpu(client), time.process_time(), time.perf_counter()
        settle(mover)
        spill_s, spill_own = time.perf_counter() - started, time.process_time() - own
        spill_cpu = redis_cpu(client) - cpu
        spilled = mover.counts.spilled
        names = [f"site{d:04d}.com" for d in range(domains)]
        queues = [keys.crawl_queue(SPIDER, APPID, CRAWLID, name) for name in names]
        refill_s = refill_cpu = refill_own = 0.0
        while True:
            before = mover.counts.refilled
            pipe = client.pipeline(transaction=False)
            for name, queue in zip(names, queues, strict=True):
                pipe.delete(queue)  # the head popped
                pipe.zadd(keys.tail_refill_wanted(keys.shard_of(name)), {queue: 0})  # and the pop asked
            pipe.execute()
            cpu, own, started = redis_cpu(client), time.process_time(), time.perf_counter()
            settle(mover)
            refill_s += time.perf_counter() - started
            refill_own += time.process_time() - own
            refill_cpu += redis_cpu(client) - cpu
            if mover.counts.refilled == before:
                break
        refilled = mover.counts.refilled
        assert refilled == spilled, f"refilled {refilled:,} of {spilled:,} spilled"
        shutil.rmtree(folder, ignore_errors=True)
        return {
            "spill": spilled / spill_s,
            "spill redis": spilled / max(spill_cpu, 1e-3),
            "spill mover": spilled / max(spill_own, 1e-3),
            "refill": refilled / refill_s,
            "refill redis": refilled / max(refill_cpu, 1e-3),
            "refill mover": refilled / max(refill_own, 1e-3),
            "moved": spilled,
            "segments": mover.counts.segments_written,
        }


def rate(url: str, args: argparse.Namespace, folder: Path) -> None:
    with prefixed_redis(url, PREFIX + "rate") as (_settings, client, _keys):
        n = primaries(client)
    for domains, shape in ((4, "long queues"), (args.rate_requests // 10, "a broad crawl: 10 a domain")):
        runs = [rate_once(url, args, folder, domains) for _ in range(args.repeats)]
        print(
            f"\nspill and refill, {shape}: {args.rate_requests:,} requests in {domains:,} domains "
            f"({runs[0]['moved']:,.0f} spilled in {runs[0]['segments']:,.0f} segments), median of {args.repeats} "
            f"(segments written and fsynced in {folder})"
        )
        for label in ("spill", "refill"):
            wall = statistics.median(r[label] for r in runs) / n
            verdict = "met" if wall >= 20_000 else f"NOT MET ({wall / 20_000:.0%} of it)"
            each = ", ".join(f"{r[label] / n:,.0f}" for r in runs)
            print(
                f"  {label:<6} {wall:10,.0f} requests/s per primary with one mover ({each}; goal >= 20,000: "
                f"{verdict}); Redis CPU allows {statistics.median(r[label + ' redis'] for r in runs) / n:,.0f}/s "
                f"per primary, the mover's CPU {statistics.median(r[label + ' mover'] for r in runs):,.0f}/s",
                flush=True,
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", help="an existing, otherwise idle Redis (default: a private redis-server)")
    parser.add_argument("--cluster", action="store_true", help="a private local Redis Cluster (3 primaries)")
    parser.add_argument("--tail-queued", type=int, default=FULL_SCALE, help="queued in the two large cases (10000000)")
    parser.add_argument("--head-size", type=int, default=Settings.from_overrides().FRONTIER_HEAD_SIZE)
    parser.add_argument("--segment-size", type=int, default=Settings.from_overrides().FRONTIER_SEGMENT_SIZE)
    parser.add_argument("--hot-domains", type=int, help="FRONTIER_HOT_DOMAINS (default: its default, scaled)")
    parser.add_argument(
        "--bloom-after",
        type=int,
        help="DUPEFILTER_BLOOM_ABOVE of the Bloom form (default: 10,000 on one host, --tail-queued / 100 in the"
        " large cases)",
    )
    parser.add_argument(
        "--settle-every", type=int, default=200_000, help="requests pushed between settles (0: only at the end)"
    )
    parser.add_argument(
        "--store", help="where the temporary folder of the segments is made (default: TMPDIR); it is removed"
    )
    parser.add_argument("--rate-requests", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--url-length", type=int, default=URL_LENGTH)
    parser.add_argument("--only", choices=("memory", "rate"))
    parser.add_argument("--case", type=int, action="append", choices=(1, 2, 3), help="only these memory cases")
    args = parser.parse_args(argv)
    memory.URL_LENGTH = args.url_length
    hot = args.hot_domains
    if hot is None:
        hot = max(1, round(Settings.from_overrides().FRONTIER_HOT_DOMAINS * min(1.0, args.tail_queued / FULL_SCALE)))
    check_bloom_twin()
    folder = Path(tempfile.mkdtemp(prefix="crawlhive-tails-", dir=args.store))
    try:
        with bench_redis(args.redis_url, cluster=args.cluster) as url:
            with prefixed_redis(url, PREFIX) as (_settings, client, keys):
                version = client.info("server")["redis_version"]
            sample = next(links(1, 1))
            settled = f"every {args.settle_every:,} pushed and at the end" if args.settle_every else "at the end"
            print(
                f"Redis {version}, {keys.shards} shard(s); FRONTIER_HEAD_SIZE={args.head_size}, "
                f"FRONTIER_SEGMENT_SIZE={args.segment_size}, FRONTIER_HOT_DOMAINS={hot} (cluster-wide)"
                f"{' (scaled from its default by --tail-queued)' if args.hot_domains is None and hot != 1000 else ''}, "
                "DUPEFILTER_BLOOM_ABOVE (cluster-wide) of the Bloom form in each case's line; "
                f"URL {len(sample.url)} characters, "
                f"queue member {len(sample.member())} bytes; mover settled {settled}; segments in {folder}",
                flush=True,
            )
            if args.only != "rate":
                for number, case in enumerate(cases(args.tail_queued, args.bloom_after), 1):
                    if args.case and number not in args.case:
                        continue
                    memory_case(url, case, args, hot, folder / "segments")
            if args.only != "memory":
                rate(url, args, folder / "segments")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
