"""A crawl's seen-set beyond DUPEFILTER_BLOOM_ABOVE (docs/contract.md §3.8): its dupefilter frozen, the
rest in a Bloom filter that crawler_admit.lua keeps in Redis (utils/frontier/bloom.py). On a real
Redis, and in ``make test``'s other passes with 4 shards and on a Redis Cluster: the switch at the
threshold, no false negatives, the false-positive rate and the bytes per URL the sizing promises,
the keys' expiry and a recrawl restart, a page whose crawler died between its admit and its ack
queuing all its links again, and a real crawler crawling a site once with a tiny threshold.
"""

from __future__ import annotations

import hashlib
import math
import time
from pathlib import Path

import pytest
import redis
from support.crawler import TestSite, crawler_module, html, seed

from crawlhive.crawler.admit import Admission, Verdict, stored_fingerprint
from crawlhive.crawler.leases import LeaseContext, LeaseTable
from crawlhive.crawler.requests import link_children, url_fingerprint
from crawlhive.redis_monitor.plugins.info import InfoMonitor
from crawlhive.rest.cluster import ClusterView
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import is_cluster, keys_from_settings, write_pipeline
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import Frontier, FrontierLeaser, FrontierReader, FrontierRequest, ThrottleConfig
from crawlhive.utils.frontier.bloom import MAX_FALSE_POSITIVE_RATE, BloomLayers, capacity, first_exp, layer_bits
from crawlhive.utils.frontier.reclaim import reclaim_expired_leases

pytestmark = pytest.mark.timeout(300)

FAST = ThrottleConfig(hits=1000, window_s=1.0, moderated=False, type_enabled=True, egress_id=None)
SITE = "bloom.example"
CRAWL = ("link", "app", "b1")


def _pages(
    client: redis.Redis,
    settings: Settings,
    n: int,
    crawlid: str = "b1",
    first: int = 0,
    lease_s: float = 600.0,
    spider: str = "link",
) -> list[LeaseContext]:
    """*n* leased pages of crawl *crawlid* of *spider* (page<first>, ...), all on SITE, leased for *lease_s*."""
    keys = keys_from_settings(settings)
    seeds = [
        FrontierRequest(url=f"http://{SITE}/page{i}", spiderid=spider, appid="app", crawlid=crawlid)
        for i in range(first, first + n)
    ]
    pipe = write_pipeline(client)
    Frontier.from_settings(client, settings).push(seeds, pipe)
    pipe.execute()
    worker = FrontierLeaser(client, keys, lease_s=lease_s, record_ttl_s=3600, throttle=FAST)
    contexts = []
    for _ in range(n):
        lease = worker.pop(spider).lease
        assert lease is not None
        context = LeaseContext(lease)
        context.fingerprint = url_fingerprint(lease.request.url)
        contexts.append(context)
    return contexts


def _urls(tag: str, n: int) -> list[str]:
    return [f"http://{SITE}/{tag}/{i}" for i in range(n)]


def _admit(admission: Admission, context: LeaseContext, urls: list[str], chunk: int = 2000) -> list[str]:
    """The URLs of *urls* the admit of *context*'s page lets through (in calls of *chunk* links)."""
    admitted = []
    for start in range(0, len(urls), chunk):
        part = urls[start : start + chunk]
        children = list(zip(link_children(context.request, part), map(url_fingerprint, part), strict=True))
        assert admission.admit(context, children) is Verdict.EMIT
        admitted += [c.url for c in context.children]
    return admitted


def _send_again_stopped(client: redis.Redis, settings: Settings, keys: Keys) -> None:
    """Stop the crawl on every shard, then send it again with ``recrawl``: it starts afresh (§19.1)."""
    for s in range(keys.shards):
        client.set(keys.crawl_stopped(*CRAWL, s), 1)
    again = FrontierRequest(url=f"http://{SITE}/page0", appid="app", crawlid="b1", recrawl={"interval": 3600})
    pipe = write_pipeline(client)
    Frontier.from_settings(client, settings).push([again], pipe)
    pipe.execute()


def _filter_keys(client: redis.Redis, keys: Keys) -> list[str]:
    """The Bloom filter's keys of crawl b1 in SITE's shard: its state and its layers."""
    shard = keys.shard_of(SITE)
    layers = int(client.hget(keys.dupefilter_bloom(*CRAWL, shard), "layers") or 0)
    return [keys.dupefilter_bloom(*CRAWL, shard)] + [
        keys.dupefilter_bloom_layer(*CRAWL, i, shard) for i in range(layers)
    ]


