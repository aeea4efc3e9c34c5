"""Compaction of a crawl's Bloom seen-set (docs/contract.md §3.8, utils/frontier/bloom_compactor.py):
with FRONTIER_TAIL_URL set, the admit logs every fingerprint it adds to a filter, a redis-monitor
seals the log into the store and rebuilds the filter at about 1.9 bytes per URL. On a real Redis
(and a Redis Cluster in ``make test``'s cluster pass) with a local folder as the store: the bytes per
URL, a seal or a compaction killed mid-way, admits racing a compaction, the store down, a crawler
that does not log, a restart afresh, the sweep, and the redis-monitor's plugin.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import math
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis
from support.cluster_crawl import Component
from support.crawler import TestSite, crawler_env, crawler_module, html, seed
from test_dupefilter_bloom import CRAWL, SITE, _admit, _pages, _send_again_stopped, _urls

from crawlhive.crawler.admit import Admission, stored_fingerprint
from crawlhive.crawler.leases import LeaseContext
from crawlhive.crawler.requests import url_fingerprint
from crawlhive.redis_monitor.monitor import RedisMonitor
from crawlhive.redis_monitor.plugins.bloom import BloomCompaction
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.errors import NotConfigured
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import FrontierReader, bloom, bloom_compactor
from crawlhive.utils.frontier.bloom_compactor import (
    CATCHUP_BYTES,
    PIECE_TTL_MS,
    STORE_RETRY_S,
    BloomCompactor,
    decode_chunk,
)
from crawlhive.utils.frontier.tails import TailStore

pytestmark = pytest.mark.timeout(600)


def _compactor(client: redis.Redis, settings: Settings, folder: Path) -> BloomCompactor:
    keys = keys_from_settings(settings)
    return BloomCompactor(client, keys, TailStore(str(folder), settings.REDIS_KEY_PREFIX))


def _admission(client: redis.Redis, keys: Keys, per_shard: int, *, compact: bool = True) -> Admission:
    """A crawler's admit with DUPEFILTER_BLOOM_ABOVE of *per_shard* a shard, logging for compaction."""
    return Admission(None, client, None, keys, 600.0, 600.0, None, bloom_after=per_shard * keys.shards, compact=compact)  # type: ignore[arg-type]


def _settle(compactor: BloomCompactor) -> None:
    """Run the compactor over every shard until it has nothing left to do."""
    while sum(compactor.run_once(shard) for shard in range(compactor.keys.shards)):
        pass


def _filter_bytes(client: redis.Redis, keys: Keys) -> tuple[int, int]:
    """Redis memory of crawl b1's filter in SITE's shard (state, base pieces, layers) and of its log."""
    state = keys.dupefilter_bloom(*CRAWL, keys.shard_of(SITE))
    fields = {k.decode(): v.decode() for k, v in client.hgetall(state).items()}
    names = [state] + [Keys.bloom_layer_of(state, i) for i in range(int(fields.get("layers", 0)))]
    gen = int(fields.get("gen", 0) or 0)
    if gen:
        names += [Keys.bloom_piece_of(state, gen, i) for i in range(len(fields["pieces"].split(",")))]
    used = sum(int(client.memory_usage(name, samples=0) or 0) for name in names)  # type: ignore[no-untyped-call]
    log = int(client.memory_usage(Keys.bloom_log_of(state), samples=0) or 0)  # type: ignore[no-untyped-call]
    return used, log


