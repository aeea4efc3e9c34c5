"""The types of crawlhive's Redis clients, honest about a Redis Cluster.

:func:`~crawlhive.utils.backends.redis_clients.redis_from_settings` returns a ``redis.Redis`` or, when
REDIS_URL names a Redis Cluster, redis-py's ``RedisCluster``. Code that takes a client is annotated
with :data:`RedisClient`, the union of both, so mypy flags a call the cluster client does not offer
(``WATCH``-based transactions, ``pubsub`` options, …) wherever it is made, rather than letting it fail
at run time on a cluster only.
"""

from __future__ import annotations

from typing import TypeAlias

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.client import Pipeline
from redis.cluster import ClusterPipeline, RedisCluster

RedisClient: TypeAlias = redis.Redis | RedisCluster
"""A blocking client: one Redis, or a Redis Cluster."""

RedisPipeline: TypeAlias = Pipeline | ClusterPipeline
"""A pipeline of either (:func:`~crawlhive.utils.backends.redis_clients.write_pipeline`)."""

AsyncRedisClient: TypeAlias = redis.asyncio.Redis | AsyncRedisCluster
"""An asyncio client (the crawler's reactor): one Redis, or a Redis Cluster."""
