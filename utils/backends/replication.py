"""No-loss acknowledgements on a replicated Redis: ``WAIT`` for REDIS_WAIT_REPLICAS replicas before a
component acknowledges its frontier writes onward (docs/contract.md §18.3).

``WAIT`` covers the writes of the connection it is sent on, and a component's writes go over
pooled connections (and, on a Redis Cluster, to several nodes). :class:`ReplicaWait` therefore
sends, on one connection per node, a small write (``Keys.replication_mark``) followed by ``WAIT``:
a primary replicates in order, so when its replicas confirm that write they hold every write the
node took before it, whichever connection made it. On a cluster the marks are written in the
slots of the shards the caller wrote (or every shard's and the cluster-wide one), one per node, in
one pipeline that redis-py sends to the nodes in parallel.

Why not a library: neither redis-py nor its cluster client has a replicated-write helper, and a
bare ``WAIT`` on a pooled client can land on a connection that wrote nothing and return at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Self

from redis.cluster import RedisCluster

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import is_cluster, keys_from_settings
from crawlhive.utils.backends.redis_types import RedisClient

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

#: Seconds between two warnings about the same node having too few replicas.
WARN_EVERY_S = 60.0
#: Milliseconds a replication mark lives (only its write matters).
MARK_TTL_MS = 60_000


class ReplicaWait:
    """Waits until *replicas* replicas hold the writes made so far (no-op with 0).

    Args:
        redis: the component's client (a single Redis or a cluster client).
        keys: the cluster's key formats (the shards, the marks).
        replicas: REDIS_WAIT_REPLICAS.
        timeout_ms: REDIS_WAIT_TIMEOUT, per ``WAIT``.
    """

    def __init__(self, redis: RedisClient, keys: Keys, replicas: int, timeout_ms: int) -> None:
        self.redis = redis
        self.keys = keys
        self.replicas = max(0, replicas)
        self.timeout_ms = max(1, timeout_ms)
        self.cluster = is_cluster(redis)
        self._warned: dict[str, float] = {}
        self.waits = 0

    @classmethod
    def from_settings(cls, redis: RedisClient, settings: Settings) -> Self:
        return cls(
            redis,
            keys_from_settings(settings),
            settings.REDIS_WAIT_REPLICAS,
            settings.REDIS_WAIT_TIMEOUT,
        )

    def wait(self, shards: Iterable[int] | None = None, *, cluster_wide: bool = True) -> None:
        """Block until the replicas hold this component's writes so far on the nodes of *shards*
        (None: every shard) and, with *cluster_wide*, of the cluster-wide keys; at most
        REDIS_WAIT_TIMEOUT. Fewer replicas in time: a WARNING naming the node, at most once a
        minute, and the caller goes on (the write is on the primary; only a failover within that
        window could lose it).

        Raises:
            redis.RedisError: Redis failed (the caller retries as for any write).
        """
        if not self.replicas:
            return
        wanted: list[int | None] = list(range(self.keys.shards) if shards is None else set(shards))
        if cluster_wide:
            wanted.append(None)
        pipe: Any = self.redis.pipeline(transaction=False)
        nodes: list[str] = []
        for shard in wanted:
            mark = self.keys.replication_mark(shard)
            options: dict[str, Any] = {}
            if isinstance(self.redis, RedisCluster):
                node = self.redis.get_node_from_key(mark)
                if node.name in nodes:
                    continue
                options["target_nodes"] = node
                nodes.append(node.name)
            else:
                nodes.append(str(self.redis.connection_pool.connection_kwargs.get("host", "redis")))
            pipe.set(mark, b"1", px=MARK_TTL_MS)
            pipe.execute_command("WAIT", self.replicas, self.timeout_ms, **options)
            if not self.cluster:
                break  # one node
        replies = pipe.execute()
        self.waits += 1
        for node_name, acked in zip(nodes, replies[1::2], strict=True):
            if int(acked) < self.replicas:
                self._warn(node_name, int(acked))

    def _warn(self, node: str, acked: int) -> None:
        now = time.monotonic()
        if now - self._warned.get(node, -WARN_EVERY_S) < WARN_EVERY_S:
            return
        self._warned[node] = now
        logger.warning(
            "Redis node %s: %d of REDIS_WAIT_REPLICAS=%d replicas confirmed writes within "
            "REDIS_WAIT_TIMEOUT=%d ms; going on (a failover now could lose the last writes)",
            node,
            acked,
            self.replicas,
            self.timeout_ms,
        )


__all__ = ["ReplicaWait"]
