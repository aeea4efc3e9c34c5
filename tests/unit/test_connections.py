"""Unit tests of crawlhive.utils.backends.redis_clients and kafka_clients: settings -> client options, fast,
precise failures."""

from __future__ import annotations

import logging
import os
import socketserver
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from crawlhive.app.embedded import free_port
from crawlhive.utils.backends import kafka_clients, rdkafka, redis_clients
from crawlhive.utils.config.errors import BackendUnavailable, SettingsError, UnsupportedBackend
from crawlhive.utils.config.settings import Settings


def test_common_config_defaults_to_plaintext() -> None:
    config = kafka_clients.kafka_common_config(Settings.from_overrides(KAFKA_BOOTSTRAP_SERVERS="a:9092, b:9093"))
    assert config == {"bootstrap_servers": ["a:9092", "b:9093"], "security_protocol": "PLAINTEXT"}


def _sasl_ssl(tmp_path: Path, **overrides: Any) -> tuple[Settings, Path]:
    """Settings of a SASL_SSL broker with a CA file under *tmp_path* (password ``s3cret``), and the file."""
    cafile = tmp_path / "ca.pem"
    cafile.write_text("not checked here")
    base = {"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_PASSWORD": "s3cret", "KAFKA_SSL_CAFILE": str(cafile)}
    settings = Settings.from_overrides(**{**base, **overrides})
    return settings, cafile


def test_common_config_maps_sasl_ssl(tmp_path: Path) -> None:
    settings, cafile = _sasl_ssl(
        tmp_path,
        KAFKA_BOOTSTRAP_SERVERS="k1:9093",
        KAFKA_SECURITY_PROTOCOL="sasl_ssl",
        KAFKA_SASL_MECHANISM="SCRAM-SHA-512",
        KAFKA_SASL_USERNAME="crawler",
    )
    assert kafka_clients.kafka_common_config(settings) == {
        "bootstrap_servers": ["k1:9093"],
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "crawler",
        "sasl_plain_password": "s3cret",
        "ssl_cafile": str(cafile),
    }


