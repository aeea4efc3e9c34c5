"""Compaction of a crawl's Bloom seen-set (docs/contract.md §3.8, utils/frontier/bloom_compactor.py):
with FRONTIER_TAIL_URL set, the admit logs every fingerprint it adds to a filter, a redis-monitor
seals the log into the store and rebuilds the filter at about 1.9 bytes per URL. On a real Redis
(and a Redis Cluster in ``make test``'s cluster pass) with a local folder as the store.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest
import redis
from test_dupefilter_bloom import CRAWL, SITE, _admit, _pages, _urls

from crawlhive.crawler.admit import Admission
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import bloom
from crawlhive.utils.frontier.bloom_compactor import BloomCompactor
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
