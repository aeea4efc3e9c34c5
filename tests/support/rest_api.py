"""The fixtures of the REST API tests (import them by name): ``rest_settings`` of the module's own
key and topic prefix, the stand-in redis-monitor ``monitor`` and the served app ``rest`` (one of
each per test module), an ``http`` client of it and a Redis client ``rclient``; and what their
tests share: the expected failure envelope, unique names, the /metrics samples.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from crawlhive.utils.config.settings import Settings
from support.crawler import redis_for
from support.rest import FakeRedisMonitor, RunningRest, delete_prefix, running_rest, stats_answer

WAIT_S = 1.5
MAX_BODY = 4096


@pytest.fixture(scope="module")
def rest_settings(redis_url: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    token = f"r{secrets.token_hex(5)}"
    settings = Settings.from_overrides(
        REDIS_URL=redis_url,
        KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
        REDIS_KEY_PREFIX=token,
        KAFKA_TOPIC_PREFIX=token,
        CRAWLHIVE_HOME=str(tmp_path_factory.mktemp("home")),
        WAIT_FOR_RESPONSE_TIME=WAIT_S,
        REST_MAX_BODY_BYTES=MAX_BODY,
        SCHEMA_PRIORITY_MAX=50,
        HEARTBEAT_INTERVAL=1.0,
    )
    yield settings
    client = redis_for(redis_url)
    delete_prefix(client, token)
    client.close()


@pytest.fixture(scope="module")
def monitor(rest_settings: Settings) -> Iterator[FakeRedisMonitor]:
    def answer(request: dict[str, object]) -> dict[str, object] | None:
        if str(request.get("uuid", "")).startswith("late-"):
            return None  # the test answers these itself, after /feed gave up waiting
        return stats_answer(request)

    fake = FakeRedisMonitor(rest_settings, answer)
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def rest(rest_settings: Settings, monitor: FakeRedisMonitor) -> Iterator[RunningRest]:
    with running_rest(rest_settings) as running:
        yield running


@pytest.fixture
def http(rest: RunningRest) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=rest.url, timeout=30) as client:
        yield client


@pytest.fixture
def rclient(rest_settings: Settings) -> Iterator[redis.Redis]:
    client = redis_for(rest_settings["REDIS_URL"])
    yield client
    client.close()


def unique(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(4)}"


def failure(message: str, cause: str | None = None) -> dict[str, object]:
    error: dict[str, object] = {"message": message}
    if cause is not None:
        error["cause"] = cause
    return {"status": "FAILURE", "data": None, "error": error}


def _metrics(http: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = http.get("/metrics").text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("crawlhive_")
    }
