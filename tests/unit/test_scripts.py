"""The Lua script registry: every script a file with its KEYS/ARGV header, loadable on the Redis the
tests run on, includes expanded once, NOSCRIPT handled; no Lua left in Python strings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis

from crawlhive.utils.backends import scripts as registry
from crawlhive.utils.backends.scripts import LUA_DIR, names, scripts, source

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("utils", "crawler", "kafka-monitor", "redis-monitor", "rest")


def test_every_script_has_a_header_and_loads_on_redis(redis_client: redis.Redis) -> None:
    assert len(names()) >= 18
    for name in names():
        text = (LUA_DIR / f"{name}.lua").read_text()
        header = text.split("\n\n", 1)[0]
        assert header.startswith("-- "), f"{name}.lua: starts with a comment saying what it does"
        if "KEYS[" in text:
            assert "KEYS" in header, f"{name}.lua: its header lists its KEYS"
        if "ARGV[" in text:
            assert "ARGV" in header, f"{name}.lua: its header lists its ARGV"
        assert "--! include" not in source(name)
        redis_client.script_load(source(name))  # compiles (a Lua syntax error raises)


def test_includes_are_expanded_once_in_order() -> None:
    text = source("lease_reclaim")  # lib/lease.lua and lib/requeue.lua, both need lib/time.lua or score
    assert text.count("local function secs(") == 1
    assert text.count("local function queue_score(") == 1
    assert text.index("local function lease_expired(") < text.index("local function requeue_lease(")


def test_no_lua_is_left_in_python_strings() -> None:
    offenders = [
        str(path.relative_to(REPO))
        for folder in SHIPPED
        for path in (REPO / folder).rglob("*.py")
        if re.search(r"redis\.(p)?call\(", path.read_text())
    ]
    assert offenders == []


def test_one_script_set_per_client_and_noscript_is_handled(redis_client: redis.Redis, names: object) -> None:
    assert scripts(redis_client) is scripts(redis_client)
    other = redis.Redis.from_url(_url(redis_client))
    try:
        assert scripts(other) is not scripts(redis_client)
    finally:
        other.close()
    key = f"{names.key_prefix}:hb"  # type: ignore[attr-defined]
    redis_client.script_flush()

    def build() -> redis.client.Pipeline:
        pipe = redis_client.pipeline(transaction=True)
        scripts(redis_client).queue(pipe, "heartbeat_prune", [key], [])
        return pipe

    assert scripts(redis_client).execute(build) == [[]]  # NOSCRIPT: loaded, then run again
    with pytest.raises(FileNotFoundError):
        registry.source("no_such_script")


def _url(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"