def test_common_config_maps_ssl_without_sasl(tmp_path: Path) -> None:
    cafile = tmp_path / "ca.pem"
    cafile.write_text("x")
    settings = Settings.from_overrides(KAFKA_SECURITY_PROTOCOL="SSL", KAFKA_SSL_CAFILE=str(cafile))
    config = kafka_clients.kafka_common_config(settings)
    assert config["security_protocol"] == "SSL"
    assert config["ssl_cafile"] == str(cafile)
    assert "sasl_mechanism" not in config


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"KAFKA_SECURITY_PROTOCOL": "TLS"}, "KAFKA_SECURITY_PROTOCOL"),
        ({"KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"}, "KAFKA_SASL_MECHANISM"),
        (
            {"KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KAFKA_SASL_MECHANISM": "PLAIN", "KAFKA_SASL_USERNAME": "u"},
            "KAFKA_SASL_PASSWORD",
        ),
        ({"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CAFILE": "/nonexistent/ca.pem"}, "KAFKA_SSL_CAFILE"),
        ({"KAFKA_BOOTSTRAP_SERVERS": ""}, "KAFKA_BOOTSTRAP_SERVERS"),
    ],
)
def test_common_config_rejects_bad_settings_naming_them(overrides: dict[str, Any], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        kafka_clients.kafka_common_config(Settings.from_overrides(**overrides))


def test_sasl_options_without_sasl_protocol_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings.from_overrides(KAFKA_SASL_MECHANISM="PLAIN", KAFKA_SASL_USERNAME="u")
    with caplog.at_level(logging.WARNING, logger="crawlhive.utils.backends.kafka_clients"):
        config = kafka_clients.kafka_common_config(settings)
    assert "sasl_mechanism" not in config
    assert "KAFKA_SASL_" in caplog.text


def test_consumer_and_producer_options_come_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[tuple[Any, dict[str, Any]]] = []

    class Client:
        def __init__(self, config: dict[str, Any], *topics: Any) -> None:
            built.append((type(self), config))

        def connect(self, timeout_s: float) -> None:
            pass

    monkeypatch.setattr(kafka_clients, "_probe", lambda servers: None)
    monkeypatch.setattr(kafka_clients, "RdKafkaConsumer", Client)
    monkeypatch.setattr(kafka_clients, "RdKafkaSendProducer", Client)
    settings = Settings.from_overrides(
        KAFKA_MAX_POLL_INTERVAL_MS=4000,
        KAFKA_CONSUMER_FETCH_MAX_WAIT_MS=25,
        KAFKA_CONSUMER_MAX_POLL_RECORDS=77,
        KAFKA_PRODUCER_MAX_REQUEST_SIZE=100000,
    )
    kafka_clients.make_consumer(settings, group_id="g", client_id="me")
    kafka_clients.make_producer(settings, linger_ms=0)
    (_, consumer), (_, producer) = built
    assert consumer["group_id"] == "g"
    assert consumer["enable_auto_commit"] is False
    assert consumer["auto_offset_reset"] == "earliest"
    assert consumer["max_poll_interval_ms"] == 4000
    assert consumer["fetch_max_wait_ms"] == 25
    assert consumer["max_poll_records"] == 77
    assert consumer["session_timeout_ms"] == 6000
    assert consumer["client_id"] == "me"
    assert producer["acks"] == "all"
    assert producer["max_request_size"] == 100000
    assert producer["batch_size"] == 100000  # capped at the request size
    assert producer["linger_ms"] == 0  # overrides win
    # and librdkafka gets each of them under its own name
    assert rdkafka.rdkafka_config(consumer)["client.id"] == "me"
    assert rdkafka.rdkafka_config(consumer)["max.poll.interval.ms"] == 6000  # raised to the session
    assert rdkafka.rdkafka_producer_config(producer)["linger.ms"] == 0
    assert rdkafka.rdkafka_producer_config({**producer, "compression_type": "zstd"})["compression.type"] == "zstd"


def test_the_librdkafka_consumer_gets_the_same_connection_and_group_options(tmp_path: Path) -> None:
    settings, cafile = _sasl_ssl(
        tmp_path,
        KAFKA_BOOTSTRAP_SERVERS="k1:9093,k2:9093",
        KAFKA_SASL_MECHANISM="PLAIN",
        KAFKA_SASL_USERNAME="sink",
        KAFKA_SESSION_TIMEOUT_MS=9000,
        KAFKA_MAX_POLL_INTERVAL_MS=5000,
    )
    config = rdkafka.rdkafka_config(kafka_clients.consumer_config(settings, "crawlhive-sink-x", max_poll_records=500))
    assert {k: v for k, v in config.items() if k != "logger"} == {
        "bootstrap.servers": "k1:9093,k2:9093",
        "reconnect.backoff.ms": rdkafka.RECONNECT_BACKOFF_MS,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "sink",
        "sasl.password": "s3cret",
        "ssl.ca.location": str(cafile),
        "group.id": "crawlhive-sink-x",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 9000,
        "heartbeat.interval.ms": 3000,
        "max.poll.interval.ms": 9000,  # librdkafka refuses one shorter than the session
        "fetch.wait.max.ms": settings.KAFKA_CONSUMER_FETCH_MAX_WAIT_MS,
        "queued.max.messages.kbytes": rdkafka.QUEUED_MAX_KBYTES,
        "fetch.queue.backoff.ms": rdkafka.FETCH_QUEUE_BACKOFF_MS,
    }
    with pytest.raises(ValueError, match="receive_buffer_bytes"):  # an option nobody mapped is refused
        rdkafka.rdkafka_config({**kafka_clients.consumer_config(settings, "g"), "receive_buffer_bytes": 1})


def test_the_librdkafka_producer_gets_the_producer_options_and_a_queue_for_two_records(tmp_path: Path) -> None:
    settings, cafile = _sasl_ssl(
        tmp_path,
        KAFKA_BOOTSTRAP_SERVERS="k1:9093",
        KAFKA_SASL_MECHANISM="PLAIN",
        KAFKA_SASL_USERNAME="crawler",
        KAFKA_PRODUCER_MAX_REQUEST_SIZE=100 * 1024 * 1024,
    )
    config = rdkafka.rdkafka_producer_config(kafka_clients.producer_config(settings))
    assert {k: v for k, v in config.items() if k != "logger"} == {
        "bootstrap.servers": "k1:9093",
        "reconnect.backoff.ms": rdkafka.RECONNECT_BACKOFF_MS,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "crawler",
        "sasl.password": "s3cret",
        "ssl.ca.location": str(cafile),
        "acks": "all",
        "enable.idempotence": False,
        "linger.ms": kafka_clients.KAFKA_PRODUCER_LINGER_MS,
        "batch.size": kafka_clients.KAFKA_PRODUCER_BATCH_SIZE,
        "message.max.bytes": 100 * 1024 * 1024,
        "message.timeout.ms": rdkafka.MESSAGE_TIMEOUT_MS,
        "queue.buffering.max.kbytes": 2 * 100 * 1024,  # two records of the largest size
        "socket.nagle.disable": True,
        "partitioner": "murmur2_random",
    }
    small = rdkafka.rdkafka_producer_config(kafka_clients.producer_config(Settings.from_overrides()))
    assert small["queue.buffering.max.kbytes"] == rdkafka.QUEUE_MAX_KBYTES


def test_the_librdkafka_producer_fails_fast_naming_the_setting() -> None:
    server = f"127.0.0.1:{free_port()}"
    with pytest.raises(BackendUnavailable, match="KAFKA_BOOTSTRAP_SERVERS"):
        rdkafka.make_rdkafka_producer(Settings.from_overrides(KAFKA_BOOTSTRAP_SERVERS=server), lambda reports: None)


def test_librdkafka_reconnection_chatter_is_debug_and_its_real_errors_stay_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """While a broker is down librdkafka logs "Connect to … failed" for every attempt of every
    connection; an authentication failure must still be seen."""
    log = rdkafka.rdkafka_logger
    with caplog.at_level(logging.INFO, logger=log.name):
        log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", "Connect to ipv4#127.0.0.1:9 failed")
        log.log(logging.WARNING, "%s [%s] %s", "MAXPOLL", "rdkafka#consumer-1", "leaving group")
        log.log(logging.ERROR, "%s [%s] %s", "SASL", "rdkafka#consumer-1", "SASL authentication error")
    assert [(r.levelname, r.args[0]) for r in caplog.records] == [("INFO", "MAXPOLL"), ("ERROR", "SASL")]  # type: ignore[index]
    with caplog.at_level(logging.DEBUG, logger=log.name):
        log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", "Connect to ipv4#127.0.0.1:9 failed")
    assert caplog.records[-1].levelname == "DEBUG"


def test_a_consumer_without_a_group_fails_fast_naming_the_setting() -> None:
    server = f"127.0.0.1:{free_port()}"
    with pytest.raises(BackendUnavailable, match="KAFKA_BOOTSTRAP_SERVERS"):
        kafka_clients.make_consumer(Settings.from_overrides(KAFKA_BOOTSTRAP_SERVERS=server), "x.cleaned", group_id=None)


@pytest.mark.parametrize("factory", ["producer", "consumer", "admin", "ensure_topics"])
def test_kafka_factories_fail_fast_naming_the_setting(factory: str) -> None:
    server = f"127.0.0.1:{free_port()}"
    settings = Settings.from_overrides(KAFKA_BOOTSTRAP_SERVERS=server)
    calls = {
        "producer": lambda: kafka_clients.make_producer(settings),
        "consumer": lambda: kafka_clients.make_consumer(settings, "x.incoming", group_id="g"),
        "admin": lambda: kafka_clients.make_admin(settings),
        "ensure_topics": lambda: kafka_clients.ensure_topics(settings, ["x.incoming"]),
    }
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="KAFKA_BOOTSTRAP_SERVERS") as info:
        calls[factory]()
    assert server in str(info.value)
    assert time.monotonic() - started < 3