def test_the_seen_set_goes_on_in_the_filter_at_the_threshold(
    redis_settings: Settings, redis_client: redis.Redis
) -> None:
    """The dupefilter takes DUPEFILTER_BLOOM_ABOVE entries and no more; later fingerprints go to
    the filter, which answers for them (counted as bloom_hits, read by info and the budget). The
    page admitted again (its lease still in flight) queues again every link it queued: those the
    dupefilter names it for, and those its record beside the filter holds (not counted as hits)."""
    keys = keys_from_settings(redis_settings)
    shard = keys.shard_of(SITE)
    # DUPEFILTER_BLOOM_ABOVE is cluster-wide: each shard takes its share (SITE's shard: 50)
    admission = Admission(None, redis_client, None, keys, 600.0, 600.0, None, bloom_after=50 * keys.shards)  # type: ignore[arg-type]
    first, second = _pages(redis_client, redis_settings, 2)
    links = _urls("a", 100)
    assert _admit(admission, first, links) == links
    dupefilter, bloom = keys.dupefilter(*CRAWL, shard), keys.dupefilter_bloom(*CRAWL, shard)
    assert redis_client.hlen(dupefilter) == 50  # the page's own entry and its first 49 links
    assert int(redis_client.hget(bloom, "count")) == 51  # type: ignore[arg-type]
    new = _urls("b", 20)
    assert _admit(admission, second, links + new) == new  # every one seen, in the set or the filter
    reader = FrontierReader(redis_client, keys, 3600)
    assert reader.bloom_hits(*CRAWL) == 51
    request = {"uuid": "u", "spiderid": "link", "appid": "app", "crawlid": "b1"}
    assert InfoMonitor(reader).by_crawlid(request)["bloom_hits"] == 51  # info (§4.2)
    assert "bloom_hits" not in InfoMonitor(reader).by_crawlid({**request, "crawlid": "other"})
    state = reader.crawl_state(*CRAWL)  # GET /crawls/{appid}/{crawlid} (§7) answers the same
    assert ClusterView(redis_client, redis_settings, {}).budget_fields(state)["bloom_hits"] == 51
    if not is_cluster(redis_client):  # (on a cluster the budget's counter counts, with a budget only)
        assert reader.admitted([CRAWL]) == [50 + 51 + 1 + 20]  # both pages, every link
    assert _admit(admission, first, links) == links  # again: the dupefilter's 49 and its record's 51
    assert redis_client.hlen(dupefilter) == 50  # frozen
    assert reader.bloom_hits(*CRAWL) == 51
    record = keys.dupefilter_bloom_page(*CRAWL, stored_fingerprint(first.fingerprint), shard)
    assert redis_client.scard(record) == 51 and 0 < int(redis_client.pttl(record)) <= admission.record_ttl_ms
    assert first.bloom_records == {shard: record}


def _queued(client: redis.Redis, keys: Keys, spider: str, crawlid: str, urls: list[str]) -> list[str]:
    """The URLs of *urls* queued in crawl *crawlid* of *spider* (each crawl queue read once)."""
    domains = {u.split("/")[2] for u in urls}
    queued: set[str] = set()
    for domain in domains:
        for member in client.zrange(keys.crawl_queue(spider, "app", crawlid, domain), 0, -1):
            url = bytes(member).rsplit(b" ", 1)[-1].decode()
            queued.add(f"http://{domain}{url[1:]}" if url[:1] == "*" else url)  # '*': http://<domain>
    return [u for u in urls if u in queued]


