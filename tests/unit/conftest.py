"""Fixtures of the frontier unit tests: each test using them runs on a frontier of one shard (a
single Redis's layout) and of four (every key with its hash tag, docs/contract.md §18.2)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import redis

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.validation import RequestValidator
from crawlhive.utils.frontier import Frontier, FrontierLeaser, FrontierReader, ThrottleConfig
from crawlhive.utils.process.intake import request_validator

#: A throttle that never holds a test back.
UNTHROTTLED = ThrottleConfig(hits=1000, window_s=1.0, moderated=False, type_enabled=True, egress_id=None)


@pytest.fixture(params=[1, 4], ids=["one-shard", "4-shards"])
def keys(redis_settings: Settings, request: pytest.FixtureRequest) -> Keys:
    """The frontier's keys with one shard and with four (test files may define their own)."""
    return Keys(redis_settings["REDIS_KEY_PREFIX"], shards=request.param)


@pytest.fixture
def frontier(redis_client: redis.Redis, keys: Keys) -> Frontier:
    return Frontier(redis_client, keys, record_ttl_s=3600)


@pytest.fixture
def worker(redis_client: redis.Redis, keys: Keys) -> FrontierLeaser:
    return FrontierLeaser(redis_client, keys, lease_s=30, record_ttl_s=3600, throttle=UNTHROTTLED)


@pytest.fixture
def reader(redis_client: redis.Redis, keys: Keys) -> FrontierReader:
    return FrontierReader(redis_client, keys, record_ttl_s=3600)


@pytest.fixture(scope="module")
def validator() -> RequestValidator:
    """The request validator with the default settings (the validation tests share it)."""
    return request_validator(Settings.from_overrides())


@pytest.fixture
def restore_root() -> Iterator[None]:
    """The root logger's handlers and level as they were before the test (configure_logging's tests)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
