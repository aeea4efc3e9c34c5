"""ScriptBatcher against a real Redis: coalescing, exactly-once after a script flush, error isolation."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio

from crawlhive.app.embedded import free_port
from crawlhive.crawler.batching import ScriptBatcher
from crawlhive.utils.backends import scripts as registry

if TYPE_CHECKING:
    from conftest import IsolatedNames

# KEYS[1]: a counter. ARGV[1]: an amount. Adds it and returns the new value, so every execution of
# a call is visible in the counter.
_ADD = "return redis.call('INCRBY', KEYS[1], ARGV[1])"
_FAIL_ON_NEGATIVE = "if tonumber(ARGV[1]) < 0 then return redis.error_reply('negative') end return ARGV[1]"


@pytest.fixture(autouse=True)
def test_scripts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The batcher runs scripts of the registry by name: these two, from a folder of this test's."""
    (tmp_path / "add.lua").write_text(_ADD)
    (tmp_path / "fail_on_negative.lua").write_text(_FAIL_ON_NEGATIVE)
    monkeypatch.setattr(registry, "LUA_DIR", tmp_path)
    registry.source.cache_clear()
    yield
    registry.source.cache_clear()


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_calls_made_while_a_pipeline_is_out_go_together(
    redis_url: str, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    script = "add"
    redis_client.script_load(_ADD)  # so that no NoScriptError retry adds a round trip
    key = f"{names.key_prefix}:counter"

    async def scenario() -> tuple[list[int], int, int]:
        batcher = ScriptBatcher(redis.asyncio.Redis.from_url(redis_url))
        first = batcher.call(script, [key], [1])  # goes out alone at the next loop turn
        await asyncio.sleep(0)  # the first pipeline is now in flight
        rest = [batcher.call(script, [key], [1]) for _ in range(10)]
        replies = await asyncio.gather(first, *rest)
        await batcher.close()
        return [int(r) for r in replies], batcher.round_trips, batcher.calls

    replies, round_trips, calls = _run(scenario())
    assert sorted(replies) == list(range(1, 12))
    assert calls == 11
    assert round_trips == 2
    assert int(redis_client.get(key) or 0) == 11


def test_an_idle_batcher_sends_each_call_at_once(
    redis_url: str, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    script = "add"
    redis_client.script_load(_ADD)

    async def scenario() -> int:
        batcher = ScriptBatcher(redis.asyncio.Redis.from_url(redis_url))
        for _ in range(3):
            await batcher.call(script, [f"{names.key_prefix}:counter"], [5])
        await batcher.close()
        return batcher.round_trips

    assert _run(scenario()) == 3
    assert int(redis_client.get(f"{names.key_prefix}:counter") or 0) == 15


def test_flushed_scripts_are_loaded_again_and_no_call_runs_twice(
    redis_url: str, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    script = "add"
    key = f"{names.key_prefix}:counter"

    async def scenario() -> list[int]:
        batcher = ScriptBatcher(redis.asyncio.Redis.from_url(redis_url))
        await batcher.call(script, [key], [1])
        redis_client.script_flush()
        replies = await asyncio.gather(*(batcher.call(script, [key], [1]) for _ in range(20)))
        await batcher.close()
        return [int(r) for r in replies]

    replies = _run(scenario())
    assert sorted(replies) == list(range(2, 22))
    assert int(redis_client.get(key) or 0) == 21


def test_a_failing_call_fails_alone(redis_url: str, redis_client: redis.Redis) -> None:
    script = "fail_on_negative"

    async def scenario() -> list[Any]:
        batcher = ScriptBatcher(redis.asyncio.Redis.from_url(redis_url))
        calls = [batcher.call(script, [], [n]) for n in (1, -1, 2)]
        results = await asyncio.gather(*calls, return_exceptions=True)
        await batcher.close()
        return results

    ok1, failed, ok2 = _run(scenario())
    assert (ok1, ok2) == (b"1", b"2")
    assert isinstance(failed, redis.ResponseError)
    assert "negative" in str(failed)


def test_an_unreachable_redis_fails_every_waiting_call() -> None:
    script = "add"

    async def scenario() -> list[Any]:
        batcher = ScriptBatcher(redis.asyncio.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=1))
        calls = [batcher.call(script, ["k"], [1]) for _ in range(3)]
        results = await asyncio.gather(*calls, return_exceptions=True)
        await batcher.close()
        return results

    results = _run(scenario())
    assert len(results) == 3
    for result in results:
        assert isinstance(result, redis.RedisError)


@pytest.mark.parametrize("count", [1, 300])
def test_bursts_beyond_one_pipeline_are_split(
    redis_url: str, redis_client: redis.Redis, names: IsolatedNames, count: int
) -> None:
    script = "add"
    redis_client.script_load(_ADD)
    key = f"{names.key_prefix}:counter"

    async def scenario() -> int:
        batcher = ScriptBatcher(redis.asyncio.Redis.from_url(redis_url))
        await asyncio.gather(*(batcher.call(script, [key], [1]) for _ in range(count)))
        await batcher.close()
        return batcher.round_trips

    round_trips = _run(scenario())
    assert int(redis_client.get(key) or 0) == count
    assert round_trips == (1 if count == 1 else 2)  # MAX_BATCH is 256


def test_an_unexpected_error_fails_the_batch_and_the_batcher_goes_on(
    redis_url: str, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    script = "add"
    redis_client.script_load(_ADD)
    key = f"{names.key_prefix}:counter"

    async def scenario() -> tuple[list[Any], int]:
        client = redis.asyncio.Redis.from_url(redis_url)
        batcher = ScriptBatcher(client)
        pool = client.connection_pool
        real = pool.get_connection
        broken = [True]

        async def get_connection(*args: Any) -> Any:
            if broken[0]:
                broken[0] = False
                raise RuntimeError("simulated client bug")
            return await real(*args)

        pool.get_connection = get_connection  # type: ignore[method-assign]
        failed = await asyncio.gather(batcher.call(script, [key], [1]), return_exceptions=True)
        after = await batcher.call(script, [key], [1])
        await batcher.close()
        return failed, int(after)

    failed, after = _run(scenario())
    assert isinstance(failed[0], redis.RedisError) and "simulated client bug" in str(failed[0])
    assert after == 1  # the failed call never ran; the next one did


def test_a_connection_redis_closed_while_idle_is_replaced_and_the_call_runs_once(
    redis_url: str, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    """One Redis: the batcher's connection, closed by the server between two batches (a restart, an
    idle time-out), fails before any reply; the batch goes again on a new connection, once."""
    redis_client.script_load(_ADD)
    key = f"{names.key_prefix}:counter"

    async def scenario() -> tuple[int, int]:
        batcher = ScriptBatcher(redis.asyncio.Redis.from_url(redis_url))
        await batcher.call("add", [key], [1])
        killed = int(redis_client.client_kill_filter(_type="normal", skipme=True))
        after = await batcher.call("add", [key], [1])
        await batcher.close()
        return killed, int(after)

    killed, after = _run(scenario())
    assert killed >= 1
    assert after == 2 and int(redis_client.get(key) or 0) == 2  # ran once, on the new connection