def test_a_page_whose_crawler_died_between_admit_and_ack_queues_all_its_links_again(
    redis_settings: Settings, redis_client: redis.Redis
) -> None:
    """Kill any process at any moment, nothing accepted is lost: a crawler admits a page's links
    and dies before its finish (no link queued, no ack); the reaper requeues the expired lease and
    the retry, admitted by another crawler, queues every link again, whether the dupefilter (crawl
    "set") or the Bloom filter (crawl "bloom", threshold 5, links on SITE and 10 on each of 8
    other sites: several shards' filters) had taken it: exactly what the dupefilter alone does, and no more (a
    third page queues none of them). The retry's ack deletes the page's records (in every shard
    whose filter took its links)."""
    keys = keys_from_settings(redis_settings)
    links = _urls("k", 60) + [f"http://other{i}.example/{j}" for i in range(8) for j in range(10)]
    frontier = Frontier.from_settings(redis_client, redis_settings)
    results = {}
    for crawlid, bloom_after in (("set", 0), ("bloom", 5)):  # a spider each: one pops only its own
        spider = f"s-{crawlid}"
        dying = Admission(None, redis_client, None, keys, 0.3, 600.0, None, bloom_after=bloom_after * keys.shards)  # type: ignore[arg-type]
        healthy = Admission(None, redis_client, None, keys, 600.0, 600.0, None, bloom_after=bloom_after * keys.shards)  # type: ignore[arg-type]
        (other,) = _pages(redis_client, redis_settings, 1, crawlid, first=1, spider=spider)  # a page of later
        (page,) = _pages(redis_client, redis_settings, 1, crawlid, lease_s=0.3, spider=spider)
        first = _admit(dying, page, links)  # ... and its crawler dies here
        time.sleep(0.5)
        worker = FrontierLeaser(redis_client, keys, lease_s=600.0, record_ttl_s=3600, throttle=FAST)
        assert reclaim_expired_leases(worker, spider, max_retries=3).requeued == 1
        lease = worker.pop(spider).lease
        assert lease is not None and lease.request.url == page.request.url and lease.request.retry_times == 1
        retry = LeaseContext(lease)
        retry.fingerprint = page.fingerprint
        again = _admit(healthy, retry, links)
        if bloom_after:
            assert retry.bloom_records.keys() == page.bloom_records.keys()
            assert len(retry.bloom_records) >= min(keys.shards, 2)  # with shards, several shards' filters
            assert all(redis_client.exists(k) for k in retry.bloom_records.values())
        table = LeaseTable(redis_client, keys, worker, frontier, max_hold_s=600, on_crawled=lambda: None)
        table.add(retry)
        table.finish(retry, "crawled")
        table.flush_finished()
        assert not any(redis_client.exists(k) for k in retry.bloom_records.values())  # deleted by the ack
        queued = _queued(redis_client, keys, spider, crawlid, links)
        results[crawlid] = (first, again, _admit(healthy, other, links), queued)
    assert results["bloom"] == results["set"] == (links, links, [], links)
    reader = FrontierReader(redis_client, keys, 3600)
    assert (reader.bloom_hits("s-bloom", "app", "bloom") or 0) >= len(links) - 5 * keys.shards


def test_no_false_negatives_and_the_rate_and_bytes_the_sizing_promises(
    redis_settings: Settings, redis_client: redis.Redis
) -> None:
    """Past the threshold, a layer filled to its capacity costs at most 2 bytes of Redis memory
    per URL (MEMORY USAGE of the filter's keys), every URL added is seen by the admit afterwards
    (no false negative; the Python twin reads the same bits), and of 200,000 first-time URLs at
    most 0.1 % (plus three standard deviations) are dropped as seen."""
    threshold = 50_000
    keys = keys_from_settings(redis_settings)
    admission = Admission(None, redis_client, None, keys, 600.0, 600.0, None, bloom_after=threshold * keys.shards)  # type: ignore[arg-type]
    first, second, third = _pages(redis_client, redis_settings, 3)
    exp = first_exp(threshold)
    bloom = keys.dupefilter_bloom(*CRAWL, keys.shard_of(SITE))
    added = _admit(admission, first, _urls("seen", threshold - 1))  # the page's own entry is the set's first
    n = len(added)
    while (count := int(redis_client.hget(bloom, "count") or 0)) < capacity(exp, 0):  # fill layer 0 exactly
        more = _urls("seen", n + capacity(exp, 0) - count)[n:]  # (a false positive drops one: top up)
        added += _admit(admission, first, more)
        n += len(more)
    names = _filter_keys(redis_client, keys)
    assert len(names) == 2  # the state and one layer, exactly full
    used = sum(int(redis_client.memory_usage(name, samples=0) or 0) for name in names)  # type: ignore[no-untyped-call]
    assert used / capacity(exp, 0) <= 2.0, used
    assert layer_bits(exp, 0) / capacity(exp, 0) <= 16

    assert _admit(admission, second, added) == []  # no false negative
    twin = BloomLayers(exp, [bytearray(redis_client.get(names[1]))])  # type: ignore[arg-type]
    in_set = set(redis_client.hkeys(keys.dupefilter(*CRAWL, keys.shard_of(SITE))))
    outside = [stored_fingerprint(url_fingerprint(u)) for u in added]
    outside = [fp for fp in outside if fp not in in_set]
    assert len(outside) == capacity(exp, 0) and all(fp in twin for fp in outside)

    fresh = [f"http://{SITE}/fresh/{hashlib.sha1(str(i).encode()).hexdigest()}" for i in range(200_000)]
    dropped = len(fresh) - len(_admit(admission, third, fresh))
    bound = MAX_FALSE_POSITIVE_RATE * len(fresh)
    assert dropped <= bound + 3 * math.sqrt(bound), dropped


