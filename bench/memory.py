"""Benchmark: Redis memory per queued request, per dedupe entry and per page-cap entry.

Fills a private Redis the way the cluster does and reports the growth of ``INFO memory``
``used_memory`` (bytes the allocator handed to Redis) per entry:

* **queued request**: *N* followed links (``crawlhive.crawler.requests.child_request`` of a seed
  made by ``seed_from_request``, exactly what a crawler queues) pushed through
  :meth:`crawlhive.utils.frontier.Frontier.push` in batches of 2,000 (a kafka-monitor batch),
  over *D* domains and *C* crawls. Everything the push writes counts (the per-crawl queues, the
  per-domain and per-spider indexes, crawl records). Measured twice: with a crawl request that
  sets no options, and with a "rich" one (allowed_domains, allow_regex, attrs, useragent), because
  every queued request carries its crawl's options.
* **dedupe entry**: *N* fingerprints in the per-crawl dupefilter hashes (``Keys.dupefilter``), as
  the crawler's admit script writes them: field = the stored form of the Scrapy request
  fingerprint (``crawler/admit.py stored_fingerprint``: 12 bytes), value = the first 4 bytes of the
  stored fingerprint of the page that queued it (one page per 20 links), ``HSETNX``.
* **page-cap entry**: *N* fingerprints in the page-cap sets (``Keys.page_caps``), written only for
  crawls with ``domain_max_pages`` or GLOBAL_PAGE_PER_DOMAIN_LIMIT.
* **seen-set per URL** (issue 46): *N* URLs of one crawl in one shard, ``MEMORY USAGE`` of the
  keys over *N*: in its dupefilter hash, and in the Bloom filter it continues in past
  DUPEFILTER_BLOOM_ABOVE (``utils/frontier/bloom.py``; built with its Python twin, bit for bit
  what ``crawler_admit.lua`` writes), its first layer sized for *N* and for *N* / 100 (a chain
  of doubling layers).

Then the figure of docs/contract.md §18.5: **bytes per queued URL** = queued request (plain crawl)
+ dedupe entry (the large-crawl one), against the target of 300.

Usage: ``.venv/bin/python bench/memory.py [--requests N] [--domains D] [--crawls C] [--url-length L]
[--redis-url URL]`` (defaults 1000000, 1000, 10, 77); the URL length used is in the report.
Without ``--redis-url`` a private redis-server is started and stopped;
with it, use an otherwise idle Redis (other clients' writes would be counted) and a key prefix of
its own is deleted afterwards.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchkit import bench_redis, clear_prefix, prefixed_redis
from redis.cluster import RedisCluster
from scrapy import Request

from crawlhive.crawler.admit import stored_fingerprint
from crawlhive.crawler.requests import child_request, url_fingerprint
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import is_cluster, write_pipeline
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.frontier import Frontier, FrontierRequest, OptionSet, seed_from_request
from crawlhive.utils.frontier.bloom import BloomLayers

PREFIX = "benchmem"
SPIDER, APPID = "link", "benchapp"
BATCH = 2000
LINKS_PER_PAGE = 20
#: Bytes of Redis memory per queued URL with its dedupe entry that docs/contract.md §18.5 allows.
TARGET_PER_URL = 300
#: DUPEFILTER_TIMEOUT's default, in milliseconds: the expiry the crawler gives filters and caps.
FILTER_TTL_MS = 600_000

#: Options of the "rich" crawl request, beside url, appid and crawlid.
RICH_OPTIONS: dict[str, Any] = {
    "allowed_domains": ["site0000.com", "site0001.com", "site0002.com"],
    "allow_regex": [r"/articles/\d{4}/", r"/news/"],
    "deny_regex": [r"\?sort="],
    "useragent": "Mozilla/5.0 (compatible; crawlhive-bench/1.0; +https://example.com/bot)",
    "attrs": {"job": "nightly-news", "customer": "acme", "tags": ["news", "eu"]},
}

#: The schema defaults kafka-monitor fills in before a crawl request reaches the frontier (docs/contract.md §2.1).
CRAWL_DEFAULTS: dict[str, Any] = {
    "spiderid": "link",
    "priority": 1,
    "maxdepth": 0,
    "expires": 0,
    "method": "GET",
    "domain_max_pages": None,
    "allowed_domains": None,
    "allow_regex": None,
    "deny_regex": None,
    "deny_extensions": None,
    "useragent": None,
    "cookie": None,
    "attrs": None,
    "headers": None,
    "body": None,
    "cookies": None,
}


def used_memory(client: RedisClient) -> int:
    """``used_memory`` of the Redis, or the sum over a Redis Cluster's primaries."""
    if is_cluster(client):
        per_node = client.info("memory", target_nodes=RedisCluster.PRIMARIES)
        return sum(int(info["used_memory"]) for info in per_node.values())
    return int(client.info("memory")["used_memory"])


