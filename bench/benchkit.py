"""What several benchmarks share (they run as ``python bench/<name>.py``, so this imports as ``benchkit``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from crawlhive.app.embedded import EmbeddedCluster
from crawlhive.utils.kafka_clients import ensure_topics
from crawlhive.utils.settings import Settings, env_value


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
