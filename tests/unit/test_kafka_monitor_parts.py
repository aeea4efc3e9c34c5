"""kafka-monitor pieces that need no backend: failure classification, dead-letter encoding, back-off."""

from __future__ import annotations

import json
import time

import pytest
import redis

from crawlhive.kafka_monitor.monitor import KafkaMonitor
from crawlhive.utils.config.errors import BackendUnavailable
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.kafka_errors import KafkaTimeoutError
from crawlhive.utils.process.loop import Backoff, describe_failure, is_out_of_memory, is_transient


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (redis.ConnectionError("Connection refused"), True),
        (redis.TimeoutError("Timeout reading from socket"), True),
        (redis.BusyLoadingError("Redis is loading the dataset in memory"), True),
        # out of memory is refused work, not a wait (the kafka-monitor dead-letters it)
        (redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'"), False),
        (redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."), False),
        (redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), False),
        (redis.ResponseError("ERR Error running script: user_script:3: boom"), False),
        (redis.DataError("Invalid input of type: 'NoneType'"), False),
        (KafkaTimeoutError("no ack"), True),
        (BackendUnavailable("cannot reach Kafka; check KAFKA_BOOTSTRAP_SERVERS"), True),
        (OSError("Broken pipe"), True),
        (ValueError("a bug"), False),
        # redis-py's cluster client while a primary fails over: no RedisError, yet a passing outage
        (redis.exceptions.SlotNotCoveredError('Slot "42" not covered by the cluster.'), True),
        (redis.exceptions.RedisClusterException("Redis Cluster cannot be connected. Please provide ..."), True),
        (redis.exceptions.RedisClusterException("startup_nodes could not agree on a valid slots cache: ..."), True),
        # ... but not a command it cannot route (a bug)
        (redis.exceptions.RedisClusterException("Too many targets for command ('WAIT', 1, 1000)"), False),
    ],
)
def test_only_backend_failures_are_retried(exc: BaseException, transient: bool) -> None:
    assert is_transient(exc) is transient


def _aborted_by_oom() -> redis.exceptions.ExecAbortError:
    try:
        try:
            raise redis.exceptions.OutOfMemoryError("Command # 1 (ZADD k) of pipeline caused error: ... 'maxmemory'.")
        except redis.exceptions.OutOfMemoryError:
            raise redis.exceptions.ExecAbortError("Transaction discarded because of previous errors.")  # noqa: B904
    except redis.exceptions.ExecAbortError as exc:
        return exc


def test_out_of_memory_is_recognised_in_every_form_and_named() -> None:
    for exc in (
        redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'"),
        redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
        _aborted_by_oom(),
    ):
        assert is_out_of_memory(exc) and not is_transient(exc)
        settings = Settings.from_overrides(REDIS_URL="redis://:pw@127.0.0.1:1/0")
        text = describe_failure(exc, settings)
        assert "maxmemory" in text and "REDIS_URL" in text and "pw" not in text
    assert not is_out_of_memory(redis.ResponseError("WRONGTYPE Operation against a key"))
    assert not is_out_of_memory(redis.ConnectionError("Connection refused"))


@pytest.fixture
def monitor() -> KafkaMonitor:
    """A monitor that is never set up: nothing connects (Redis at a dead port, never used)."""
    settings = Settings.from_overrides(REDIS_URL="redis://127.0.0.1:1/0", KAFKA_PRODUCER_MAX_REQUEST_SIZE=40000)
    return KafkaMonitor(settings, redis.Redis.from_url(settings["REDIS_URL"]))


def test_dead_letter_shape(monitor: KafkaMonitor) -> None:
    raw = b'{"url": "http://example.com/", "appid": "testapp", "crawlid": "c1", "priority": 0, "uuid": 7}'
    reason = "Invalid request: crawl: 0 is less than the minimum of 1 (at /priority)"
    letter = json.loads(monitor.dead_letter(raw, reason))
    assert abs(letter.pop("server_time") - time.time()) < 60
    assert letter == {
        "stage": "validation",
        "error": reason,
        "payload": json.loads(raw),
        "appid": "testapp",  # uuid is not a string: left out
    }


@pytest.mark.parametrize(
    "raw",
    [
        "\x01" * 30000,  # JSON escapes each control character into six bytes
        '{"url": "' + "é" * 30000 + '"}',
        "€" * 30000,
    ],
)
def test_a_dead_letter_always_fits_the_producer_limit(monitor: KafkaMonitor, raw: str) -> None:
    encoded = monitor.dead_letter(raw.encode(), "Unparseable JSON: " + "x" * 5000)
    assert len(encoded) <= 40000 - 4096
    letter = json.loads(encoded)
    assert letter["error"].endswith("… (payload truncated)") and len(letter["error"]) < 1100
    assert raw.startswith(letter["payload"]) and letter["payload"]


def test_invalid_utf8_and_nan_payloads_stay_text(monitor: KafkaMonitor) -> None:
    latin1 = '{"appid": "café"}'.encode("latin-1")
    assert json.loads(monitor.dead_letter(latin1, "x"))["payload"] == '{"appid": "caf\ufffd"}'
    assert json.loads(monitor.dead_letter(b'{"a": NaN}', "x"))["payload"] == '{"a": NaN}'
    assert json.loads(monitor.dead_letter(None, "x"))["payload"] == ""


def test_backoff_doubles_to_its_cap_and_a_stop_request_cuts_it_short() -> None:
    backoff = Backoff(first_s=0.01, max_s=0.04)
    waits = []
    for _ in range(4):
        backoff.wait("down")
        waits.append(backoff.current_s)
    assert waits == [0.01, 0.02, 0.04, 0.04]
    backoff.reset()
    slow = Backoff(first_s=30.0)
    started = time.monotonic()
    slow.wait("down", stop=lambda: time.monotonic() - started > 0.2)
    assert time.monotonic() - started < 2


def test_record_origin_is_stable_per_record_and_unique_across_broker_resets() -> None:
    from types import SimpleNamespace

    from crawlhive.utils.backends.kafka_clients import record_origin

    first = SimpleNamespace(topic="demo.incoming", partition=1, offset=7, timestamp=1714563600123)
    again = SimpleNamespace(topic="demo.incoming", partition=1, offset=7, timestamp=1714563600123)
    after_reset = SimpleNamespace(topic="demo.incoming", partition=1, offset=7, timestamp=1714563999000)
    assert record_origin(first) == record_origin(again) == "demo.incoming/1/7@1714563600123"  # type: ignore[arg-type]
    assert record_origin(after_reset) != record_origin(first)  # type: ignore[arg-type]