def test_the_filter_expires_with_the_dupefilter_and_a_recrawl_restart_lifts_it(
    redis_settings: Settings, redis_client: redis.Redis
) -> None:
    """The filter's keys get the dupefilter's expiry at every admit (DUPEFILTER_TIMEOUT: how a
    stopped or expired crawl's seen-set goes), and a stopped crawl sent again with ``recrawl``
    starts afresh without its filter (§19.1)."""
    keys = keys_from_settings(redis_settings)
    shard = keys.shard_of(SITE)
    admission = Admission(None, redis_client, None, keys, 600.0, 1.0, None, bloom_after=5 * keys.shards)  # type: ignore[arg-type]
    (page,) = _pages(redis_client, redis_settings, 1)
    assert len(_admit(admission, page, _urls("e", 300))) == 300
    names = [keys.dupefilter(*CRAWL, shard), *_filter_keys(redis_client, keys)]
    assert len(names) >= 4  # the dupefilter, the state, two layers or more
    assert all(0 < int(redis_client.pttl(n)) <= 1000 for n in names)
    time.sleep(1.2)
    assert not any(redis_client.exists(n) for n in names)

    admission.filter_ttl_ms = 600_000
    assert len(_admit(admission, page, _urls("r", 300))) == 300
    names = _filter_keys(redis_client, keys)
    _send_again_stopped(redis_client, redis_settings, keys)
    assert not any(redis_client.exists(n) for n in names)


@pytest.fixture
def site() -> TestSite:
    site = TestSite()
    site.start()
    yield site  # type: ignore[misc]
    site.stop()


def test_a_crawl_past_a_tiny_threshold_fetches_every_page_once(
    site: TestSite, redis_url: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A real crawler with DUPEFILTER_BLOOM_ABOVE=5 crawls a 20-page site whose pages all link to
    each other: every page is fetched exactly once, the filter answered for the repeats."""
    pages = [f"/m/{i}" for i in range(20)]
    for page in pages:
        site.page(page, html(*[p for p in pages if p != page]))
    with crawler_module(redis_url, kafka_bootstrap, tmp_path, "bf", DUPEFILTER_BLOOM_ABOVE=5) as env:
        seed(env["settings"], env["redis"], appid="bapp", crawlid="m1", url=site.url("/m/0"), maxdepth=3)
        env["collector"].wait_for("m1", len(pages), timeout=60)
        env["collector"].settle("m1", quiet_s=1.0)
        reader = FrontierReader(env["redis"], keys_from_settings(env["settings"]), 3600)
        hits = reader.bloom_hits("link", "bapp", "m1")
    assert sorted(s.path for s in site.hits("/m/")) == sorted(pages)
    assert hits is not None and hits > 0


@pytest.mark.parametrize(
    ("above", "shards", "per_shard"), [(0, 64, 0), (10_000, 1, 10_000), (10_000, 64, 157), (5, 64, 1)]
)
def test_the_threshold_is_cluster_wide(redis_client: redis.Redis, above: int, shards: int, per_shard: int) -> None:
    """DUPEFILTER_BLOOM_ABOVE counts a crawl's whole seen-set: each of the frontier's shards takes
    its share (rounded up), so a Redis Cluster's 64 shards do not keep 64 times the threshold in
    dupefilter hashes (70 bytes a URL where the filter takes 3-4)."""
    admission = Admission(None, redis_client, None, Keys("x", shards), 600.0, 600.0, None, bloom_after=above)  # type: ignore[arg-type]
    assert admission.bloom_after == per_shard
