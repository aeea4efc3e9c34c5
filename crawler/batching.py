"""Redis script calls from the crawler's reactor thread without blocking it, batched under load.

A crawler makes two Redis calls per page on its hot path: the pop that leases the next request and
the admit that checks the lease and filters the page's links (see :mod:`crawlhive.crawler.runtime`).
Made synchronously, each one stops the reactor for a whole round trip (about 10-18 % of a busy
crawler's wall time, measured with py-spy on ``bench/crawl.py``). :class:`ScriptBatcher` sends them on
an asyncio Redis client instead (Scrapy runs on Twisted's asyncio reactor), with at most one pipeline
in flight: calls made while a pipeline is out wait for it and then go together in the next one. An
idle crawler therefore sends each call at once, and a busy one sends the pops and admits of several
pages in one round trip.

On a **Redis Cluster** a batch is split by node and each node's part goes in its own exchange
(one write, then its replies: :func:`_node_exchange`), all at once, so that a node failing (a
primary killed, until its replica takes over) fails only the calls sent to it. redis-py's cluster
pipeline would fail the whole batch, retrying it after closing every node's connections, so that
calls which ran on the other nodes (pops that leased a request, admits) were reported failed: their
leases were left to expire (LEASE_TIMEOUT) before anyone fetched those pages again. The batcher
therefore makes no retries of its own (a caller retries a failed call); after a node failed or
redirected a call, it reads the cluster's slot map again before the next batch.

Why not a library: redis-py's asyncio client does the I/O, but it has no such coalescing (its
pipelines are explicit), and scrapy-redis's scheduler and dupefilter are synchronous.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import hiredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import (
    AskError,
    ClusterDownError,
    DataError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import (
    TimeoutError as RedisTimeoutError,
)

from crawlhive.utils.backends.redis_clients import is_cluster
from crawlhive.utils.backends.redis_types import AsyncRedisClient
from crawlhive.utils.backends.scripts import scripts

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

#: Script calls one pipeline carries at most (a burst beyond it goes in the next round trip).
MAX_BATCH = 256
#: Errors of a Redis Cluster node that mean the slot map may be stale (a node died or failed over).
_TOPOLOGY_ERRORS = (RedisConnectionError, RedisTimeoutError, ClusterDownError, RedisClusterException, AskError)


@dataclass(slots=True)
class _Call:
    script: str
    """The script's name; "" for a plain command (*args* is the whole command, *keys* the key
    that routes it on a Redis Cluster, or none)."""
    keys: list[Any]
    args: list[Any]
    future: asyncio.Future[Any]

    def wire(self, sha: str) -> bytes | RedisError:
        """This call in the Redis protocol (*sha*: its script's, unused for a plain command), or
        the error of an argument Redis cannot take (it fails this call alone)."""
        args = ("EVALSHA", sha, len(self.keys), *self.keys, *self.args) if self.script else tuple(self.args)
        try:
            return cast(bytes, hiredis.pack_command(args))
        except TypeError as exc:  # None, a bool, a list: as redis-py's encoder refuses them
            return DataError(f"{exc} (in a {args[0]} call)")


class ScriptBatcher:
    """Runs Lua scripts (``EVALSHA``) on *client*, one pipeline in flight at a time.

    Args:
        client: an asyncio Redis client, used only from the running event loop's thread.

    Scripts are named as in :mod:`crawlhive.utils.backends.scripts`. A ``NoScriptError`` (Redis restarted or
    flushed its scripts) loads the script and resends just the calls that failed with it, so no call
    runs twice.
    """

    def __init__(self, client: AsyncRedisClient) -> None:
        self.client = client
        self.cluster = is_cluster(client)
        if self.cluster:  # no retries inside redis-py: see the module docstring
            client.set_retry(Retry(NoBackoff(), 0))
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

    def command(self, key: Any, *args: Any) -> asyncio.Future[Any]:
        """Queue one plain Redis command (*args*, e.g. ``"INCRBY", key, 3``) routed on a Redis
        Cluster by *key* (None: any node); the future gets its reply, or the error it raised.
        Commands queued together run in the order they were queued on each node."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append(_Call("", [key] if key is not None else [], list(args), future))
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
                    if not isinstance(exc, (RedisError, OSError, RedisClusterException)):
                        logger.error("Redis batch of %d calls failed unexpectedly", len(batch), exc_info=True)
                    error = _redis_error(exc)
                    if self.cluster and isinstance(exc, _TOPOLOGY_ERRORS):
                        await self._refresh()
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
                if isinstance(reply, NoScriptError) and attempt == 1 and call.script:
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
        if self.cluster:
            return await self._execute_cluster(batch)
        client: Any = self.client
        return await _pool_exchange(client.connection_pool, [call.wire(self._sha(call)) for call in batch])

    def _sha(self, call: _Call) -> str:
        return self.scripts.sha(call.script) if call.script else ""

    async def _execute_cluster(self, batch: list[_Call]) -> list[Any]:
        """*batch* on a Redis Cluster: one exchange per node (:func:`_node_exchange`), all at once;
        a node that fails fails only its own calls (their replies are that error). Each node's
        replies are delivered as soon as they come, so a node slow to fail (a connect time-out)
        holds back none of them."""
        client: Any = self.client
        await self._ready()
        groups: dict[str, tuple[Any, list[int]]] = {}
        for i, call in enumerate(batch):
            node = client.get_node_from_key(call.keys[0]) if call.keys else client.get_default_node()
            group = groups.get(node.name)
            if group is None:
                groups[node.name] = (node, [i])
            else:
                group[1].append(i)
        replies: list[Any] = [None] * len(batch)

        async def run(node: Any, indexes: list[int]) -> None:
            found = await _node_exchange(node, [batch[i].wire(self._sha(batch[i])) for i in indexes])
            for i, reply in zip(indexes, found, strict=True):
                replies[i] = reply
                future = batch[i].future
                if not future.done() and not (isinstance(reply, NoScriptError) and batch[i].script):  # _send retries
                    if isinstance(reply, Exception):
                        future.set_exception(reply)
                    else:
                        future.set_result(reply)

        await asyncio.gather(*(run(node, indexes) for node, indexes in groups.values()))
        if any(isinstance(reply, _TOPOLOGY_ERRORS) for reply in replies):
            await self._refresh()
        return replies

    async def _ready(self) -> None:
        """Make sure the cluster client has a slot map (read on first use, and again when redis-py
        asks for it after a connection error).

        redis-py reads the slot map (``CLUSTER SLOTS``, from any node that answers) and then its
        command table (``COMMAND``) from its default node, a primary. While a killed primary's
        replica is not promoted yet, that may be the dead node, and the client would refuse every
        call: the slot map alone is read then, so that the calls to the live primaries go on."""
        client: Any = self.client
        if not getattr(client, "_initialize", True):  # redis-py 8: True until it has read the topology
            return
        if not client.nodes_manager.slots_cache:  # first use: nothing to go on without it
            await client.initialize()
            return
        try:
            await client.initialize()
        except (RedisError, RedisClusterException, OSError) as exc:
            logger.debug("reading the Redis Cluster's topology failed (%s); reading its slot map alone", exc)
            await client.nodes_manager.initialize()
            client._initialize = False  # its command table was read at first use

    async def _refresh(self) -> None:
        """Read the cluster's slot map again (a node failed: it may have been replaced by its
        replica), from any node that answers. Failing, the next batch tries again."""
        try:
            if is_cluster(self.client):
                await self.client.nodes_manager.initialize()
        except (RedisError, RedisClusterException, OSError):
            logger.debug("reading the Redis Cluster's slot map failed", exc_info=True)

    async def close(self) -> None:
        """Wait for the pipeline in flight (if any), then close the client's connections."""
        if self._flushing is not None:
            try:
                await asyncio.shield(self._flushing)
            except Exception:  # its callers got the error
                logger.debug("last Redis batch failed on close", exc_info=True)
        await self.client.aclose()


#: A call's place in an exchange's replies before its reply came (a reply can be None).
_UNANSWERED: Any = object()


def _redis_error(exc: BaseException) -> RedisError:
    """*exc* as the RedisError a caller of the batcher gets (it is one, or it is named in one)."""
    return exc if isinstance(exc, RedisError) else RedisError(f"{type(exc).__name__}: {exc}")


def _all_failed(wires: list[bytes | RedisError], exc: BaseException) -> list[Any]:
    """The replies of an exchange that could not start: *exc* (as a RedisError) for every call."""
    failed = _redis_error(exc)
    return [w if isinstance(w, RedisError) else failed for w in wires]


async def _exchange(connection: Any, wires: list[bytes | RedisError], where: str) -> tuple[list[Any], bool]:
    """Send *wires* (packed commands; an error is a call refused before sending) on *connection*
    in one write, then read a reply for each: the replies, a command's error in its place (a
    ``MOVED`` or ``ASK`` too), or, once the connection failed, that error for every call not
    answered yet; and whether any reply came. One time-out (the connection's ``socket_timeout``)
    bounds the whole exchange.

    Why not redis-py's pipeline: it packs the commands in Python, arms a timer per reply and, on a
    cluster, routes every command again (computing the slot the batcher has just computed): 5 % of
    a cluster crawler's CPU (py-spy, ``bench/crawl.py --cluster``). This packs with hiredis, and
    reads and parses with redis-py's connection (hiredis's parser).
    """
    replies: list[Any] = [w if isinstance(w, RedisError) else _UNANSWERED for w in wires]
    sent = [i for i, w in enumerate(wires) if not isinstance(w, RedisError)]
    answered = False
    if not sent:
        return replies, answered
    try:
        try:
            async with asyncio.timeout(connection.socket_timeout):
                await connection.send_packed_command(b"".join(cast(bytes, wires[i]) for i in sent), check_health=False)
                for i in sent:
                    try:
                        replies[i] = await connection.read_response(timeout=math.inf)
                    except ResponseError as exc:  # this command's error; the connection is fine
                        replies[i] = exc
                    answered = True
        except TimeoutError as exc:  # the read or write it interrupted closed the connection
            await connection.disconnect(nowait=True)
            raise RedisTimeoutError(f"{where} did not answer within its socket time-out") from exc
    except Exception as exc:  # the connection failed (it disconnected itself): the rest fail with it
        failed = _redis_error(exc)
        replies = [failed if r is _UNANSWERED else r for r in replies]
    return replies, answered


async def _node_exchange(node: Any, wires: list[bytes | RedisError]) -> list[Any]:
    """:func:`_exchange` with a Redis Cluster *node*, on one of its connections (as redis-py's
    cluster pipeline takes them: ``acquire_connection``, ``release``); no retry (a caller
    retries, and the batcher reads the slot map again after a failure or a redirect)."""
    try:
        connection = node.acquire_connection()
    except Exception as exc:  # its connection limit
        return _all_failed(wires, exc)
    try:
        await node.disconnect_if_needed(connection)
        replies, _ = await _exchange(connection, wires, f"Redis Cluster node {node.name}")
        return replies
    except Exception as exc:  # closing a connection marked for reconnection failed
        return _all_failed(wires, exc)
    finally:
        node.release(connection)


async def _pool_exchange(pool: Any, wires: list[bytes | RedisError]) -> list[Any]:
    """:func:`_exchange` with one Redis, on a connection of its client's pool. Tried once more on a
    new connection when the first failed before any reply came (a connection the server closed
    while idle, a restarted Redis), as redis-py's pipeline retries; not after a reply came, so
    that no call that ran is sent again."""
    replies: list[Any] = []
    for attempt in (1, 2):
        try:
            connection = await pool.get_connection()
        except Exception as exc:  # Redis cannot be reached
            return _all_failed(wires, exc)
        try:
            replies, answered = await _exchange(connection, wires, "Redis")
        finally:
            await pool.release(connection)
        failed = next((r for r in replies if isinstance(r, (RedisConnectionError, RedisTimeoutError))), None)
        if attempt == 2 or answered or failed is None:
            break
    return replies