class _Silent(socketserver.StreamRequestHandler):
    """A server that accepts connections and never answers (not a Kafka broker, or a hung one)."""

    def handle(self) -> None:
        self.rfile.read()  # until the client hangs up


@pytest.mark.parametrize("factory", ["producer", "consumer"])
def test_a_server_that_never_answers_kafka_fails_fast_naming_the_setting(factory: str) -> None:
    """The TCP probe passes; librdkafka's metadata request then gets no answer, within the
    bootstrap time-out."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Silent)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"127.0.0.1:{server.server_address[1]}"
    settings = Settings.from_overrides(KAFKA_BOOTSTRAP_SERVERS=address)
    started = time.monotonic()
    try:
        with pytest.raises(BackendUnavailable, match="KAFKA_BOOTSTRAP_SERVERS") as info:
            if factory == "producer":
                kafka_clients.make_producer(settings)
            else:
                kafka_clients.make_consumer(settings, "x.incoming", group_id="g")
    finally:
        server.shutdown()
        server.server_close()
    assert address in str(info.value)
    assert time.monotonic() - started < kafka_clients.KAFKA_BOOTSTRAP_TIMEOUT_MS / 1000 + 3


def test_ensure_topics_rejects_illegal_names_before_connecting() -> None:
    settings = Settings.from_overrides(KAFKA_BOOTSTRAP_SERVERS=f"127.0.0.1:{free_port()}")
    with pytest.raises(SettingsError, match="KAFKA_TOPIC_PREFIX"):
        kafka_clients.ensure_topics(settings, ["bad prefix.incoming"])


def test_check_redis_names_setting_and_masks_password() -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    settings = Settings.from_overrides(REDIS_URL=url)
    client = redis_clients.redis_from_settings(settings)
    started = time.monotonic()
    try:
        with pytest.raises(BackendUnavailable, match="REDIS_URL") as info:
            redis_clients.check_redis(client, settings)
    finally:
        client.close()
    message = str(info.value)
    assert "hunter2" not in message
    assert url.replace("hunter2", "***") in message
    assert time.monotonic() - started < 3


class _OldRedis(socketserver.StreamRequestHandler):
    """Answers like an old Redis server would to what check_redis sends (a stand-in: no Redis older
    than the supported minimum can be installed here): PING, INFO, HELLO from 6.0 on (5.x speaks
    RESP2 only), and +OK to anything else."""

    version = "5.0.7"

    def handle(self) -> None:
        while line := self.rfile.readline():
            if not line.startswith(b"*"):
                continue
            words = []
            for _ in range(int(line[1:])):
                size = int(self.rfile.readline()[1:])
                words.append(self.rfile.read(size + 2)[:-2].upper())
            if words[0] == b"PING":
                self.wfile.write(b"+PONG\r\n")
            elif words[0] == b"INFO":
                body = f"# Server\r\nredis_version:{self.version}\r\nredis_mode:standalone\r\n".encode()
                self.wfile.write(b"$%d\r\n%s\r\n" % (len(body), body))
            elif words[0] == b"HELLO" and self.version.startswith("5."):
                self.wfile.write(b"-ERR unknown command 'HELLO'\r\n")
            elif words[0] == b"HELLO":
                fields = (b"+server\r\n+redis\r\n", b"+version\r\n+%s\r\n" % self.version.encode(), b"+proto\r\n:3\r\n")
                self.wfile.write(b"%%%d\r\n%s" % (len(fields), b"".join(fields)))
            else:
                self.wfile.write(b"+OK\r\n")


@pytest.mark.parametrize("version", ["5.0.7", "6.0.16"])
def test_check_redis_refuses_a_server_older_than_the_minimum_naming_the_minimum(version: str) -> None:
    handler = type("Handler", (_OldRedis,), {"version": version})
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings = Settings.from_overrides(REDIS_URL=f"redis://127.0.0.1:{server.server_address[1]}/0")
    client = redis_clients.redis_from_settings(settings)
    try:
        with pytest.raises(UnsupportedBackend, match=r"crawlhive needs Redis 6\.2 or newer.*REDIS_URL") as info:
            redis_clients.check_redis(client, settings)
    finally:
        client.close()
        server.shutdown()
        server.server_close()
    assert ("version 6.0.16" in str(info.value)) == (version == "6.0.16")


def test_the_redis_the_tests_run_on_is_supported_and_its_version_is_read(redis_url: str) -> None:
    settings = Settings.from_overrides(REDIS_URL=redis_url)
    client = redis_clients.redis_from_settings(settings)
    try:
        redis_clients.check_redis(client, settings)
        version = redis_clients.redis_version(client)
    finally:
        client.close()
    assert version is not None and version >= redis_clients.MIN_REDIS_VERSION
    if os.environ.get("CRAWLHIVE_TEST_REDIS_SERVER") == "bundled":  # make test's second pass
        assert version[:2] == (6, 2)


def test_redis_from_settings_passes_decode_responses() -> None:
    settings = Settings.from_overrides(REDIS_URL="redis://127.0.0.1:6390/2")
    client = redis_clients.redis_from_settings(settings, decode_responses=True)
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert (kwargs["port"], kwargs["db"], kwargs["decode_responses"]) == (6390, 2, True)
    finally:
        client.close()


def test_redis_from_settings_rejects_a_non_redis_url() -> None:
    with pytest.raises(SettingsError, match="REDIS_URL"):
        redis_clients.redis_from_settings(Settings.from_overrides(REDIS_URL="http://:pw@example.com"))


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        ("rediss://user:pw@h/1", "rediss://user:***@h/1"),
        ("redis://h:6379/0", "redis://h:6379/0"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert redis_clients.mask_url(url) == masked


def test_the_shard_count_is_stored_by_the_first_component_and_checked_by_every_other(
    redis_url: str, names: Any
) -> None:
    settings = Settings.from_overrides(REDIS_URL=redis_url, REDIS_KEY_PREFIX=names.key_prefix)
    client = redis_clients.redis_from_settings(settings)
    try:
        assert redis_clients.check_frontier_shards(client, settings) == 1  # automatic on one Redis
        assert redis_clients.check_frontier_shards(client, settings) == 1
        redis_clients.check_redis(client, settings)
        other = Settings.from_overrides(REDIS_URL=redis_url, REDIS_KEY_PREFIX=names.key_prefix, FRONTIER_SHARDS=16)
        with pytest.raises(
            SettingsError, match=r"FRONTIER_SHARDS: .* 16 shards, .* created with 1; .*FRONTIER_SHARDS=1"
        ):
            redis_clients.check_redis(client, other)
        with pytest.raises(SettingsError, match="FRONTIER_SHARDS: must be"):
            redis_clients.check_frontier_shards(client, Settings.from_overrides(FRONTIER_SHARDS=-1))
        # another cluster (prefix) chooses its own
        fresh = Settings.from_overrides(
            REDIS_URL=redis_url, REDIS_KEY_PREFIX=names.key_prefix + "x", FRONTIER_SHARDS=16
        )
        assert redis_clients.check_frontier_shards(client, fresh) == 16
    finally:
        client.delete(f"{names.key_prefix}x:frontier-shards")
        client.close()


def test_cluster_seeds_none_of_which_answers_name_redis_url_without_the_password() -> None:
    settings = Settings.from_overrides(REDIS_URL="redis://:s3cret@127.0.0.1:1,redis://127.0.0.1:2")
    assert redis_clients.redis_urls(settings) == ["redis://:s3cret@127.0.0.1:1", "redis://127.0.0.1:2"]
    with pytest.raises(
        BackendUnavailable, match=r"Redis Cluster at redis://:\*\*\*@127\.0\.0\.1:1,.*check REDIS_URL"
    ) as info:
        redis_clients.redis_from_settings(settings)
    assert "s3cret" not in str(info.value)


def test_librdkafka_errors_arrive_as_our_classes() -> None:
    """Callers' ``except`` clauses and the loop's rules are written against kafka_errors' classes
    (kafka-python's names): a record too large must stay distinguishable (it is dropped or
    dead-lettered, never retried), a lost group membership must read as one, a lost broker as a
    connection error, refused credentials as an authentication failure."""
    import confluent_kafka

    from crawlhive.utils.contract import kafka_errors
    from crawlhive.utils.contract.produce import never_sendable
    from crawlhive.utils.process.loop import is_transient, lost_membership

    def mapped(code: int) -> kafka_errors.KafkaError:
        return rdkafka._error(confluent_kafka.KafkaException(confluent_kafka.KafkaError(code)))

    too_large = mapped(confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE)
    assert isinstance(too_large, kafka_errors.MessageSizeTooLargeError) and never_sendable(too_large)
    assert str(too_large).startswith("[Error 10] MessageSizeTooLargeError: MSG_SIZE_TOO_LARGE")
    assert never_sendable(mapped(confluent_kafka.KafkaError.INVALID_RECORD))
    assert never_sendable(mapped(confluent_kafka.KafkaError.TOPIC_EXCEPTION))  # an illegal topic name
    gone = mapped(confluent_kafka.KafkaError.UNKNOWN_MEMBER_ID)
    assert isinstance(gone, kafka_errors.UnknownMemberIdError) and lost_membership(gone)
    assert isinstance(mapped(confluent_kafka.KafkaError._TRANSPORT), kafka_errors.KafkaConnectionError)
    assert isinstance(mapped(confluent_kafka.KafkaError._MSG_TIMED_OUT), kafka_errors.KafkaTimeoutError)
    assert isinstance(mapped(confluent_kafka.KafkaError._AUTHENTICATION), kafka_errors.SaslAuthenticationFailedError)
    for code in (confluent_kafka.KafkaError._TRANSPORT, confluent_kafka.KafkaError._MSG_TIMED_OUT):
        assert is_transient(mapped(code)) and not never_sendable(mapped(code))
    assert type(mapped(confluent_kafka.KafkaError._FAIL)) is kafka_errors.KafkaError
    # a broker's code without a class of its own is still a broker's error, with its code
    other = mapped(confluent_kafka.KafkaError.NOT_CONTROLLER)
    assert type(other) is kafka_errors.BrokerResponseError and other.errno == confluent_kafka.KafkaError.NOT_CONTROLLER


def test_our_error_classes_carry_the_protocol_s_codes() -> None:
    """Each class of kafka_errors.BY_CODE stands for the code librdkafka gives that name (the
    protocol's numbers, written out in kafka_errors so that it imports nothing)."""
    import confluent_kafka

    from crawlhive.utils.contract import kafka_errors

    names = {
        "CorruptRecordError": "INVALID_MSG",
        "UnknownTopicOrPartitionError": "UNKNOWN_TOPIC_OR_PART",
        "LeaderNotAvailableError": "LEADER_NOT_AVAILABLE",
        "NotLeaderForPartitionError": "NOT_LEADER_FOR_PARTITION",
        "RequestTimedOutError": "REQUEST_TIMED_OUT",
        "MessageSizeTooLargeError": "MSG_SIZE_TOO_LARGE",
        "NetworkExceptionError": "NETWORK_EXCEPTION",
        "CoordinatorLoadInProgressError": "COORDINATOR_LOAD_IN_PROGRESS",
        "CoordinatorNotAvailableError": "COORDINATOR_NOT_AVAILABLE",
        "NotCoordinatorError": "NOT_COORDINATOR",
        "InvalidTopicError": "TOPIC_EXCEPTION",
        "RecordListTooLargeError": "RECORD_LIST_TOO_LARGE",
        "NotEnoughReplicasError": "NOT_ENOUGH_REPLICAS",
        "NotEnoughReplicasAfterAppendError": "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        "IllegalGenerationError": "ILLEGAL_GENERATION",
        "UnknownMemberIdError": "UNKNOWN_MEMBER_ID",
        "RebalanceInProgressError": "REBALANCE_IN_PROGRESS",
        "TopicAuthorizationFailedError": "TOPIC_AUTHORIZATION_FAILED",
        "GroupAuthorizationFailedError": "GROUP_AUTHORIZATION_FAILED",
        "UnsupportedSaslMechanismError": "UNSUPPORTED_SASL_MECHANISM",
        "TopicAlreadyExistsError": "TOPIC_ALREADY_EXISTS",
        "InvalidPartitionsError": "INVALID_PARTITIONS",
        "InvalidReplicationFactorError": "INVALID_REPLICATION_FACTOR",
        "SaslAuthenticationFailedError": "SASL_AUTHENTICATION_FAILED",
        "InvalidRecordError": "INVALID_RECORD",
    }
    assert {cls.__name__ for cls in kafka_errors.BY_CODE.values()} == set(names)
    for code, cls in kafka_errors.BY_CODE.items():
        assert code == getattr(confluent_kafka.KafkaError, names[cls.__name__]), cls
    assert kafka_errors.TopicPartition("t", 1) == ("t", 1) and kafka_errors.OffsetAndMetadata(5).offset == 5