#: Characters of every link's URL (``--url-length``); the shortest possible is 77.
URL_LENGTH = 77


def link_url(domain: int, i: int) -> str:
    """A typical article URL of URL_LENGTH characters (77 unless ``--url-length`` says otherwise) on
    the registered domain ``site<domain>.com``."""
    slug = f"a-story-about-item-{i:07d}"
    url = f"http://www.site{domain:04d}.com/news/articles/2024/{i % 12 + 1:02d}/{slug}.html"
    return url.replace(slug, slug + "x" * max(0, URL_LENGTH - len(url)))


def links(requests: int, domains: int, crawls: int, options: dict[str, Any]) -> Iterator[FrontierRequest]:
    """*requests* depth-1 links, round-robin over *crawls* crawls, each spread over all *domains* domains."""
    seeds = []
    for c in range(crawls):
        message = {**CRAWL_DEFAULTS, **options, "url": "http://www.site0000.com/", "appid": APPID}
        message.update(crawlid=f"crawl-{c:04d}", maxdepth=2)
        seeds.append(seed_from_request(message, origin=f"demo.incoming/0/{c}@1714563600000"))
    for i in range(requests):
        yield child_request(seeds[i % crawls], Request(link_url(i // crawls % domains, i)), spider=None)  # type: ignore[arg-type]


def measure(client: RedisClient, label: str, count: int, fill: Callable[[], None]) -> float:
    """Run *fill* (which adds *count* entries); print and return the used_memory growth per entry."""
    before = used_memory(client)
    started = time.perf_counter()
    fill()
    elapsed = time.perf_counter() - started
    per_entry = (used_memory(client) - before) / count
    print(f"{label:<44} {per_entry:8.0f} bytes/entry  ({count:,} entries, {count / elapsed:,.0f}/s)", flush=True)
    return per_entry


def push_all(client: RedisClient, frontier: Frontier, requests: Iterator[FrontierRequest]) -> None:
    batch: list[FrontierRequest] = []
    for request in requests:
        batch.append(request)
        if len(batch) == BATCH:
            pipe = write_pipeline(client)
            frontier.push(batch, pipe)
            pipe.execute()
            batch = []
    if batch:
        pipe = write_pipeline(client)
        frontier.push(batch, pipe)
        pipe.execute()


def fingerprints(count: int) -> Iterator[bytes]:
    """Stored request fingerprints (as the dupefilter holds them) of *count* distinct URLs
    (Scrapy's fingerprint of ``Request(url)``, ``url_fingerprint``)."""
    for i in range(count):
        yield stored_fingerprint(url_fingerprint(link_url(i % 100, i)))


def fill_dupefilter(client: RedisClient, keys: Keys, count: int, crawls: int) -> None:
    pipe = client.pipeline(transaction=False)
    shards = [keys.shard_of(f"site{d:04d}.com") for d in range(100)]
    owner = b""
    for i, fp in enumerate(fingerprints(count)):
        if i % LINKS_PER_PAGE == 0:  # a new page that queues the next links
            owner = stored_fingerprint(hashlib.sha1(f"page-{i}".encode()).hexdigest())[:4]
        shard = shards[i % 100]  # the link's domain's (fingerprints() walks 100 domains)
        pipe.hsetnx(keys.dupefilter(SPIDER, APPID, f"crawl-{i % crawls:04d}", shard), fp, owner)
        if i % 5000 == 4999:
            pipe.execute()
    for c in range(min(crawls, count)):  # the admit script renews each filter's expiry
        for shard in set(shards):
            pipe.pexpire(keys.dupefilter(SPIDER, APPID, f"crawl-{c:04d}", shard), FILTER_TTL_MS)
    pipe.execute()


def fill_page_caps(client: RedisClient, keys: Keys, count: int, domains: int, crawls: int) -> None:
    pipe = client.pipeline(transaction=False)
    for i, fp in enumerate(fingerprints(count)):
        key = keys.page_caps(SPIDER, APPID, f"crawl-{i % crawls:04d}", f"site{i // crawls % domains:04d}.com")
        pipe.sadd(key, fp)
        pipe.pexpire(key, FILTER_TTL_MS)  # as the admit script does
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()


def key_bytes(client: RedisClient, names: list[str]) -> int:
    """``MEMORY USAGE`` of *names*, summed (every field counted: ``SAMPLES 0``)."""
    return sum(int(client.memory_usage(name, samples=0) or 0) for name in names)


def seen_set_bytes(client: RedisClient, keys: Keys, count: int) -> None:
    """Print the bytes per URL of *count* URLs of one crawl's seen-set in one shard: in its
    dupefilter, and in a Bloom filter whose first layer is sized for *count* and for count / 100."""
    dupefilter = keys.dupefilter(SPIDER, APPID, "seen-hash")
    owner = b"\x00\x01\x02\x03"
    pipe = client.pipeline(transaction=False)
    for i, fp in enumerate(fingerprints(count)):
        pipe.hsetnx(dupefilter, fp, owner)
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()
    per_url = key_bytes(client, [dupefilter]) / count
    print(f"{f'seen-set of {count:,} URLs, dupefilter hash':<44} {per_url:8.2f} bytes/URL", flush=True)
    client.delete(dupefilter)
    for threshold in (count, max(1, count // 100)):
        bloom = BloomLayers.for_threshold(threshold)
        for fp in fingerprints(count):
            bloom.add(fp)
        state = keys.dupefilter_bloom(SPIDER, APPID, f"seen-bloom-{threshold}")
        client.hset(state, mapping={"count": bloom.count, "hits": 0, "exp": bloom.exp, "layers": len(bloom.layers)})
        names = [state]
        for i, bits in enumerate(bloom.layers):
            names.append(keys.dupefilter_bloom_layer(SPIDER, APPID, f"seen-bloom-{threshold}", i))
            client.set(names[-1], bytes(bits))
        per_url = key_bytes(client, names) / count
        label = f"seen-set of {count:,} URLs, Bloom ({len(bloom.layers)} layer{'s' * (len(bloom.layers) > 1)})"
        print(f"{label:<44} {per_url:8.2f} bytes/URL  (DUPEFILTER_BLOOM_ABOVE={threshold:,}; target <= 2)", flush=True)
        client.delete(*names)


def run(url: str, requests: int, domains: int, crawls: int) -> int:
    with prefixed_redis(url, PREFIX) as (_settings, client, keys):  # 64 shards on a Redis Cluster
        server = client.info("server")
        print(f"Redis {server['redis_version']}, allocator {client.info('memory')['mem_allocator']}")
        sample = next(links(1, 1, 1, {}))
        rich_sample = next(links(1, 1, 1, RICH_OPTIONS))
        for r in (sample, rich_sample):
            r.option_set = OptionSet.of(r)
        print(
            f"{requests:,} requests over {domains:,} domains and {crawls:,} crawls; queue member: "
            f"{len(sample.member())} bytes (plain crawl), {len(rich_sample.member())} bytes (rich crawl), "
            f"URL {len(sample.url)} characters"
        )
        frontier = Frontier(client, keys, record_ttl_s=3600)
        queued = measure(
            client,
            "queued request, plain crawl",
            requests,
            lambda: push_all(client, frontier, links(requests, domains, crawls, {})),
        )
        clear_prefix(client, PREFIX)
        rich_keys = Keys(PREFIX + "rich", keys.shards)
        rich = Frontier(client, rich_keys, record_ttl_s=3600)
        measure(
            client,
            "queued request, rich crawl",
            requests,
            lambda: push_all(client, rich, links(requests, domains, crawls, RICH_OPTIONS)),
        )
        clear_prefix(client, PREFIX + "rich")
        per_crawl = requests // crawls
        dedupe = measure(
            client,
            f"dedupe entry ({per_crawl:,} per crawl)",
            requests,
            lambda: fill_dupefilter(client, keys, requests, crawls),
        )
        measure(
            client,
            "dedupe entry (15 per crawl, 1 page's links)",
            requests,
            lambda: fill_dupefilter(client, Keys(PREFIX + "small", keys.shards), requests, max(1, requests // 15)),
        )
        per_url = queued + dedupe
        verdict = "met" if per_url <= TARGET_PER_URL else "NOT MET"
        label = "per queued URL (queued request + dedupe entry)"
        print(
            f"{label:<44} {per_url:8.0f} bytes  (URLs of {len(sample.url)} characters; "
            f"target <= {TARGET_PER_URL}: {verdict})"
        )
        measure(
            client,
            f"page-cap entry ({requests // (crawls * domains):,} per crawl and domain)",
            requests,
            lambda: fill_page_caps(client, keys, requests, domains, crawls),
        )
        seen_set_bytes(client, keys, requests)
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", help="an existing, otherwise idle Redis (default: a private redis-server)")
    parser.add_argument("--requests", type=int, default=1_000_000, help="entries of each kind (default 1000000)")
    parser.add_argument("--domains", type=int, default=1000)
    parser.add_argument("--crawls", type=int, default=10)
    parser.add_argument("--url-length", type=int, default=77, help="characters per URL (at least 77)")
    args = parser.parse_args(argv)
    global URL_LENGTH
    URL_LENGTH = args.url_length
    with bench_redis(args.redis_url) as url:
        return run(url, args.requests, args.domains, args.crawls)


if __name__ == "__main__":
    sys.exit(main())
