"""Redis script calls from the crawler's reactor thread without blocking it, batched under load.

A crawler makes two Redis calls per page on its hot path: the pop that leases the next request and
the admit that checks the lease and filters the page's links (see :mod:`crawlhive.crawler.runtime`).
Made synchronously, each one stops the reactor for a whole round trip (about 10-18 % of a busy
crawler's wall time, measured with py-spy on ``bench/crawl.py``). :class:`ScriptBatcher` sends them on
an asyncio Redis client instead (Scrapy runs on Twisted's asyncio reactor), with at most one pipeline
in flight: calls made while a pipeline is out wait for it and then go together in the next one. An
idle crawler therefore sends each call at once, and a busy one sends the pops and admits of several
pages in one round trip.

Why not a library: redis-py's asyncio client does the I/O, but it has no such coalescing (its
pipelines are explicit), and scrapy-redis's scheduler and dupefilter are synchronous.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import NoScriptError, RedisError

from crawlhive.utils.scripts import scripts

if TYPE_CHECKING:
    import redis.asyncio

logger = logging.getLogger(__name__)

#: Script calls one pipeline carries at most (a burst beyond it goes in the next round trip).
MAX_BATCH = 256


@dataclass(slots=True)
class _Call:
    script: str
    keys: list[Any]
    args: list[Any]
    future: asyncio.Future[Any]


class ScriptBatcher:
    """Runs Lua scripts (``EVALSHA``) on *client*, one pipeline in flight at a time.

    Args:
        client: an asyncio Redis client, used only from the running event loop's thread.

    Scripts are named as in :mod:`crawlhive.utils.scripts`. A ``NoScriptError`` (Redis restarted or
    flushed its scripts) loads the script and resends just the calls that failed with it, so no call
    runs twice.
    """

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self.client = client
        self.scripts = scripts(client)
        self._pending: list[_Call] = []
        self._flushing: asyncio.Task[None] | None = None
        self.round_trips = 0
        self.calls = 0

    def call(self, script: str, keys: list[Any], args: list[Any]) -> asyncio.Future[Any]:
        """Queue one call of the script named *script*; the future gets its reply, or the
        ``RedisError`` it raised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append(_Call(script, keys, args, future))
        if self._flushing is None:
            self._flushing = loop.create_task(self._flush())
        return future

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                try:
                    await self._send(batch)
                except BaseException as exc:
                    # Whatever went wrong, no caller may wait forever: a caller that never gets
                    # its reply would stop its crawler's scheduler (or a page) for good.
                    if not isinstance(exc, (RedisError, OSError)):
                        logger.error("Redis batch of %d calls failed unexpectedly", len(batch), exc_info=True)
                    error = exc if isinstance(exc, RedisError) else RedisError(f"{type(exc).__name__}: {exc}")
                    for call in batch:
                        if not call.future.done():
                            call.future.set_exception(error)
                    if not isinstance(exc, Exception):
                        raise  # cancelled (shutting down): the futures of the rest fail below
        finally:
            self._flushing = None
            if self._pending:  # only when cancelled: the loop above runs until nothing is pending
                error = RedisError("Redis batcher stopped")
                for call in self._pending:
                    if not call.future.done():
                        call.future.set_exception(error)
                self._pending = []

    async def _send(self, batch: list[_Call]) -> None:
        for attempt in (1, 2):
            replies = await self._execute(batch)
            retry: list[_Call] = []
            for call, reply in zip(batch, replies, strict=True):
                if call.future.done():  # the caller gave up waiting (cancelled)
                    continue
                if isinstance(reply, NoScriptError) and attempt == 1:
                    retry.append(call)
                elif isinstance(reply, Exception):
                    call.future.set_exception(reply)
                else:
                    call.future.set_result(reply)
            if not retry:
                return
            try:
                for name in sorted({c.script for c in retry}):
                    await self.scripts.load_async(name)
            except RedisError as exc:
                for call in retry:
                    call.future.set_exception(exc)
                return
            batch = retry

    async def _execute(self, batch: list[_Call]) -> list[Any]:
        self.round_trips += 1
        self.calls += len(batch)
        if len(batch) == 1:
            call = batch[0]
            try:
                return [
                    await self.client.evalsha(self.scripts.sha(call.script), len(call.keys), *call.keys, *call.args)
                ]
            except NoScriptError as exc:
                return [exc]
        async with self.client.pipeline(transaction=False) as pipe:
            for call in batch:  # a raw command: a Redis Cluster pipeline routes it by its first key
                pipe.execute_command("EVALSHA", self.scripts.sha(call.script), len(call.keys), *call.keys, *call.args)
            return list(await pipe.execute(raise_on_error=False))

    async def close(self) -> None:
        """Wait for the pipeline in flight (if any), then close the client's connections."""
        if self._flushing is not None:
            try:
                await asyncio.shield(self._flushing)
            except Exception:  # its callers got the error
                logger.debug("last Redis batch failed on close", exc_info=True)
        await self.client.aclose()
