"""A crawler's finish of a page (its links queued, its lease acked) goes through the asyncio batcher,
never the blocking client, pages finished meanwhile go together, and a finish that fails on Redis
is kept and written later (crawler/leases.py); the admit reads a crawl's dupefilter with one HMGET
(utils/backends/lua/crawler_admit.lua). On one Redis and, with CRAWLHIVE_TEST_REDIS=cluster, on a cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster
from redis.connection import AbstractConnection

from crawlhive.app.embedded import free_port
from crawlhive.crawler.admit import Admission, Verdict
from crawlhive.crawler.batching import ScriptBatcher
from crawlhive.crawler.leases import LeaseContext, LeaseTable
from crawlhive.crawler.requests import link_children, url_fingerprint
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import (
    CommandList,
    async_redis_from_settings,
    is_cluster,
    keys_from_settings,
    write_pipeline,
)
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import Frontier, FrontierLeaser, FrontierRequest, ThrottleConfig

FAST = ThrottleConfig(hits=1000, window_s=1.0, moderated=False, type_enabled=True, egress_id=None)


class BlockingCalls:
    """Counts what the blocking redis-py connections send (each command or pipeline)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent = 0
        original = AbstractConnection.send_packed_command

        def counting(connection: Any, command: Any, check_health: bool = True) -> None:
            self.sent += 1
            original(connection, command, check_health)

        monkeypatch.setattr(AbstractConnection, "send_packed_command", counting)


@pytest.fixture
def blocking(monkeypatch: pytest.MonkeyPatch) -> Iterator[BlockingCalls]:
    yield BlockingCalls(monkeypatch)


def _table(settings: Settings, client: redis.Redis, batcher: ScriptBatcher | None) -> tuple[LeaseTable, FrontierLeaser]:
    keys = keys_from_settings(settings)
    worker = FrontierLeaser(client, keys, lease_s=30.0, record_ttl_s=3600, throttle=FAST)
    frontier = Frontier.from_settings(client, settings)
    table = LeaseTable(client, keys, worker, frontier, max_hold_s=600, on_crawled=lambda: None, batcher=batcher)
    return table, worker


def _leased(client: redis.Redis, settings: Settings, worker: FrontierLeaser, pages: int) -> list[LeaseContext]:
    """*pages* leased pages of one crawl, each with two links to queue (on other sites)."""
    seeds = [
        FrontierRequest(url=f"http://site{i}.example/p", appid="app", crawlid="c1", request_id=f"r{i}")
        for i in range(pages)
    ]
    pipe = write_pipeline(client)
    Frontier.from_settings(client, settings).push(seeds, pipe)
    pipe.execute()
    contexts = []
    for _ in range(pages):
        lease = worker.pop("link").lease
        assert lease is not None
        context = LeaseContext(lease)
        domain = lease.request.domain
        context.children = link_children(lease.request, [f"http://other{j}.example/{domain}" for j in (1, 2)])
        context.parsed = True
        contexts.append(context)
    return contexts


def _finish(table: LeaseTable, context: LeaseContext) -> None:
    """:meth:`LeaseTable.finish` without a running reactor: its flush runs now, on this loop."""
    table.finish(context, "crawled")
    call: Any = table._flush_call
    if call is not None and call.active():
        call.cancel()
    table.flush_finished()


def _queued(client: redis.Redis, keys: Keys, url: str) -> int:
    domain = url.split("/")[2]
    return int(client.zcard(keys.crawl_queue("link", "app", "c1", domain)))


def _leased_now(client: redis.Redis, keys: Keys, context: LeaseContext) -> bool:
    return client.zscore(keys.leases("link", keys.shard_of(context.request.domain)), context.lease.member) is not None


def test_finishes_go_through_the_batcher_and_pages_finished_meanwhile_go_together(
    redis_settings: Settings, redis_client: redis.Redis, blocking: BlockingCalls
) -> None:
    table, worker = _table(redis_settings, redis_client, None)
    contexts = _leased(redis_client, redis_settings, worker, 3)
    keys = keys_from_settings(redis_settings)
    batches: list[int] = []

    async def scenario() -> None:
        batcher = ScriptBatcher(async_redis_from_settings(redis_settings))
        table.batcher = batcher
        write = table._write_async

        async def recorded(batch: list[tuple[LeaseContext, str]]) -> None:
            batches.append(len(batch))
            await write(batch)

        table._write_async = recorded  # type: ignore[method-assign]
        for context in contexts:
            table.add(context)
        sent = blocking.sent
        _finish(table, contexts[0])  # its write starts
        await asyncio.sleep(0)
        _finish(table, contexts[1])  # finished while the first is written: they go together next
        _finish(table, contexts[2])
        await table.drain()
        assert blocking.sent == sent, "a finish used the blocking client"
        assert batcher.round_trips >= 2
        await batcher.close()

    asyncio.run(scenario())
    assert batches == [1, 2]
    for context in contexts:
        assert not _leased_now(redis_client, keys, context)
    for site in ("other1.example", "other2.example"):  # each page queued one link there
        assert _queued(redis_client, keys, f"http://{site}/") == 3
    crawled = sum(
        int(redis_client.hget(keys.crawl_shard("link", "app", "c1", shard), "crawled") or 0)
        for shard in range(keys.shards)
    )
    assert crawled == 3


