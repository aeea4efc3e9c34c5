"""What several benchmarks share (they run as ``python bench/<name>.py``, so this imports as ``benchkit``)."""

from __future__ import annotations

from pathlib import Path

from crawlhive.utils.app.embedded import EmbeddedCluster
from crawlhive.utils.connections import ensure_topics
from crawlhive.utils.settings import Settings


def bench_settings(cluster: EmbeddedCluster, work: Path, prefix: str, topics: tuple[str, ...]) -> Settings:
    """Settings on *cluster* under key and topic prefix *prefix*, with *topics* (short names) created."""
    settings = Settings.from_overrides(
        REDIS_URL=cluster.redis_url,
        KAFKA_BOOTSTRAP_SERVERS=cluster.bootstrap,
        REDIS_KEY_PREFIX=prefix,
        KAFKA_TOPIC_PREFIX=prefix,
        CRAWLHIVE_HOME=str(work),
    )
    ensure_topics(settings, [settings.topic(t) for t in topics])
    return settings
