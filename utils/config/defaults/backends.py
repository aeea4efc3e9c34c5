"""Redis, Kafka and the blob store: where every process connects, and how its Kafka clients behave.

Part of :mod:`crawlhive.utils.config.defaults` (read its docstring first)."""

# ruff: noqa: E501

REDIS_URL: str = "redis://127.0.0.1:6379/0"
"""Redis to use for the frontier and every control key; ``rediss://`` for TLS, password in the URL.
Scrapy Cluster's REDIS_HOST / REDIS_PORT / REDIS_DB / REDIS_PASSWORD are combined into it when it is
not set. When neither is set, ``crawlhive up`` starts a private redis-server and the other commands
find it through the state file in CRAWLHIVE_HOME."""

REDIS_KEY_PREFIX: str = "ch"
"""Prefix of every Redis key crawlhive writes (see docs/redis-keys.md). Lets several clusters, or
tests, share one Redis."""

FRONTIER_SHARDS: int = 0
"""Virtual shards of the frontier (docs/contract.md §18.2); 0 = automatic: 64 on a Redis Cluster
(REDIS_URL naming a cluster node, or several seed nodes separated by commas), one on a single Redis
(no hash tags: the layout of earlier releases). Fixed for the life of the data: the first component
to start stores it in Redis, and a component configured with another value refuses to start."""

REDIS_WAIT_REPLICAS: int = 0
"""Replicas that must confirm a component's frontier writes (Redis ``WAIT``) before it acknowledges
them onward: a Kafka offset commit, a crawler's lease ack (§18.3). 0 = do not wait: a primary
killed before its replicas copied its last writes loses them (docs/operations.md, "Failover")."""

REDIS_WAIT_TIMEOUT: int = 1000
"""Milliseconds one ``WAIT`` for REDIS_WAIT_REPLICAS may take; when fewer replicas confirm in time
the component goes on and logs a WARNING (at most once a minute) naming the Redis node."""

KAFKA_BOOTSTRAP_SERVERS: list[str] = ["127.0.0.1:9092"]
"""Kafka brokers, comma-separated (alias: KAFKA_HOSTS)."""

KAFKA_TOPIC_PREFIX: str = "demo"
"""Prefix of every topic: ``<prefix>.incoming``, ``<prefix>.crawled_firehose``, …"""

KAFKA_GROUP: str = ""
"""kafka-monitor consumer group; empty means ``<KAFKA_TOPIC_PREFIX>-group``."""

KAFKA_SECURITY_PROTOCOL: str = "PLAINTEXT"
"""PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL; applied to every Kafka client."""

KAFKA_SASL_MECHANISM: str | None = None
"""PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 when KAFKA_SECURITY_PROTOCOL uses SASL."""

KAFKA_SASL_USERNAME: str | None = None
"""SASL user name."""

KAFKA_SASL_PASSWORD: str | None = None
"""SASL password."""

KAFKA_SSL_CAFILE: str | None = None
"""CA bundle (PEM file) that signs the brokers' certificates, for SSL / SASL_SSL."""

KAFKA_APPID_TOPICS: bool = False
"""Also write each item / outbound message to ``<prefix>.crawled_<appid>`` / ``.outbound_<appid>``."""

KAFKA_BASE_64_ENCODE: bool = False
"""Send item bodies base64-encoded instead of as text."""

KAFKA_PRODUCER_MAX_REQUEST_SIZE: int = 1048576
"""Bytes: the largest record a crawlhive producer sends; larger items become dead letters."""

KAFKA_FEED_TIMEOUT: float = 10.0
"""Seconds to wait for the broker's acknowledgement of a fed request (REST, ``crawlhive feed``)."""

KAFKA_TOPIC_PARTITIONS: int = 4
"""Partitions of each topic crawlhive creates."""

KAFKA_TOPIC_REPLICATION: int = 1
"""Replication factor of each topic crawlhive creates."""

KAFKA_CONSUMER_POLL_TIMEOUT_MS: int = 100
"""Milliseconds one consumer poll may block before the loop checks its stop flag."""

KAFKA_CONSUMER_FETCH_MAX_WAIT_MS: int = 10
"""Milliseconds the broker may hold a fetch that has no data (low keeps latency low)."""

KAFKA_MAX_POLL_INTERVAL_MS: int = 5000
"""Milliseconds between polls before the group evicts a consumer; small values keep group joins
fast on Tansu."""

KAFKA_SESSION_TIMEOUT_MS: int = 6000
"""Milliseconds a consumer-group member may go without heartbeats before it is evicted. A fresh
group on Tansu completes its first join only after about half of it (kafka-python's 45000 default
makes that 23 s); 6000 is also the smallest value Apache Kafka accepts by default
(``group.min.session.timeout.ms``)."""

KAFKA_CONSUMER_MAX_POLL_RECORDS: int = 2000
"""Records one poll returns at most: the batch a monitor validates and writes in one round trip."""

BLOB_STORE_URL: str = ""
"""Where bodies too large for one Kafka message go (docs/contract.md §20.5): any fsspec URL
(``file:///var/lib/crawlhive/blobs``, ``s3://bucket/blobs`` with ``s3fs`` installed). The item then
carries ``"body": null`` and ``body_ref``. Empty: the folder ``blobs`` of CRAWLHIVE_HOME, which every
process of one machine (``crawlhive up`` and its children, ``dump``) shares; crawlers, cleaners and
sinks on several machines need a store they all reach."""

BLOB_TTL: float = 604800.0
"""Seconds a blob is kept (7 days): every crawler, kafka-monitor, redis-monitor, cleaner and sink
removes older blobs of the store at start and at most once an hour after, on a thread of its own.
0 keeps blobs for ever (no sweep): on an object store, a lifecycle rule of the same age is cheaper
than listing it (docs/operations.md)."""

BLOB_STORE_MAX_BYTES: int = 10737418240
"""Most bytes the blob store may hold (10 GiB): past it, the oldest blobs are removed first (each
leaves a marker, so a record that still refers to one becomes a dead letter saying it was evicted by
this cap, not a bare "no blob"). Writers enforce it after each write that could pass it and at least
once a minute, and so does every BLOB_TTL sweep. 0 = no cap (an object store with a lifecycle
rule)."""