def test_a_finish_that_fails_on_redis_is_kept_and_written_when_redis_answers(
    redis_settings: Settings, redis_client: redis.Redis
) -> None:
    table, worker = _table(redis_settings, redis_client, None)
    (context,) = _leased(redis_client, redis_settings, worker, 1)
    keys = keys_from_settings(redis_settings)
    dead = redis_settings.copy_with(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")

    async def scenario() -> None:
        table.batcher = ScriptBatcher(async_redis_from_settings(dead))
        table.add(context)
        _finish(table, context)
        await table.drain()
        assert [c for c, _ in table._unfinished] == [context]  # kept, not lost
        retry: Any = table._refinish_call
        assert retry is not None and retry.active()
        retry.cancel()
        await table.batcher.close()
        table.batcher = ScriptBatcher(async_redis_from_settings(redis_settings))
        table._refinish()  # the back-off is over, Redis answers
        await table.drain()
        await table.batcher.close()

    asyncio.run(scenario())
    assert not table._unfinished
    assert not _leased_now(redis_client, keys, context)
    assert all(_queued(redis_client, keys, child.url) == 1 for child in context.children)


def _dupefilter_commands(client: redis.Redis) -> int:
    """HSETNX, HGET, HMGET and HSET calls Redis ran so far (every primary's on a cluster)."""
    stats = (
        list(client.info("commandstats", target_nodes=RedisCluster.PRIMARIES).values())  # type: ignore[call-arg]
        if is_cluster(client)
        else [client.info("commandstats")]
    )
    return sum(
        int(node.get(f"cmdstat_{name}", {}).get("calls", 0))
        for node in stats
        for name in ("hsetnx", "hget", "hmget", "hset")
    )


def test_the_admit_reads_a_dupefilter_with_one_command_whatever_the_links(
    redis_settings: Settings, redis_client: redis.Redis
) -> None:
    keys = keys_from_settings(redis_settings)
    table, worker = _table(redis_settings, redis_client, None)
    admission = Admission(None, redis_client, None, keys, 30.0, 3600.0, None)  # type: ignore[arg-type]
    first, second = _leased(redis_client, redis_settings, worker, 2)
    for context in (first, second):
        context.fingerprint = url_fingerprint(context.request.url)
    # 60 links on one site (one shard): a new one, or one another page queued, costs no command of its own
    urls = [f"http://links.example/{i}" for i in range(60)]
    children = list(zip(link_children(first.request, urls), map(url_fingerprint, urls), strict=True))
    before = _dupefilter_commands(redis_client)
    assert admission.admit(first, children) is Verdict.EMIT
    assert len(first.children) == 60
    second_children = list(zip(link_children(second.request, urls), [fp for _, fp in children], strict=True))
    assert admission.admit(second, second_children) is Verdict.EMIT
    assert second.children == []  # the first page queued them: not again
    assert admission.admit(first, children) is Verdict.EMIT  # the page that queued them may again
    assert len(first.children) == 60
    # per admit: the page's own entry (HSETNX), one HMGET, one HSET of the new links (the first only);
    # before, one HSETNX per link and one HGET more per link seen (about 300 here)
    assert _dupefilter_commands(redis_client) - before <= 3 * 3


def test_a_command_list_records_commands_and_their_routing_keys() -> None:
    commands = CommandList()
    commands.zadd("q", {b"m": 1}, nx=True)
    commands.hset("h", mapping={"a": 1})
    commands.execute_command("EVALSHA", "sha", 2, "k1", "k2", "arg")
    commands.execute_command("PUBLISH", "channel", "message")
    assert commands.commands == [
        ("ZADD", "q", b"NX", 1, b"m"),
        ("HSET", "h", "a", 1),
        ("EVALSHA", "sha", 2, "k1", "k2", "arg"),
        ("PUBLISH", "channel", "message"),
    ]
    assert [CommandList.routing_key(c) for c in commands.commands] == ["q", "h", "k1", "channel"]
    assert CommandList.routing_key(("EVALSHA", "sha", 0, "arg")) is None
