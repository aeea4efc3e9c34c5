"""Logging: configured once, JSON lines carry extra fields, bad level names the setting."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from crawlhive.utils.config.errors import SettingsError
from crawlhive.utils.config.log import configure_logging


def test_json_lines_with_extra_fields(tmp_path: Path, restore_root: None) -> None:
    log_file = tmp_path / "out.log"
    configure_logging("DEBUG", json_lines=True, file=str(log_file))
    configure_logging("INFO", json_lines=True, file=str(log_file))  # reconfiguring replaces, not adds
    logging.getLogger("crawlhive.test").info("crawl %s queued", "c1", extra={"crawlid": "c1", "appid": "a1"})
    logging.getLogger("crawlhive.test").debug("hidden")
    lines = log_file.read_text().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["message"] == "crawl c1 queued"
    assert record["crawlid"] == "c1" and record["appid"] == "a1" and record["level"] == "INFO"


def test_bad_level_names_the_setting(restore_root: None) -> None:
    with pytest.raises(SettingsError, match="LOG_LEVEL"):
        configure_logging("LOUD")


@pytest.mark.parametrize("json_lines", [False, True])
def test_no_line_shows_a_secret(tmp_path: Path, restore_root: None, json_lines: bool) -> None:
    """docs/contract.md §10.6: messages, extra fields and tracebacks of any logger (kafka-python
    logs its configuration at DEBUG) are written with the secrets masked."""
    from crawlhive.utils.config.settings import Settings

    settings = Settings.from_overrides(
        REDIS_URL="redis://user:p%40ss-word@redis.internal:6380/0",
        KAFKA_SASL_MECHANISM="PLAIN",
        KAFKA_SASL_USERNAME="u",
        KAFKA_SASL_PASSWORD="kafka-s3cret",
        REST_API_KEY="rest-k3y",
    )
    assert set(settings.secrets()) == {"p%40ss-word", "p@ss-word", "kafka-s3cret", "rest-k3y"}
    log_file = tmp_path / "out.log"
    configure_logging("DEBUG", json_lines=json_lines, file=str(log_file), secrets=settings.secrets())
    logging.getLogger("kafka.admin").debug("config: %s", {"sasl_plain_password": "kafka-s3cret"})
    logging.getLogger("crawlhive.test").info("url %s", "redis://user:p@ss-word@x", extra={"key": "rest-k3y"})
    try:
        raise RuntimeError("auth p%40ss-word failed")
    except RuntimeError:
        logging.getLogger("crawlhive.test").exception("boom")
    text = log_file.read_text()
    assert "***" in text and "config" in text and "boom" in text
    for secret in settings.secrets():
        assert secret not in text


def test_consumers_closed_while_their_metadata_refresh_is_in_flight_log_no_error(
    tmp_path: Path, restore_root: None, kafka_bootstrap: str
) -> None:
    """The Ctrl-C of `up` printed ``ERROR kafka.cluster: Metadata refresh: failed Transport closed
    for writes`` when consumers were on kafka-python (a client closed while its metadata refresh was
    in flight). Real consumers on the real broker (librdkafka now), each closed right after a poll
    that asked for a topic's metadata (the topic does not exist, so it keeps asking), log nothing
    above INFO through crawlhive's logging."""
    from crawlhive.utils.backends.kafka_clients import make_consumer
    from crawlhive.utils.config.settings import Settings

    log_file = tmp_path / "out.log"
    configure_logging("INFO", file=str(log_file))
    settings = Settings.from_overrides(KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap, KAFKA_TOPIC_PREFIX="closelog")
    for _ in range(12):
        consumer = make_consumer(settings, "closelog.nothing", group_id=None)
        consumer.poll(timeout_ms=50)
        consumer.close()
    noisy = [line for line in log_file.read_text().splitlines() if " ERROR " in line or " WARNING " in line]
    assert noisy == []


