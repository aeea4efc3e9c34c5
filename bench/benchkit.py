"""What several benchmarks share (they run as ``python bench/<name>.py``, so this imports as ``benchkit``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from crawlhive.app.embedded import EmbeddedCluster, EmbeddedRedis
from crawlhive.utils.backends.kafka_clients import ensure_topics
from crawlhive.utils.backends.redis_clients import keys_from_settings, redis_from_settings
from crawlhive.utils.config.settings import Settings, env_value

if TYPE_CHECKING:
    from crawlhive.utils.backends.keys import Keys
    from crawlhive.utils.backends.redis_types import RedisClient


def bench_settings(
    cluster: EmbeddedCluster, work: Path, prefix: str, topics: tuple[str, ...], redis_url: str | None = None
) -> Settings:
    """Settings on *cluster* under key and topic prefix *prefix*, with *topics* (short names) created.
    FRONTIER_SHARDS comes from the environment, as the benchmarked crawlers' does (e.g.
    ``FRONTIER_SHARDS=4 bench/crawl.py`` measures the sharded layout on one Redis); *redis_url*
    replaces the cluster's own Redis (e.g. a Redis Cluster)."""
    settings = Settings.from_overrides(
        REDIS_URL=redis_url or cluster.redis_url,
        KAFKA_BOOTSTRAP_SERVERS=cluster.bootstrap,
        REDIS_KEY_PREFIX=prefix,
        KAFKA_TOPIC_PREFIX=prefix,
        CRAWLHIVE_HOME=str(work),
        FRONTIER_SHARDS=int(os.environ.get("FRONTIER_SHARDS") or 0),
    )
    ensure_topics(settings, [settings.topic(t) for t in topics])
    return settings


ROOT = Path(__file__).resolve().parent.parent


def crawler_env(settings: Settings, work: Path, scrapy: dict[str, Any], **overrides: str) -> dict[str, str]:
    """The environment of a benchmarked ``crawlhive crawler`` on *settings*' Redis, broker and
    prefixes: unthrottled, robots.txt off (like the plain-Scrapy baseline), loopback allowed (the
    bench site), quiet, with the extra Scrapy settings *scrapy* (the measuring extensions) and
    *overrides* (CONCURRENT_REQUESTS, RENDER_CONCURRENCY …)."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS")}
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(ROOT / "bench" / "baseline"), str(ROOT / "bench")]),
            "REDIS_URL": settings["REDIS_URL"],
            "KAFKA_BOOTSTRAP_SERVERS": ",".join(settings["KAFKA_BOOTSTRAP_SERVERS"]),
            "REDIS_KEY_PREFIX": settings["REDIS_KEY_PREFIX"],
            "KAFKA_TOPIC_PREFIX": settings["KAFKA_TOPIC_PREFIX"],
            "CRAWLHIVE_HOME": str(work),
            "QUEUE_HITS": "1000000000",
            "QUEUE_WINDOW": "1",
            "QUEUE_MODERATED": "false",
            "ROBOTSTXT_OBEY": "false",
            "CRAWLER_ALLOWED_NETWORKS": '["127.0.0.0/8"]',  # the bench site is on loopback
            "LOG_LEVEL": "WARNING",
            "SCRAPY_SETTINGS": env_value(scrapy),
            **overrides,
        }
    )
    return env


# --- the Redis of the memory and recrawl benchmarks (bench/memory.py, bench/recrawl_*.py) ----------


@contextmanager
def bench_redis(url: str | None = None, *, cluster: bool = False) -> Iterator[str]:
    """The URL of the Redis a benchmark fills: *url* (an existing, otherwise idle Redis or Redis
    Cluster: other clients' writes would be counted), else a private local Redis Cluster of 3
    primaries without replicas (*cluster*: ``tests/support/redis_cluster.py``), else a private redis-server;
    the private ones are stopped on leaving."""
    if url:
        yield url
        return
    if cluster:
        sys.path.insert(0, str(ROOT / "tests"))
        from support.redis_cluster import LocalCluster

        with LocalCluster(primaries=3, replicas=0) as local:
            yield local.url
        return
    with EmbeddedRedis() as server:
        yield server.url


def clear_prefix(client: RedisClient, prefix: str) -> None:
    """Delete every key under *prefix* (a benchmark's own key prefix), 10,000 at a time."""
    while batch := list(client.scan_iter(match=f"{prefix}*", count=10000))[:10000]:
        client.unlink(*batch)  # on a Redis Cluster redis-py splits it by slot


@contextmanager
def prefixed_redis(url: str, prefix: str, **overrides: Any) -> Iterator[tuple[Settings, RedisClient, Keys]]:
    """Settings, a bytes client and the key formats for key prefix *prefix* on the Redis at *url*
    (FRONTIER_SHARDS from the environment, as the benchmarked processes' own; 64 shards on a Redis
    Cluster), *overrides* being further settings; the prefix is emptied before and after."""
    settings = Settings.from_overrides(
        REDIS_URL=url,
        REDIS_KEY_PREFIX=prefix,
        FRONTIER_SHARDS=int(os.environ.get("FRONTIER_SHARDS") or 0),
        **overrides,
    )
    client = redis_from_settings(settings)
    clear_prefix(client, prefix)
    try:
        yield settings, client, keys_from_settings(settings)
    finally:
        clear_prefix(client, prefix)
        client.close()


def tree_cpu(pid: int) -> float:
    """CPU seconds (user and system) of process *pid* and its live children."""
    proc = psutil.Process(pid)
    total = 0.0
    for each in [proc, *proc.children(recursive=True)]:
        try:
            times = each.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total