def test_a_compacted_filter_keeps_every_fingerprint_at_under_two_bytes_a_url(
    redis_settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Links admitted past the threshold, the compactor settled after each batch: the filter is
    rebuilt as a base (no layers left), holds every link (an admit of them all again queues none),
    costs at most 2 bytes of Redis per fingerprint with its log under its seal bound, and drops
    at most 0.1 % of first-time URLs."""
    keys = keys_from_settings(redis_settings)
    admission = _admission(redis_client, keys, 1000)
    compactor = _compactor(redis_client, redis_settings, tmp_path)
    first, second, third = _pages(redis_client, redis_settings, 3)
    added: list[str] = []
    for batch in range(12):
        added += _admit(admission, first, _urls(f"c{batch}", 10_000))
        _settle(compactor)
    state = keys.dupefilter_bloom(*CRAWL, keys.shard_of(SITE))
    fields = {k.decode(): v.decode() for k, v in redis_client.hgetall(state).items()}
    assert int(fields["gen"]) >= 3 and compactor.counts.compacted >= 3
    count = int(fields["count"])
    used, log = _filter_bytes(redis_client, keys)
    assert used / count <= 2.0, (used, count, fields)
    assert log <= 12 * 1024 + 64
    assert _admit(admission, second, added) == []  # no false negative
    fresh = [f"http://{SITE}/fresh/{hashlib.sha1(str(i).encode()).hexdigest()}" for i in range(100_000)]
    dropped = len(fresh) - len(_admit(admission, third, fresh))
    bound = 0.001 * len(fresh)
    assert dropped <= bound + 3 * math.sqrt(bound), dropped
    assert bloom.BASE_FALSE_POSITIVE_RATE < 0.001


# --- the protocol interrupted, the store down, the log incomplete, the garbage ------------------


def _state_key(keys: Keys) -> str:
    """The state key of crawl b1's filter in SITE's shard."""
    return keys.dupefilter_bloom(*CRAWL, keys.shard_of(SITE))


def _fields(client: redis.Redis, key: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in client.hgetall(key).items()}


def _log_is_whole(client: redis.Redis, key: str) -> dict[str, str]:
    """The filter's fields, after checking that its log (chunks sealed plus what Redis holds)
    counts every fingerprint the filter took."""
    fields = _fields(client, key)
    assert fields["log"] == "1", fields
    unsealed = int(client.strlen(Keys.bloom_log_of(key)))
    assert unsealed % 12 == 0
    assert int(fields.get("sealedfps", 0)) + unsealed // 12 == int(fields["count"]), fields
    return fields


def _fps(urls: list[str]) -> set[bytes]:
    return {stored_fingerprint(url_fingerprint(u)) for u in urls}


def _logged(client: redis.Redis, compactor: BloomCompactor, key: str) -> list[bytes]:
    """Every fingerprint of the filter's log: its live chunks in the store, then Redis's rest."""
    fields = _fields(client, key)
    shard, logid = compactor.keys.shard_of(SITE), fields["logid"]
    sealed, cons = int(fields.get("sealed", 0)), int(fields.get("cons", 0))
    names = ([f"c{cons}.fps"] if cons else []) + [f"{n}.fps" for n in range(cons, sealed)]
    data = b"".join(decode_chunk(Path(compactor.chunk_path(shard, logid, name)).read_bytes()) for name in names)
    data += client.get(Keys.bloom_log_of(key)) or b""
    return [data[i : i + 12] for i in range(0, len(data), 12)]


def _grow_until_due(admission: Admission, page: LeaseContext, client: redis.Redis, key: str, tag: str) -> list[str]:
    """Admit new links (tagged *tag*) until the filter's count reaches its ``next``; the admitted ones."""
    added: list[str] = []
    for round_ in range(100):
        fields = _fields(client, key)
        count, due = int(fields.get("count", 0)), int(fields.get("next", 0))
        if fields and count >= due:
            return added
        more = max(100, due - count + 10) if fields else 1100
        added += _admit(admission, page, _urls(f"{tag}{round_}", more))
    raise AssertionError("the filter never became due")


def _compacted(
    admission: Admission, page: LeaseContext, client: redis.Redis, compactor: BloomCompactor, key: str, tag: str
) -> list[str]:
    """Grow the filter until due and settle *compactor*: one more generation; the links admitted."""
    gen = int(_fields(client, key).get("gen", 0) or 0)
    added = _grow_until_due(admission, page, client, key, tag)
    _settle(compactor)
    assert int(_fields(client, key)["gen"]) == gen + 1
    return added


def _files(compactor: BloomCompactor, logid: str) -> set[str]:
    """The names of the objects in log *logid*'s folder (SITE's shard)."""
    folder = Path(compactor.chunk_path(compactor.keys.shard_of(SITE), logid, "x")).parent
    return {p.name for p in folder.iterdir()} if folder.exists() else set()


def _pieces(client: redis.Redis, key: str, gen: int) -> list[str]:
    return [Keys.bloom_piece_of(key, gen, i) for i in range(len(_fields(client, key)["pieces"].split(",")))]


def test_a_seal_killed_between_its_write_and_its_script_loses_nothing(
    redis_settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Chunk 0 written to the store, the monitor killed before bloom_seal.lua: every fingerprint
    is still in the Redis log; a fresh compactor seals chunk 0 again over the orphan (with what
    the log gained since), the log stays whole, and after the compaction every link is seen."""
    keys = keys_from_settings(redis_settings)
    shard, key = keys.shard_of(SITE), _state_key(keys)
    admission = _admission(redis_client, keys, 1000)
    first, second = _pages(redis_client, redis_settings, 2)
    added = _admit(admission, first, _urls("s", 4000))
    assert redis_client.zscore(keys.bloom_wanted(shard), key) is not None  # the log asks for a seal

    class KilledAfterWrite(TailStore):
        def write_many(self, objects: list[tuple[str, bytes]]) -> None:
            super().write_many(objects)
            raise SystemExit("killed")

    killed = BloomCompactor(redis_client, keys, KilledAfterWrite(str(tmp_path), redis_settings.REDIS_KEY_PREFIX))
    with pytest.raises(SystemExit):
        killed.run_once(shard)
    fields = _log_is_whole(redis_client, key)
    count = int(fields["count"])
    assert "sealed" not in fields and int(redis_client.strlen(Keys.bloom_log_of(key))) == 12 * count
    orphan = Path(killed.chunk_path(shard, fields["logid"], "0.fps"))
    assert len(decode_chunk(orphan.read_bytes())) == 12 * count  # written, never sealed

    added += _admit(admission, first, _urls("t", 2000))
    compactor = _compactor(redis_client, redis_settings, tmp_path)
    _settle(compactor)
    fields = _log_is_whole(redis_client, key)
    assert fields["sealed"] == "1" and int(fields["sealedfps"]) > count
    assert len(decode_chunk(orphan.read_bytes())) == 12 * int(fields["sealedfps"])  # overwritten
    logged = _logged(redis_client, compactor, key)
    assert len(logged) == len(set(logged)) == int(fields["count"])
    in_set = set(redis_client.hkeys(keys.dupefilter(*CRAWL, shard)))
    assert _fps(added) - in_set <= set(logged)

    added += _compacted(admission, first, redis_client, compactor, key, "u")
    _log_is_whole(redis_client, key)
    assert _admit(admission, second, added) == []  # no false negative


def test_a_compaction_killed_before_its_swap_leaves_the_old_filter_whole(
    redis_settings: Settings, redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after writing generation 2's pieces, before the swap: the filter still answers from
    generation 1 (every link seen), the orphan pieces expire within PIECE_TTL_MS; the next
    compaction makes generation 2, with the filter's expiry, and loses nothing."""
    keys = keys_from_settings(redis_settings)
    shard, key = keys.shard_of(SITE), _state_key(keys)
    admission = _admission(redis_client, keys, 1000)
    admission.filter_ttl_ms = 3_600_000
    first, second, third = _pages(redis_client, redis_settings, 3)
    compactor = _compactor(redis_client, redis_settings, tmp_path)
    added = _compacted(admission, first, redis_client, compactor, key, "a")
    old = _pieces(redis_client, key, 1)
    added += _grow_until_due(admission, first, redis_client, key, "b")

    killed = _compactor(redis_client, redis_settings, tmp_path)

    def die(*args: object) -> int:
        raise SystemExit("killed")

    monkeypatch.setattr(killed, "_catch_up", die)
    with pytest.raises(SystemExit):
        killed.run_once(shard)
    fields = _log_is_whole(redis_client, key)
    assert fields["gen"] == "1" and all(redis_client.exists(name) for name in old)
    orphans = [Keys.bloom_piece_of(key, 2, i) for i in range(bloom.MAX_PIECES)]
    orphans = [name for name in orphans if redis_client.exists(name)]
    assert orphans and all(0 < int(redis_client.pttl(name)) <= PIECE_TTL_MS for name in orphans)
    assert _admit(admission, second, added) == []  # answered by generation 1 and its layers

    _settle(_compactor(redis_client, redis_settings, tmp_path))  # the flag is still there
    fields = _log_is_whole(redis_client, key)
    assert fields["gen"] == "2" and fields["layers"] == "0"
    assert not any(redis_client.exists(name) for name in old)
    assert all(int(redis_client.pttl(name)) > PIECE_TTL_MS for name in _pieces(redis_client, key, 2))
    assert _admit(admission, third, added) == []


@pytest.mark.parametrize("during", [50, 3000], ids=["swap-takes-them", "catch-up-takes-them"])
def test_links_admitted_during_a_compaction_are_in_the_new_base(
    redis_settings: Settings, redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, during: int
) -> None:
    """Links admitted between a compaction's snapshot and its swap (while it builds the base):
    a few are added by bloom_swap.lua, more than CATCHUP_BYTES' worth by the compactor's catch-up
    first; after the swap every link, before and during, is seen, the base holds the whole count
    and no layer is left."""
    keys = keys_from_settings(redis_settings)
    key = _state_key(keys)
    admission = _admission(redis_client, keys, 1000)
    first, second, third = _pages(redis_client, redis_settings, 3)
    compactor = _compactor(redis_client, redis_settings, tmp_path)
    # a base with room for what comes during the build (its headroom is a 24th of its count)
    added = _admit(admission, first, _urls("big", max(12_000, 40 * during)))
    _settle(compactor)
    gen = int(_fields(redis_client, key)["gen"])
    added += _grow_until_due(admission, first, redis_client, key, "b")

    admitted_during: list[str] = []
    build = bloom.build_base

    def admitting_first(chunks: Iterator[np.ndarray], piece_bytes: list[int]) -> list[bytes]:
        admitted_during.extend(_admit(admission, second, _urls("during", during)))
        return build(chunks, piece_bytes)

    caught: list[tuple[int, int]] = []
    catch_up = compactor._catch_up

    def spied(log: str, at: int, pieces: list[str], sizes: list[int], room: int) -> int:
        caught.append((at, catch_up(log, at, pieces, sizes, room)))
        return caught[-1][1]

    monkeypatch.setattr(bloom, "build_base", admitting_first)
    monkeypatch.setattr(compactor, "_catch_up", spied)
    assert compactor.work(keys.shard_of(SITE), key) is None  # one seal and compaction
    assert len(admitted_during) >= during - 3
    fields = _log_is_whole(redis_client, key)
    assert int(fields["gen"]) == gen + 1 and fields["layers"] == "0"
    assert fields["count"] == fields["bfill"]
    assert int(fields["bfill"]) <= int(fields["bcap"])  # never filled past its capacity
    ((at, end),) = caught
    length = int(redis_client.strlen(Keys.bloom_log_of(key)))
    if during > CATCHUP_BYTES // 12:
        assert end - at >= CATCHUP_BYTES and length - end <= CATCHUP_BYTES  # the catch-up took most
    else:
        assert end == at and length - at >= 12 * len(admitted_during)  # the swap took them all
    assert _admit(admission, third, added + admitted_during) == []


def test_the_store_down_keeps_the_log_in_redis_and_compaction_resumes_after(
    redis_settings: Settings, redis_client: redis.Redis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """FRONTIER_TAIL_URL refusing writes (a file where its folder should be): the compactor retries
    after STORE_RETRY_S with one WARNING naming FRONTIER_TAIL_URL, the log stays in Redis, admits
    go on seeing every link; the store back, the log is sealed and the filter compacted."""
    keys = keys_from_settings(redis_settings)
    shard, key = keys.shard_of(SITE), _state_key(keys)
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the store's folder should be")
    compactor = BloomCompactor(redis_client, keys, TailStore(str(blocked / "tails"), redis_settings.REDIS_KEY_PREFIX))
    admission = _admission(redis_client, keys, 1000)
    first, second, third = _pages(redis_client, redis_settings, 3)
    caplog.set_level(logging.WARNING)
    added = _admit(admission, first, _urls("s", 4000))
    before = time.time()
    assert compactor.run_once(shard) == 1
    assert float(redis_client.zscore(keys.bloom_wanted(shard), key)) >= before + STORE_RETRY_S - 0.5  # type: ignore[arg-type]
    added += _grow_until_due(admission, first, redis_client, key, "g")
    for _ in range(3):
        assert compactor.work(shard, key) == STORE_RETRY_S
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "FRONTIER_TAIL_URL" in warnings[0].getMessage()
    fields = _log_is_whole(redis_client, key)
    assert "sealed" not in fields and "gen" not in fields
    assert int(redis_client.strlen(Keys.bloom_log_of(key))) == 12 * int(fields["count"])
    more = _admit(admission, first, _urls("m", 500))  # admits go on (a false positive may drop one)
    assert len(more) >= 495
    added += more
    assert _admit(admission, second, added) == []

    blocked.unlink()
    assert compactor.work(shard, key) is None
    fields = _log_is_whole(redis_client, key)
    assert int(fields["sealed"]) >= 1 and fields["gen"] == "1" and compactor.counts.compacted == 1
    assert _admit(admission, third, added) == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_crawler_that_does_not_log_stops_the_compaction_of_the_filter(
    redis_settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A crawler without FRONTIER_TAIL_URL adds to a filter that logging crawlers made: the
    filter's log is ``lost`` and deleted, the compactor drops the flag and leaves the filter as
    it is (never compacted from an incomplete log), and every link is seen."""
    keys = keys_from_settings(redis_settings)
    shard, key = keys.shard_of(SITE), _state_key(keys)
    logging_ = _admission(redis_client, keys, 1000)
    plain = _admission(redis_client, keys, 1000, compact=False)
    first, second, third = _pages(redis_client, redis_settings, 3)
    compactor = _compactor(redis_client, redis_settings, tmp_path)
    added = _admit(logging_, first, _urls("s", 4000))
    _settle(compactor)
    assert int(_log_is_whole(redis_client, key)["sealed"]) == 1
    added += _grow_until_due(logging_, first, redis_client, key, "g")
    assert redis_client.zscore(keys.bloom_wanted(shard), key) is not None
    added += _admit(plain, second, _urls("p", 100))
    assert _fields(redis_client, key)["log"] == "lost"
    assert not redis_client.exists(Keys.bloom_log_of(key))
    added += _admit(logging_, first, _urls("after", 100))  # a logging crawler no longer logs it
    assert not redis_client.exists(Keys.bloom_log_of(key))

    _settle(compactor)
    fields = _fields(redis_client, key)
    assert fields["log"] == "lost" and "gen" not in fields and int(fields["layers"]) >= 1
    assert compactor.counts.compacted == 0
    assert redis_client.zscore(keys.bloom_wanted(shard), key) is None
    assert _admit(logging_, third, added) == []


def test_a_compacted_filter_restarted_afresh_goes_with_its_log(
    redis_settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A stopped crawl sent again with ``recrawl`` starts afresh: its compacted filter's state,
    layers and log are deleted; the new filter logs to a new folder and is compacted from it."""
    keys = keys_from_settings(redis_settings)
    key = _state_key(keys)
    admission = _admission(redis_client, keys, 1000)
    (first,) = _pages(redis_client, redis_settings, 1)
    compactor = _compactor(redis_client, redis_settings, tmp_path)
    _compacted(admission, first, redis_client, compactor, key, "a")
    _admit(admission, first, _urls("b", 200))
    logid = _fields(redis_client, key)["logid"]
    names = [key, Keys.bloom_log_of(key)] + [Keys.bloom_layer_of(key, i) for i in range(bloom.MAX_LAYERS)]
    assert redis_client.exists(key) and redis_client.exists(Keys.bloom_log_of(key))

    _send_again_stopped(redis_client, redis_settings, keys)
    assert not any(redis_client.exists(name) for name in names)

    (page,) = _pages(redis_client, redis_settings, 1, first=1)
    _compacted(admission, page, redis_client, compactor, key, "c")
    fields = _log_is_whole(redis_client, key)
    assert fields["gen"] == "1" and fields["logid"] != logid


def test_the_sweep_deletes_replaced_chunks_and_gone_filters_logs_only(
    redis_settings: Settings, redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every compaction consolidates (CONSOLIDATE_AFTER 1) and is killed before deleting the
    chunks it replaced: the sweep deletes those (old enough) and keeps the live consolidated
    object, from which the next compaction rebuilds the filter without a false negative; once the
    filter is gone, the sweep deletes its whole log."""
    monkeypatch.setattr(bloom_compactor, "CONSOLIDATE_AFTER", 1)
    keys = keys_from_settings(redis_settings)
    shard, key = keys.shard_of(SITE), _state_key(keys)
    admission = _admission(redis_client, keys, 1000)
    first, second = _pages(redis_client, redis_settings, 2)

    class KilledOnDelete(TailStore):
        def delete(self, paths: object) -> None:
            raise SystemExit("killed")

    killed = BloomCompactor(redis_client, keys, KilledOnDelete(str(tmp_path), redis_settings.REDIS_KEY_PREFIX))
    compactor = _compactor(redis_client, redis_settings, tmp_path)
    added: list[str] = []
    for step in range(2):
        added += _grow_until_due(admission, first, redis_client, key, f"g{step}")
        with pytest.raises(SystemExit):  # after the swap, before deleting what it replaced
            killed.run_once(shard)
        fields = _log_is_whole(redis_client, key)
        logid, cons = fields["logid"], int(fields["cons"])
        assert fields["gen"] == str(step + 1) and cons == int(fields["sealed"])
        files = _files(compactor, logid)
        live = {"key", f"c{cons}.fps"}
        assert live < files and len(files) >= 3
        assert compactor.sweep(shard) == 0  # all younger than SWEEP_AGE_S
        assert compactor.sweep(shard, older_than_s=0) == len(files) - 2
        assert _files(compactor, logid) == live

    added += _compacted(admission, first, redis_client, compactor, key, "h")  # from c<cons>.fps and on
    fields = _log_is_whole(redis_client, key)
    assert fields["gen"] == "3" and compactor.counts.lost == 0
    assert _admit(admission, second, added) == []

    assert compactor.sweep(shard, older_than_s=0) == 0  # nothing replaced left over
    files = _files(compactor, logid)
    redis_client.delete(key)  # the filter is gone (expired with its crawl)
    assert compactor.sweep(shard) == 0
    assert compactor.sweep(shard, older_than_s=0) == len(files)
    assert _files(compactor, logid) == set()


def test_the_redis_monitor_compacts_filters_on_its_own_thread(
    redis_settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """The BloomCompaction plugin built by a redis-monitor with FRONTIER_TAIL_URL: its tick starts
    the compactor, which compacts a filter logging crawlers grow; without FRONTIER_TAIL_URL or
    without Bloom filters it is not configured."""
    keys = keys_from_settings(redis_settings)
    key = _state_key(keys)
    with pytest.raises(NotConfigured):
        BloomCompaction.from_monitor(RedisMonitor(redis_settings.copy_with(DUPEFILTER_BLOOM_ABOVE=100), redis_client))
    with pytest.raises(NotConfigured):
        BloomCompaction.from_monitor(
            RedisMonitor(redis_settings.copy_with(FRONTIER_TAIL_URL=str(tmp_path)), redis_client)
        )
    settings = redis_settings.copy_with(
        FRONTIER_TAIL_URL=str(tmp_path / "tails"), DUPEFILTER_BLOOM_ABOVE=1000 * keys.shards
    )
    plugin = BloomCompaction.from_monitor(RedisMonitor(settings, redis_client))
    admission = _admission(redis_client, keys, 1000)
    first, second = _pages(redis_client, redis_settings, 2)
    plugin.tick()
    try:
        # admits of 2,000 links at a time take the filter past its "next" while the thread seals
        added = _admit(admission, first, _urls("g", 11_500))
        assert int(_fields(redis_client, key)["count"]) >= int(_fields(redis_client, key)["next"])
        deadline = time.monotonic() + 60
        while int(_fields(redis_client, key).get("gen", 0) or 0) < 1:
            assert time.monotonic() < deadline, _fields(redis_client, key)
            time.sleep(0.1)
    finally:
        plugin.close()
    assert plugin.compactor.counts.compacted >= 1 and plugin._thread is None
    _log_is_whole(redis_client, key)
    assert _admit(admission, second, added) == []


def test_a_flag_raised_while_the_compactor_works_on_the_filter_is_kept(
    redis_settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """An admit takes the filter past its ``next`` while a compactor seals its log (not due when
    the compactor read the state): the admit's flag (ZADD NX: the flag being worked is still
    there) must survive the end of that work, or nothing compacts the filter until another
    fingerprint is added to it."""
    keys = keys_from_settings(redis_settings)
    shard, key = keys.shard_of(SITE), _state_key(keys)
    admission = _admission(redis_client, keys, 1000)
    first, second = _pages(redis_client, redis_settings, 2)
    _admit(admission, first, _urls("s", 4000))
    admitted: list[str] = []

    class AdmitsDuringTheSeal(TailStore):
        def write_many(self, objects: list[tuple[str, bytes]]) -> None:
            if not admitted:
                admitted.extend(_admit(admission, second, _urls("during", 9000)))
            super().write_many(objects)

    store = AdmitsDuringTheSeal(str(tmp_path), redis_settings.REDIS_KEY_PREFIX)
    compactor = BloomCompactor(redis_client, keys, store)
    assert compactor.run_once(shard) == 1
    fields = _log_is_whole(redis_client, key)
    assert int(fields["count"]) >= int(fields["next"]) and "gen" not in fields  # due, not compacted
    assert redis_client.zscore(keys.bloom_wanted(shard), key) is not None


def test_a_real_crawl_past_the_threshold_is_compacted_by_the_redis_monitor(
    site: TestSite, redis_settings: Settings, redis_url: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A real crawler and a real redis-monitor with FRONTIER_TAIL_URL and DUPEFILTER_BLOOM_ABOVE
    of 100 a shard crawl a site whose index links to four pages of 3,200 new links each (and 100
    of the next page's): the crawler's admits log the site's filter, the redis-monitor seals the
    log into the store and compacts the filter (a base, its log whole); no page is fetched twice.
    The linked pages (404s) are fetched 20 a second, so the crawl stays small while it is watched."""
    shards = keys_from_settings(redis_settings).shards
    tails = tmp_path / "tails"
    overrides = {
        "FRONTIER_TAIL_URL": str(tails),
        "DUPEFILTER_BLOOM_ABOVE": 100 * shards,
        "QUEUE_HITS": 20,  # the 12,800 linked pages trickle while the filter is compacted
    }
    pages = [f"/bc/p{i}" for i in range(4)]
    site.page("/bc/", html(*pages))
    for i, page in enumerate(pages):
        links = [f"/bc/x/{i}/{j}" for j in range(3200)] + [f"/bc/x/{(i + 1) % 4}/{j}" for j in range(100)]
        site.page(page, html("/bc/", *pages, *links))
    with crawler_module(redis_url, kafka_bootstrap, tmp_path, "bc", **overrides) as env:
        settings, client = env["settings"], env["redis"]
        keys = keys_from_settings(settings)
        assert keys.shards == shards
        shard = keys.shard_of("127.0.0.1")  # the site's domain (its port is not part of it)
        key = keys.dupefilter_bloom("link", "bcapp", "bc1", shard)
        monitor = Component(
            "redis-monitor",
            crawler_env(settings, REDIS_MONITOR_TICK_S=0.2, REDIS_MONITOR_BLOCK_MS=200, **overrides),
            tmp_path,
        )
        try:
            seed(settings, client, appid="bcapp", crawlid="bc1", url=site.url("/bc/"), maxdepth=2)
            deadline = time.monotonic() + 60
            while int(_fields(client, key).get("gen", 0) or 0) < 1:
                assert monitor.proc.poll() is None, monitor.output()
                assert time.monotonic() < deadline, (_fields(client, key), monitor.output()[-3000:])
                time.sleep(0.2)
            fields = _log_is_whole(client, key)
            admitted = int(fields["count"]) + int(client.hlen(keys.dupefilter("link", "bcapp", "bc1", shard)))
            hits = FrontierReader(client, keys, 3600).bloom_hits("link", "bcapp", "bc1")
        finally:
            code = monitor.stop()
        assert code == 0, monitor.output()
        folder = Path(_compactor(client, settings, tails).chunk_path(shard, fields["logid"], "key")).parent
    assert admitted >= 12_000, fields
    assert int(fields["gen"]) >= 1 and int(fields["bfill"]) <= int(fields["bcap"]), fields
    assert fields["pieces"] and int(fields["sealed"]) >= 1, fields
    assert folder == tails / settings.REDIS_KEY_PREFIX / str(shard) / "bloom" / fields["logid"]
    names = {p.name for p in folder.iterdir()}
    assert "key" in names and (folder / "key").read_text() == key, names
    chunks = [folder / f"{n}.fps" for n in range(int(fields.get("cons", 0) or 0), int(fields["sealed"]))]
    if int(fields.get("cons", 0) or 0):
        chunks.insert(0, folder / f"c{fields['cons']}.fps")
    assert sum(len(decode_chunk(c.read_bytes())) for c in chunks) == 12 * int(fields["sealedfps"])
    assert hits is not None and hits > 0  # the filter answered for the links repeated across pages
    fetched = collections.Counter(s.path for s in site.hits("/bc/"))
    assert all(fetched[p] == 1 for p in ["/bc/", *pages]), fetched
    assert max(fetched.values()) == 1, [p for p, n in fetched.items() if n > 1]