def test_errors_kafka_python_logs_while_a_client_closes_are_debug(tmp_path: Path, restore_root: None) -> None:
    """docs/contract.md §17.3: seen at Ctrl-C of `up` (1 run in 3 on CI): a read delivered to a
    transport kafka-python had just closed. Shown at DEBUG only, with its traceback."""
    log_file = tmp_path / "out.log"
    configure_logging("INFO", file=str(log_file))
    transport = logging.getLogger("kafka.net.transport")
    try:
        raise AttributeError("'NoneType' object has no attribute 'recv'")
    except AttributeError:
        transport.exception("%s: Error receiving network data closing socket", "<KafkaTCPTransport [none] (closed)>")
    # a broker going away: kafka-python writes several such lines a second, for as long as it is
    # down; crawlhive's loops report the outage once (Outage, Backoff), so these are DEBUG
    transport.error("%s: socket disconnected", "<KafkaTCPTransport [127.0.0.1:1<-2]>")
    try:  # the broker of an exited `up` resetting a crawler's connection (seen in CI)
        raise ConnectionResetError(104, "Connection reset by peer")
    except ConnectionResetError:
        transport.exception("%s: Error receiving network data closing socket", "<KafkaTCPTransport [none]>")
        transport.exception("%s: Error sending request data: %s", "<KafkaTCPTransport [none]>", "[Errno 104] reset")
    logging.getLogger("kafka.net.manager").error("Connection failed: KafkaConnectionError: 111 ECONNREFUSED")
    logging.getLogger("kafka.cluster").warning("No node available for metadata refresh - backoff/retry")
    # its own network loop running late on a busy machine (seen at the start of `up` in CI)
    logging.getLogger("kafka.net.selector").warning(
        "Task %s ran for %.3fs (>%.3fs threshold). It is blocking the event loop -- likely a tight sync loop",
        "<kafka.net.selector.Task object>",
        0.464,
        0.1,
    )
    selector = logging.getLogger("kafka.net.selector")  # a task failing on a socket just closed
    try:
        try:
            raise KeyError("'<socket.socket [closed] fd=-1, family=2, type=1, proto=6> is not registered'")
        except KeyError:
            raise ValueError("Invalid file descriptor: -1") from None
    except ValueError:
        selector.exception("Unhandled exception in task %s:", "<kafka.net.selector.Task object>")
    try:
        raise ValueError("something else")
    except ValueError:
        selector.exception("Unhandled exception in task %s:", "<another task>")  # not on close: kept
    # a consumer closed while it was joining its group: its leave request fails (kafka-python's ERROR)
    coordinator = logging.getLogger("kafka.coordinator.base")
    coordinator.error("LeaveGroup request failed: %s", "[Error 25] UnknownMemberIdError")
    coordinator.error("LeaveGroup request for group %s failed with error: %s", "demo-group", "UnknownMemberIdError")
    coordinator.error("Error sending JoinGroupRequest: %s", "kept")  # not a leave: kept
    # a client closed while its metadata refresh was in flight (Ctrl-C of `up`): its connections
    # closed first, the refresh then fails writing to one (kafka-python 3.0's own lines)
    logging.getLogger("kafka.cluster").error("Metadata refresh: failed %s", RuntimeError("Transport closed for writes"))
    logging.getLogger("kafka.net.manager").error("Connection failed: %s", RuntimeError("Transport closed for writes"))
    logging.getLogger("kafka.cluster").error("Metadata refresh: failed %s", "UnknownTopicOrPartitionError")  # kept
    lines = log_file.read_text()
    assert "Transport closed for writes" not in lines and "failed UnknownTopicOrPartitionError" in lines
    assert "LeaveGroup" not in lines and "Error sending JoinGroupRequest: kept" in lines
    assert "blocking the event loop" not in lines
    assert "Invalid file descriptor" not in lines and "<another task>" in lines
    assert "Error receiving network data" not in lines and "Invalid file descriptor" not in lines
    assert "socket disconnected" not in lines and "ECONNREFUSED" not in lines and "No node available" not in lines
    assert "Connection reset by peer" not in lines and "Error sending request data" not in lines
    configure_logging("DEBUG", file=str(log_file))
    try:
        raise AttributeError("x")
    except AttributeError:
        transport.exception("%s: Error receiving network data closing socket", "<KafkaTCPTransport [none] (closed)>")
    assert "DEBUG   kafka.net.transport: <KafkaTCPTransport [none] (closed)>: Error receiving" in log_file.read_text()


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://:pw1@h1:1,redis://:pw2@h2:2", "redis://:***@h1:1,redis://:***@h2:2"),
        ("redis://:pw1@h1:1,h2:2", "redis://:***@h1:1,h2:2"),
        ("redis://:pw1@h1:1,:pw2@h2:2", "redis://:***@h1:1,:***@h2:2"),
        ("redis://h:1/0?password=qs3cret&db=2", "redis://h:1/0?password=***&db=2"),
        (
            "redis://u:pw1@h:1/0?ssl_password=a1b&Token=c2d&api_key=e3f",
            "redis://u:***@h:1/0?ssl_password=***&Token=***&api_key=***",
        ),
        ("unix:///tmp/r.sock?db=1&pass=g4h", "unix:///tmp/r.sock?db=1&pass=***"),
        ("rediss://user:pw1@[::1]:6380/0", "rediss://user:***@[::1]:6380/0"),
        ("redis://h1:1,redis://h2:2/0?db=1", "redis://h1:1,redis://h2:2/0?db=1"),
    ],
)
def test_mask_url_masks_every_seed_and_secret_query_values(url: str, masked: str) -> None:
    """docs/contract.md §10.6: a Redis Cluster REDIS_URL lists seeds, each maybe with a password;
    redis-py also takes ``?password=``. The one masking function hides them all, and the log
    formatter masks the same values wherever a library writes them."""
    from crawlhive.utils.config.log import mask_url
    from crawlhive.utils.config.settings import Settings

    assert mask_url(url) == masked
    secrets = Settings.from_overrides(REDIS_URL=url).secrets()
    for value in ("pw1", "pw2", "qs3cret", "a1b", "c2d", "e3f", "g4h"):
        assert (value in url) is (value in secrets), value


def test_up_and_demo_print_redis_through_the_masking_function() -> None:
    """The lines ``crawlhive up`` and ``demo`` print about their backends show no password of
    any Redis Cluster seed."""
    from crawlhive.app.up import backend_lines
    from crawlhive.utils.config.settings import Settings

    live = Settings.from_overrides(
        REDIS_URL="redis://:pw1-seed@h1:7000,redis://:pw2-seed@h2:7001?password=pw3-query",
        KAFKA_BOOTSTRAP_SERVERS=["127.0.0.1:9092"],
    )
    lines = backend_lines(live, {"broker": "/usr/bin/tansu"})
    assert lines == [
        "Redis redis://:***@h1:7000,redis://:***@h2:7001?password=***",
        "Kafka 127.0.0.1:9092 (embedded: /usr/bin/tansu)",
    ]
