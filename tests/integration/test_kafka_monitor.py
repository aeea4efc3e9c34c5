"""The kafka-monitor against a real Redis and a real broker: every request kind, every rejection,
at-least-once without duplicates (redelivery, SIGKILL, Redis outage), stats and heartbeats."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis
from kafka.structs import TopicPartition
from support.crawler import keys_for

from crawlhive.app.embedded import EmbeddedBroker, EmbeddedRedis, free_port
from crawlhive.kafka_monitor.monitor import COMPONENT, BatchResult, KafkaMonitor
from crawlhive.rest.cluster import ClusterView
from crawlhive.utils.backends.kafka_clients import ensure_topics, make_consumer, make_producer, record_origin
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.config.settings import Settings, env_value
from crawlhive.utils.contract.validation import Accepted
from crawlhive.utils.frontier import (
    FrontierLeaser,
    FrontierReader,
    OptionSet,
    decode_priority,
    seed_from_request,
)
from crawlhive.utils.process.intake import request_validator
from crawlhive.utils.process.loop import ForcedShutdown
from crawlhive.utils.state.control import ControlQueue
from crawlhive.utils.state.heartbeat import live_nodes
from crawlhive.utils.state.stats import Stats

if TYPE_CHECKING:
    from conftest import IsolatedNames
    from kafka.producer.future import RecordMetadata

CLI = [sys.executable, "-m", "crawlhive.app.cli"]
#: Keys the monitor writes besides the frontier and the control stream (second part of the key).
BOOKKEEPING = {"stats", "stats-lifetime", "stats-unique", "stats-index", "heartbeat", "nodes"}


# --- helpers ---------------------------------------------------------------------------------------


@pytest.fixture
def km_settings(settings: Settings) -> Settings:
    """A short session timeout: a fresh consumer group joins in about a second on Tansu."""
    return settings.copy_with(KAFKA_SESSION_TIMEOUT_MS=2000)


@pytest.fixture
def monitor(km_settings: Settings, redis_client: redis.Redis) -> Iterator[KafkaMonitor]:
    km = KafkaMonitor(km_settings, redis_client)
    km.setup()
    try:
        yield km
    finally:
        km.teardown()


def produce(settings: Settings, values: list[bytes | None], **overrides: Any) -> list[RecordMetadata]:
    """Send *values* to partition 0 of the incoming topic, in order; returns their metadata.

    A None value is sent with a key (Kafka needs one of them): a record without a value.
    """
    producer = make_producer(settings, **overrides)
    try:
        topic = settings.topic("incoming")
        futures = [
            producer.send(topic, value, key=None if value is not None else b"no-value", partition=0) for value in values
        ]
        producer.flush(timeout=30)
        return [future.get(timeout=30) for future in futures]
    finally:
        producer.close(timeout=5)


def encode(*messages: Any) -> list[bytes | None]:
    return [json.dumps(m).encode() for m in messages]


def drain(monitor: KafkaMonitor, records: int, timeout_s: float = 20.0) -> list[BatchResult]:
    """Run the real loop body until *records* more records have been processed."""
    target = monitor.totals.records + records
    deadline = time.monotonic() + timeout_s
    results = []
    while monitor.totals.records < target:
        assert time.monotonic() < deadline, f"processed {monitor.totals.records} of {target} records"
        result = monitor.run_once()
        if result.records:
            results.append(result)
    assert monitor.totals.records == target
    return results


def read_topic(settings: Settings, short: str, count: int, timeout_s: float = 15.0) -> list[Any]:
    """The first *count* messages of a topic (all partitions), parsed."""
    consumer = make_consumer(settings, settings.topic(short), group_id=None)
    found: list[Any] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(found) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                found.extend(json.loads(r.value) for r in records)
    finally:
        consumer.close()
    assert len(found) >= count, f"{len(found)} of {count} messages on {short}"
    return found


def state_keys(client: redis.Redis, names: IsolatedNames) -> set[bytes]:
    """Every key of this test except the monitor's own stats and heartbeat keys."""
    found = set(client.scan_iter(match=f"{names.key_prefix}:*", count=1000))
    return {k for k in found if _kind(k) not in BOOKKEEPING}


def _kind(key: bytes) -> str:
    """The kind of a key: the part after the prefix and after a shard's hash tag, if any."""
    parts = key.split(b":")[1:]
    if parts and parts[0].startswith(b"{"):
        parts = parts[1:]
    return parts[0].decode() if parts else ""


def queued(client: redis.Redis, keys: Keys, crawls: list[str], domains: list[str], appid: str = "testapp") -> int:
    """Members across the crawl queues of *crawls* x *domains* (spider ``link``)."""
    pipe = client.pipeline(transaction=False)
    for crawl in crawls:
        for domain in domains:
            pipe.zcard(keys.crawl_queue("link", appid, crawl, domain))
    return sum(pipe.execute())


def read_incoming(settings: Settings, names: IsolatedNames, count: int) -> list[Any]:
    """The first *count* records of the test's incoming topic (as a redelivery would bring them)."""
    consumer = make_consumer(settings, names.topic("incoming"), group_id=None)
    try:
        records: list[Any] = []
        while len(records) < count:
            records.extend(r for batch in consumer.poll(timeout_ms=500).values() for r in batch)
        return records
    finally:
        consumer.close()


def crawl(url: str, crawlid: str = "c1", **extra: Any) -> dict[str, Any]:
    return {"url": url, "appid": "testapp", "crawlid": crawlid, **extra}


# --- each kind lands in Redis ------------------------------------------------------------------------


def test_each_kind_lands_in_redis_as_specified(
    monitor: KafkaMonitor, km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    full = crawl(
        "http://www.Example.com/a?b=1",
        priority=7,
        maxdepth=2,
        expires=1893456000,
        attrs={"job": "nightly"},
        method="POST",
        headers={"Content-Type": "application/json"},
        body='{"q": 1}',
        cookies={"session": "x1"},
        allow_regex=["^https?://"],
    )
    info = {"action": "info", "appid": "testapp", "spiderid": "link", "uuid": "i-1"}
    stop = {"action": "stop", "appid": "testapp", "crawlid": "c1", "spiderid": "link", "uuid": "s-1"}
    stats = {"appid": "testapp", "uuid": "st-1"}
    domain = {"uuid": "d-1", "appid": "testapp", "action": "domain-update", "domain": "WWW.Ebay.com", "hits": 6}
    domain["window"] = 60
    blacklist = {"uuid": "d-2", "appid": "testapp", "action": "blacklist-update", "domain": "bad.example.org"}
    metadata = produce(km_settings, encode(full, info, stop, stats, domain, blacklist))
    drain(monitor, 6)

    keys = keys_for(names.key_prefix)
    validator = request_validator(km_settings)
    accepted = validator.validate(dict(full))
    assert isinstance(accepted, Accepted)
    origin = f"{names.topic('incoming')}/{metadata[0].partition}/{metadata[0].offset}@{metadata[0].timestamp}"
    expected = seed_from_request(accepted.message, origin)

    # crawl: the exact encoded request in its (spider, crawl, domain) queue, and every index
    queue_key = keys.crawl_queue("link", "testapp", "c1", "example.com")
    queue = redis_client.zrange(queue_key, 0, -1, withscores=True)
    expected.option_set = OptionSet.of(expected)
    assert len(queue) == 1 and queue[0][0] == expected.member()
    assert decode_priority(queue[0][1]) == 7
    member = FrontierLeaser.from_settings(redis_client, km_settings).queued_request(queue_key, *queue[0])
    assert member == expected
    assert (member.url, member.domain, member.request_id, member.method) == (
        "http://www.Example.com/a?b=1",
        "example.com",
        origin,
        "POST",
    )
    assert (member.body, member.cookies, member.attrs, member.depth) == (
        '{"q": 1}',
        {"session": "x1"},
        full["attrs"],
        0,
    )
    assert redis_client.zrange(keys.domain_crawls("link", "example.com"), 0, -1, withscores=True) == [
        (keys.crawl_member("testapp", "c1").encode(), queue[0][1])
    ]
    shard = keys.shard_of("example.com")
    assert redis_client.zrange(keys.domains("link", shard=shard), 0, -1, withscores=True) == [(b"example.com", 0.0)]
    assert redis_client.smembers(keys.crawl_domains("link", "testapp", "c1", shard=shard)) == {b"example.com"}
    assert redis_client.smembers(keys.app_crawls("link", "testapp")) == {b"c1"}
    ref = keys.crawl_ref("link", "testapp", "c1")
    assert redis_client.smembers(keys.active_crawls()) == {ref.encode()}
    record = redis_client.hgetall(keys.crawl("link", "testapp", "c1"))
    assert {k: record[k] for k in (b"appid", b"crawlid", b"spiderid", b"expires")} == {
        b"appid": b"testapp",
        b"crawlid": b"c1",
        b"spiderid": b"link",
        b"expires": b"1893456000",
    }
    assert abs(int(record[b"last_activity"]) - time.time()) < 60
    assert redis_client.ttl(keys.crawl("link", "testapp", "c1")) > 0
    assert redis_client.zscore(keys.expiries(), ref) == 1893456000

    # action, stats, domain-config: one control-stream entry each, schema defaults filled in
    pending = ControlQueue(redis_client, keys).pending()
    assert sorted(pending, key=json.dumps) == sorted(
        [
            ("action", info),
            ("action", stop),
            ("stats", {**stats, "stats": "all"}),
            ("domain-config", {**domain, "domain": "ebay.com", "scale": 1.0}),
            ("domain-config", {**blacklist, "domain": "example.org", "hits": 0, "window": 0, "scale": 1.0}),
        ],
        key=json.dumps,
    )


def test_priorities_pop_highest_first_then_in_arrival_order(
    monitor: KafkaMonitor, km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    priorities = [5, 90, 1, 90, 50, 100, 5]
    produce(km_settings, encode(*(crawl(f"http://example.com/{i}", priority=p) for i, p in enumerate(priorities))))
    drain(monitor, len(priorities))
    key = keys_for(names.key_prefix).crawl_queue("link", "testapp", "c1", "example.com")
    popped = []
    worker = FrontierLeaser.from_settings(redis_client, km_settings)
    while entry := redis_client.zpopmin(key):
        request = worker.queued_request(key, *entry[0])
        popped.append((request.priority, request.url))
    assert popped == [
        (100, "http://example.com/5"),
        (90, "http://example.com/1"),
        (90, "http://example.com/3"),
        (50, "http://example.com/4"),
        (5, "http://example.com/0"),
        (5, "http://example.com/6"),
        (1, "http://example.com/2"),
    ]


# --- rejections ------------------------------------------------------------------------------------

LATIN1 = '{"url": "http://café.example/", "appid": "testapp", "crawlid": "c1"}'.encode("latin-1")
UTF16 = json.dumps(crawl("http://example.com/")).encode("utf-16")
GARBAGE = bytes(range(256)) * 4

#: (raw record value, dead-letter error) for every way docs/contract.md §2 rejects a message.
REJECTIONS: list[tuple[bytes | None, str]] = [
    (b'{"url": "x" "appid"}', "Unparseable JSON: Expecting ',' delimiter: line 1 column 13 (char 12)"),
    (LATIN1, "Unparseable JSON: invalid UTF-8: invalid continuation byte at byte 19"),
    (UTF16, "Unparseable JSON: invalid UTF-8: invalid start byte at byte 0"),
    (GARBAGE, "Unparseable JSON: invalid UTF-8: invalid start byte at byte 128"),
    (b"\x00\x01binary\x02", "Unparseable JSON: Expecting value: line 1 column 1 (char 0)"),
    (b"", "Unparseable JSON: Expecting value: line 1 column 1 (char 0)"),
    (None, "Unparseable JSON: Expecting value: line 1 column 1 (char 0)"),
    (b'{"a": NaN}', "Unparseable JSON: NaN is not valid JSON"),
    (b"[" * 5000 + b"]" * 5000, "Unparseable JSON: nesting too deep"),
    (
        b'{"url": "http://x.com/\\ud800", "appid": "testapp", "crawlid": "c1"}',
        "Unparseable JSON: a string holds an unpaired surrogate escape (\\ud800-\\udfff)",
    ),
    (b"[1, 2]", "Invalid request: request must be a JSON object"),
    (b'"text"', "Invalid request: request must be a JSON object"),
    (b"null", "Invalid request: request must be a JSON object"),
    (b"42", "Invalid request: request must be a JSON object"),
    *(
        (json.dumps(message).encode(), f"Invalid request: {cause}")
        for message, cause in [
            ({"url": "http://x.com/", "appid": "testapp"}, "crawl: 'crawlid' is a required property"),
            (crawl("http://example.com/", priority=0), "crawl: 0 is less than the minimum of 1 (at /priority)"),
            (
                crawl("http://example.com/", priority=101),
                "crawl: 101 is greater than the maximum of 100 (at /priority)",
            ),
            ({"url": "http://x.com/", "appid": "ab", "crawlid": "x"}, "crawl: 'ab' is too short (at /appid)"),
            (crawl("http://x.com/", maxdepth=4), "crawl: 4 is greater than the maximum of 3 (at /maxdepth)"),
            (crawl("http://x.com/", attrs=None), "crawl: None is not of type 'object' (at /attrs)"),
            (
                crawl("http://x.com/", crazykey=1),
                "crawl: Additional properties are not allowed ('crazykey' was unexpected)",
            ),
            (crawl("ftp://x/"), "crawl: 'ftp://x/' is not an absolute http(s) URL (at /url)"),
            (crawl("http://"), "crawl: 'http://' is not an absolute http(s) URL (at /url)"),
            (
                crawl("http://x.com/", deny_regex=["(unclosed"]),
                "crawl: invalid regular expression: missing ): (unclosed (at /deny_regex/0)",
            ),
            (  # backtracking constructs are refused: RE2 runs in linear time (§10.4)
                crawl("http://x.com/", allow_regex=["ok", "(a+)\\1"]),
                "crawl: invalid regular expression: invalid escape sequence: \\1 (at /allow_regex/1)",
            ),
            (
                crawl("http://x.com/", method="TRACE"),
                "crawl: 'TRACE' is not one of ['GET', 'HEAD', 'POST'] (at /method)",
            ),
            (
                crawl("http://x.com/", method="DELETE"),
                "crawl: 'DELETE' is not one of ['GET', 'HEAD', 'POST'] (at /method)",
            ),
            (
                crawl("http://x.com/", headers={"X-Ok": "1", "hOsT": "internal"}),
                "crawl: header 'hOsT' is not allowed (at /headers/hOsT)",
            ),
            (
                crawl("http://x.com/", headers={"X-Forwarded-For": "10.0.0.1"}),
                "crawl: header 'X-Forwarded-For' is not allowed (at /headers/X-Forwarded-For)",
            ),
            (
                crawl("http://x.com/", headers={"X-A": "a\r\nInjected: 1"}),
                "crawl: value does not match '^[^\\\\r\\\\n]*$' (at /headers/X-A)",
            ),
            (
                {"action": "expire", "appid": "testapp", "spiderid": "link", "uuid": "u1"},
                "action: 'expire' is not one of ['stop', 'info'] (at /action)",
            ),
            (
                {"action": "stop", "appid": "testapp", "spiderid": "link", "uuid": "u2"},
                "action: 'crawlid' is a required property",
            ),
            (
                {"uuid": "u3", "appid": "testapp", "action": "domain-update", "domain": "x.com"},
                "domain-config: 'hits' is a required property",
            ),
            (
                {
                    "uuid": "u4",
                    "appid": "testapp",
                    "action": "domain-update",
                    "domain": "x.com",
                    "hits": 0,
                    "window": 5,
                },
                "domain-config: 0 is less than the minimum of 1 (at /hits)",
            ),
            (
                {"uuid": "u5", "appid": "testapp", "action": "domain-remove", "domain": "http://x.com/"},
                "domain-config: 'http://x.com/' is not a valid domain (at /domain)",
            ),
            (
                {"uuid": "u6", "appid": "testapp", "stats": "everything"},
                "stats: 'everything' is not one of ['kafka-monitor', 'redis-monitor', 'crawler', 'cleaner', 'spider',"
                " 'machine', 'queue', 'rest', 'proxies', 'sink', 'all'] (at /stats)",
            ),
            ({"uuid": "u7"}, "stats: 'appid' is a required property"),
            (
                {"appid": 5, "uuid": ["x"], "url": "http://x.com/", "crawlid": "c"},
                "crawl: Additional properties are not allowed ('uuid' was unexpected)",
            ),
        ]
    ),
]


def expected_letter(raw: bytes | None, error: str) -> dict[str, Any]:
    """The dead letter docs/contract.md §6 (a) describes, without ``server_time``."""
    text = (raw or b"").decode("utf-8", errors="replace")
    try:
        payload = json.loads((raw or b"").decode("utf-8"), parse_constant=lambda c: 1 / 0)
        json.dumps(payload, ensure_ascii=False).encode()
    except (ValueError, RecursionError, ZeroDivisionError):
        payload = text
    letter = {"stage": "validation", "error": error, "payload": payload}
    if isinstance(payload, dict):
        letter.update({f: payload[f] for f in ("uuid", "appid") if isinstance(payload.get(f), str)})
    return letter


def canonical(letters: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(letter, sort_keys=True) for letter in letters)


def test_every_rejection_is_dead_lettered_with_its_reason_and_nothing_else_changes(
    monitor: KafkaMonitor, km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    before = state_keys(redis_client, names)
    produce(km_settings, [raw for raw, _ in REJECTIONS])
    results = drain(monitor, len(REJECTIONS))
    assert sum(r.rejected for r in results) == len(REJECTIONS) and not any(r.accepted for r in results)
    assert state_keys(redis_client, names) == before  # no frontier key, no control entry

    letters = read_topic(km_settings, "dead_letter", len(REJECTIONS))
    for letter in letters:
        assert abs(letter.pop("server_time") - time.time()) < 120
        assert set(letter) <= {"stage", "error", "payload", "uuid", "appid"}
    wanted = [expected_letter(raw, error) for raw, error in REJECTIONS]
    assert canonical(letters) == canonical(wanted)
    # the examples of docs/contract.md §6, field for field
    assert {
        "stage": "validation",
        "error": "Invalid request: crawl: 0 is less than the minimum of 1 (at /priority)",
        "payload": {"url": "http://example.com/", "appid": "testapp", "crawlid": "c1", "priority": 0},
        "appid": "testapp",
    } in letters
    assert {
        "stage": "validation",
        "error": "Unparseable JSON: Expecting ',' delimiter: line 1 column 13 (char 12)",
        "payload": '{"url": "x" "appid"}',
    } in letters


def test_valid_requests_in_a_batch_with_invalid_ones_are_processed(
    monitor: KafkaMonitor, km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    bad = [b"{nope", GARBAGE, json.dumps(crawl("http://x.com/", priority=0)).encode(), b"[]"]
    good = encode(*(crawl(f"http://site{i}.com/") for i in range(4)), {"appid": "testapp", "uuid": "st"})
    mixed = [value for pair in zip(good, bad + [b"null"], strict=True) for value in pair]
    produce(km_settings, mixed)
    results = drain(monitor, len(mixed))
    assert sum(r.accepted for r in results) == 5 and sum(r.rejected for r in results) == 5
    assert any(r.accepted and r.rejected for r in results)
    keys = keys_for(names.key_prefix)
    assert queued(redis_client, keys, ["c1"], [f"site{i}.com" for i in range(4)]) == 4
    assert ControlQueue(redis_client, keys).pending() == [("stats", {"appid": "testapp", "uuid": "st", "stats": "all"})]
    assert len(read_topic(km_settings, "dead_letter", 5)) == 5


def test_a_request_of_expensive_patterns_is_dead_lettered_at_once_and_the_next_one_goes_through(
    monitor: KafkaMonitor, km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    """200 patterns like ``\\pL{1,446}a0`` (3.7 KB) took 67 s and +722 MB to validate: the monitor
    was evicted from its group and rewound the batch forever. Now: refused by the repetition cap."""
    hostile = crawl(
        "http://example.com/",
        allow_regex=[rf"\pL{{1,446}}a{i}" for i in range(100)],
        deny_regex=[rf"\pL{{1,446}}d{i}" for i in range(100)],
    )
    near_limit = crawl("http://example.com/", allow_regex=[rf"\pL{{1,100}}a{i}" for i in range(100)])
    produce(km_settings, encode(hostile, near_limit, crawl("http://example.com/next")))
    started = time.monotonic()
    results = drain(monitor, 3)
    assert time.monotonic() - started < 5  # one poll; the validation itself takes milliseconds
    assert sum(r.rejected for r in results) == 2 and sum(r.accepted for r in results) == 1
    assert queued(redis_client, keys_for(names.key_prefix), ["c1"], ["example.com"]) == 1
    errors = sorted(letter["error"] for letter in read_topic(km_settings, "dead_letter", 2))
    assert errors == [
        "Invalid request: crawl: pattern too complex: program size over"
        " SCHEMA_REGEX_MAX_PROGRAM (20000) (at /allow_regex/0)",
        "Invalid request: crawl: pattern too complex: repetition '{1,446}' over"
        " SCHEMA_REGEX_MAX_REPEAT (100) (at /allow_regex/0)",
    ]


def test_oversized_messages_are_dead_lettered_with_a_truncated_payload(
    monitor: KafkaMonitor, km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    big_body = json.dumps(crawl("http://example.com/", body="é" * 1_100_000)).encode()  # 2.2 MB, too long a body
    big_garbage = b"\xfe" + b"x" * 2_000_000
    ok = json.dumps(crawl("http://example.com/ok")).encode()
    produce(km_settings, [big_body, ok, big_garbage], max_request_size=8 * 1024 * 1024)
    results = drain(monitor, 3)
    assert sum(r.rejected for r in results) == 2 and sum(r.accepted for r in results) == 1
    assert queued(redis_client, keys_for(names.key_prefix), ["c1"], ["example.com"]) == 1

    letters = read_topic(km_settings, "dead_letter", 2)
    by_start = {letter["payload"][:2]: letter for letter in letters}
    body_letter, garbage_letter = by_start['{"'], by_start["\ufffdx"]
    assert body_letter["payload"] == big_body.decode()[:65536]
    assert body_letter["error"] == "Invalid request: crawl: value is too long (at /body) (payload truncated)"
    assert body_letter["appid"] == "testapp"  # taken from the request, which was an object
    assert garbage_letter == {
        "stage": "validation",
        "error": "Unparseable JSON: invalid UTF-8: invalid start byte at byte 0 (payload truncated)",
        "payload": big_garbage.decode("utf-8", errors="replace")[:65536],
        "server_time": garbage_letter["server_time"],
    }
    for letter in letters:
        assert len(json.dumps(letter, ensure_ascii=False).encode()) < km_settings["KAFKA_PRODUCER_MAX_REQUEST_SIZE"]


# --- at least once, never twice ---------------------------------------------------------------------


def test_concurrent_info_requests_with_different_uuids_are_both_kept(
    monitor: KafkaMonitor, km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    first = {"action": "info", "appid": "testapp", "crawlid": "c1", "spiderid": "link", "uuid": "u-a"}
    second = {**first, "uuid": "u-b"}
    produce(km_settings, encode(first, second))
    drain(monitor, 2)
    assert ControlQueue(redis_client, keys_for(names.key_prefix)).pending() == [("action", first), ("action", second)]


def test_redelivered_records_queue_nothing_twice(
    monitor: KafkaMonitor, km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    messages = [
        *(crawl(f"http://site{i % 3}.com/{i}", priority=i + 1) for i in range(6)),
        crawl("http://site0.com/0"),  # the same request again: a deliberate resubmission queues it again
        {"action": "info", "appid": "testapp", "spiderid": "link", "uuid": "i"},
        {"appid": "testapp", "uuid": "s", "stats": "queue"},
        {"uuid": "d", "appid": "testapp", "action": "blacklist-remove", "domain": "site1.com"},
    ]
    produce(km_settings, encode(*messages))
    drain(monitor, len(messages))
    keys = keys_for(names.key_prefix)
    domains = ["site0.com", "site1.com", "site2.com"]
    changing = {keys.crawl("link", "testapp", "c1").encode(), keys.queue_sequence().encode()}  # last_activity, seq
    snapshot = {k: redis_client.dump(k) for k in state_keys(redis_client, names) - changing}
    assert queued(redis_client, keys, ["c1"], domains) == 7
    assert len(ControlQueue(redis_client, keys).pending()) == 3

    # Redelivery, exactly as after a crash before the commit: the same records, in the loop...
    again = KafkaMonitor(km_settings.copy_with(KAFKA_GROUP=names.group("second")), redis_client)
    again.setup()
    try:
        drain(again, len(messages))
    finally:
        again.teardown()
    # ... and once more straight through process()
    records = read_incoming(km_settings, names, len(messages))
    monitor.process(records)

    assert queued(redis_client, keys, ["c1"], domains) == 7
    assert len(ControlQueue(redis_client, keys).pending()) == 3
    after = {k: redis_client.dump(k) for k in snapshot}
    assert after == snapshot  # queues, indexes, control stream: byte for byte unchanged


def test_a_record_redelivered_after_its_seed_was_crawled_queues_nothing(
    monitor: KafkaMonitor, km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    """A kafka-monitor killed between its Redis write and its offset commit redelivers records whose
    seeds crawlers may have taken (and finished) meanwhile: those seeds must not be queued again
    (their whole subtree would be crawled twice), while a new record with the same request is."""
    messages = [crawl(f"http://site{i}.com/") for i in range(3)]
    produce(km_settings, encode(*messages))
    drain(monitor, len(messages))
    keys = keys_for(names.key_prefix)
    domains = ["site0.com", "site1.com", "site2.com"]
    assert queued(redis_client, keys, ["c1"], domains) == 3
    worker = FrontierLeaser.from_settings(redis_client, km_settings.copy_with(QUEUE_HITS=1000, QUEUE_WINDOW=1))
    for _ in messages:  # crawlers take and finish every seed
        lease = worker.pop("link").lease
        assert lease is not None and worker.ack(lease, "crawled")
    assert queued(redis_client, keys, ["c1"], domains) == 0

    records = read_incoming(km_settings, names, len(messages))
    result = monitor.process(records)  # the redelivery
    assert (result.accepted, result.rejected) == (3, 0)  # accepted (already done), not dead letters
    assert queued(redis_client, keys, ["c1"], domains) == 0
    markers = [keys.seed_origin(record_origin(r), keys.shard_of(d)) for r, d in zip(records, domains, strict=True)]
    assert all(redis_client.ttl(marker) > 3600 for marker in markers)  # beside each seed's queue

    produce(km_settings, encode(messages[0]))  # the same request as a new record: a resubmission
    drain(monitor, 1)
    assert queued(redis_client, keys, ["c1"], domains) == 1


def test_a_seed_read_after_its_crawls_stop_but_sent_before_it_stays_out(
    monitor: KafkaMonitor, km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    """Records of several partitions are read in no particular order, so a stop sent 3 s after a
    seed can reach the redis-monitor first: the seed queued after the purge started the stopped
    crawl again (listed ``waiting`` for ever when no crawler serves it). Here the stop is handled
    before the seed, as it was then, deterministically: the seed stays out; one sent after the
    stop is queued (§3.9: fetched, its links not followed)."""
    seed = crawl("http://race.example/", crawlid="race", spiderid="nobody")
    stop = {"action": "stop", "appid": "testapp", "crawlid": "race", "spiderid": "nobody", "uuid": "st"}
    produce(km_settings, encode(seed, stop))
    seed_record, stop_record = read_incoming(km_settings, names, 2)
    assert seed_record.timestamp <= stop_record.timestamp
    keys = keys_for(names.key_prefix)
    reader = FrontierReader.from_settings(redis_client, km_settings)
    monitor.process([stop_record])
    assert ControlQueue(redis_client, keys).pending() == [("action", stop)]
    assert reader.purge("nobody", "testapp", "race") == 0  # what the redis-monitor's stop runs
    result = monitor.process([seed_record])  # the seed, read after the stop took effect
    assert (result.accepted, result.rejected) == (1, 0)
    queue = keys.crawl_queue("nobody", "testapp", "race", "race.example")
    assert redis_client.zcard(queue) == 0
    assert ("nobody", "testapp", "race") not in reader.active_refs()
    view = ClusterView(redis_client, km_settings, {})
    assert [r for r in view.crawl_list() if r["crawlid"] == "race"] == []  # not listed as waiting

    time.sleep(0.01)  # a resubmission, sent after the stop took effect: queued
    produce(km_settings, encode(seed))
    again = read_incoming(km_settings, names, 3)[2]
    monitor.process([again])
    assert redis_client.zcard(queue) == 1
    rows = [r for r in view.crawl_list() if r["crawlid"] == "race"]
    assert [r["state"] for r in rows] == ["waiting"]


class FailsOnce(KafkaMonitor):
    """A monitor whose first batch fails as if Redis had dropped the connection."""

    failed: list[tuple[int, int]] | None = None

    def process(self, records: list[Any]) -> BatchResult:
        if self.failed is None:
            self.failed = [(r.partition, r.offset) for r in records]
            raise redis.ConnectionError("simulated: connection reset by peer")
        return super().process(records)


def test_a_failed_batch_is_rewound_redelivered_and_committed_once_done(
    km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    km = FailsOnce(km_settings, redis_client)
    km.setup()
    try:
        produce(km_settings, encode(*(crawl(f"http://example.com/{i}") for i in range(5))))
        deadline = time.monotonic() + 20
        while km.totals.records < 5:
            assert time.monotonic() < deadline
            try:
                km.run_once()
            except redis.ConnectionError:
                assert km.failed  # the first poll's records failed; the next poll must return them again
        assert km.failed == [(0, i) for i in range(5)]
        assert queued(redis_client, keys_for(names.key_prefix), ["c1"], ["example.com"]) == 5
        assert km.consumer is not None
        assert km.consumer.committed(TopicPartition(names.topic("incoming"), 0)) == 5
    finally:
        km.teardown()


@pytest.mark.skipif(
    os.environ.get("CRAWLHIVE_TEST_REDIS") == "cluster",
    reason="CONFIG SET maxmemory reaches one node of a cluster, not the nodes the batch writes to",
)
def test_redis_out_of_memory_dead_letters_the_batch_instead_of_rewinding_it_forever(
    km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames, caplog: pytest.LogCaptureFixture
) -> None:
    """An ``OOM`` reply (maxmemory reached, noeviction) was transient: the batch was rewound and
    retried forever while the whole cluster backed off (and redis-py's OutOfMemoryError made the
    monitor dead-letter it as an internal error, then crash on the stats count). Now it is retried
    once, then its records are dead-lettered with the reason, one ERROR names maxmemory, and the
    next batch goes through."""
    # no heartbeat falls in the out-of-memory window (it would fail there, after the commit)
    monitor = KafkaMonitor(km_settings.copy_with(HEARTBEAT_INTERVAL=3600.0), redis_client)
    monitor.setup()
    try:
        _out_of_memory_then_back(monitor, km_settings, redis_client, names, caplog)
    finally:
        monitor.teardown()


def _out_of_memory_then_back(
    monitor: KafkaMonitor,
    km_settings: Settings,
    redis_client: redis.Redis,
    names: IsolatedNames,
    caplog: pytest.LogCaptureFixture,
) -> None:
    keys = keys_for(names.key_prefix)
    before = redis_client.config_get("maxmemory")["maxmemory"], redis_client.config_get("maxmemory-policy")
    produce(km_settings, encode(crawl("http://example.com/a"), {"appid": "testapp", "uuid": "st"}))
    caplog.set_level(logging.INFO, logger="crawlhive.kafka_monitor.monitor")
    redis_client.config_set("maxmemory-policy", "noeviction")
    redis_client.config_set("maxmemory", 1)  # every write that may grow memory is refused
    try:
        results = drain(monitor, 2, timeout_s=20)
    finally:
        redis_client.config_set("maxmemory", before[0])
        redis_client.config_set("maxmemory-policy", before[1]["maxmemory-policy"])
    assert sum(r.rejected for r in results) == 2 and not any(r.accepted for r in results)
    letters = read_topic(km_settings, "dead_letter", 2)
    assert {letter["error"] for letter in letters} == {"Redis out of memory (maxmemory)"}
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "maxmemory" in errors[0].getMessage(), [r.getMessage() for r in errors]
    assert queued(redis_client, keys, ["c1"], ["example.com"]) == 0

    produce(km_settings, encode(crawl("http://example.com/b")))  # memory is back: work goes on
    assert sum(r.accepted for r in drain(monitor, 1)) == 1
    assert queued(redis_client, keys, ["c1"], ["example.com"]) == 1


def _monitor_env(settings: Settings, home: Path, **extra: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_HOSTS", "REDIS_HOST", "REDIS_PORT")}
    for name in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS", "REDIS_KEY_PREFIX", "KAFKA_TOPIC_PREFIX"):
        env[name] = env_value(settings[name])
    env.update({"CRAWLHIVE_HOME": str(home), "KAFKA_SESSION_TIMEOUT_MS": "2000", "LOG_LEVEL": "INFO"})
    env.update({k: env_value(v) for k, v in extra.items()})
    return env


def test_sigkill_mid_batch_then_restart_queues_every_request_exactly_once(
    km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames, tmp_path: Path
) -> None:
    total, crawls, domains = 10_000, ["k1", "k2"], [f"site{i}.com" for i in range(25)]
    keys = keys_for(names.key_prefix)
    values = encode(
        *(crawl(f"http://www.{domains[i % 25]}/p{i}", crawls[i % 2], priority=i % 100 + 1) for i in range(total))
    )
    producer = make_producer(km_settings)
    try:
        ensure_topics(km_settings, [names.topic("incoming")])
        for value in values:
            producer.send(names.topic("incoming"), value)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=5)

    env = _monitor_env(km_settings, tmp_path, KAFKA_CONSUMER_MAX_POLL_RECORDS=1000)
    log = tmp_path / "km.log"
    with open(log, "wb") as out:
        first = subprocess.Popen([*CLI, "kafka-monitor"], env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            count = 0
            while count == 0 and time.monotonic() < deadline and first.poll() is None:
                count = queued(redis_client, keys, crawls, domains)
                time.sleep(0.002)
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
    killed_at = queued(redis_client, keys, crawls, domains)
    assert 0 < killed_at < total, f"not killed mid-way ({killed_at} queued); log:\n{log.read_text()[-3000:]}"

    with open(log, "ab") as out:
        second = subprocess.Popen([*CLI, "kafka-monitor"], env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            lifetime = keys.stats_lifetime(COMPONENT, "total")
            _wait_for(lambda: queued(redis_client, keys, crawls, domains) == total, 40)
            # a batch is counted just after it is queued: wait for the last count, do not race it
            _wait_for(lambda: int(redis_client.get(lifetime) or 0) >= total, 10)
            second.send_signal(signal.SIGTERM)
            assert second.wait(20) == 0, log.read_text()[-3000:]
        finally:
            if second.poll() is None:
                second.kill()
                second.wait()
    assert queued(redis_client, keys, crawls, domains) == total, log.read_text()[-3000:]
    text = log.read_text()
    assert "stopping after this batch" in text and "records in" in text  # graceful stop, progress line


def test_redis_down_at_start_and_later_the_monitor_backs_off_and_loses_nothing(
    km_settings: Settings, names: IsolatedNames, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    server = EmbeddedRedis(free_port(), appendonly=True, workdir=tmp_path / "redis")  # not started yet
    settings = km_settings.copy_with(REDIS_URL=server.url)
    keys = keys_for(names.key_prefix)
    domains = [f"site{i}.com" for i in range(5)]
    km = KafkaMonitor.from_settings(settings)
    caplog.set_level(logging.WARNING, logger="crawlhive.kafka_monitor.monitor")
    errors: list[BaseException] = []

    def run() -> None:
        try:
            km.run()
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    client: redis.Redis | None = None
    try:
        time.sleep(1.0)
        assert "check REDIS_URL" in caplog.text  # unreachable at start-up: retrying, naming the setting
        server.start()
        client = redis.Redis.from_url(server.url)
        produce(settings, encode(*(crawl(f"http://{domains[i % 5]}/a{i}") for i in range(200))))
        _wait_for(lambda: queued(client, keys, ["c1"], domains) == 200, 20)

        caplog.clear()
        server.stop()  # Redis goes away while requests arrive
        produce(settings, encode(*(crawl(f"http://{domains[i % 5]}/b{i}") for i in range(300))))
        _wait_for(lambda: "check REDIS_URL" in caplog.text, 15)
        server.start()
        _wait_for(lambda: queued(client, keys, ["c1"], domains) == 500, 30)
        assert live_nodes(client, keys, COMPONENT) == {km_settings.node_name: [km.node_id]}
    finally:
        km.stopping = True
        thread.join(30)
        if client is not None:
            client.close()
        server.close()
    assert not thread.is_alive() and not errors


def _wait_for(condition: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return
        except redis.RedisError:
            pass
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_kafka_unreachable_at_start_is_retried_and_sigterm_still_exits_0(km_settings: Settings, tmp_path: Path) -> None:
    env = _monitor_env(km_settings, tmp_path)
    env["KAFKA_BOOTSTRAP_SERVERS"] = "127.0.0.1:1"
    proc = subprocess.Popen([*CLI, "kafka-monitor"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen = b""
    try:
        assert proc.stdout is not None
        while b"retrying in" not in seen:  # retrying: its stop handlers are installed by then
            line = proc.stdout.readline()  # (a fixed sleep lost that race on a loaded machine: -15)
            assert line, seen.decode()
            seen += line
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    text = (seen + out).decode()
    assert proc.returncode == 0, text
    assert "cannot reach Kafka at 127.0.0.1:1" in text and "check KAFKA_BOOTSTRAP_SERVERS" in text
    assert "retrying in" in text


# --- stats and heartbeats ---------------------------------------------------------------------------


def test_stats_and_heartbeat_are_written(
    monitor: KafkaMonitor, km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames
) -> None:
    keys = keys_for(names.key_prefix)
    assert live_nodes(redis_client, keys, COMPONENT) == {km_settings.node_name: [monitor.node_id]}
    produce(
        km_settings,
        encode(
            crawl("http://a.com/"),
            crawl("http://b.com/"),
            {"appid": "testapp", "uuid": "s1"},
            {"action": "info", "appid": "testapp", "spiderid": "link", "uuid": "i1"},
            {"nope": 1},
        )
        + [b"garbage"],
    )
    drain(monitor, 6)
    stats = Stats(redis_client, keys, km_settings.getlist("STATS_TIMES"))
    windows = [str(w) for w in km_settings.getlist("STATS_TIMES")]

    def window_map(n: int) -> dict[str, int]:
        return {**dict.fromkeys(windows, n), "lifetime": n}

    assert stats.read(COMPONENT, "total") == window_map(6)
    assert stats.read(COMPONENT, "fail") == window_map(2)
    assert stats.read(COMPONENT, "plugin:ScraperHandler") == window_map(2)
    assert stats.read(COMPONENT, "plugin:StatsHandler") == window_map(1)
    assert stats.read(COMPONENT, "plugin:ActionHandler") == window_map(1)
    assert stats.read(COMPONENT, "plugin:DomainConfigHandler") == {}
    monitor.teardown()
    assert live_nodes(redis_client, keys, COMPONENT) == {}


def test_first_signal_finishes_the_batch_second_forces(km_settings: Settings, redis_client: redis.Redis) -> None:
    km = KafkaMonitor(km_settings, redis_client)
    saved = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        km.install_signal_handlers()
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        handler(signal.SIGTERM, None)
        assert km.stopping
        with pytest.raises(ForcedShutdown):
            handler(signal.SIGINT, None)
        km.run()  # stopping before start: returns at once, nothing connected
        assert km.consumer is None
    finally:
        signal.signal(signal.SIGTERM, saved[0])
        signal.signal(signal.SIGINT, saved[1])


def test_broker_down_while_idle_is_reported_and_work_resumes_when_it_is_back(
    km_settings: Settings, redis_client: redis.Redis, names: IsolatedNames, tmp_path: Path
) -> None:
    # In a child process: kafka-python leaks the socket of each reconnect attempt refused while the
    # broker is down (see utils/backends/kafka_clients.py), which pytest's warning filter would turn into errors.
    broker = EmbeddedBroker(free_port())  # a fixed port: clients keep the address across the restart
    keys = keys_for(names.key_prefix)
    log = tmp_path / "km.log"
    try:
        broker.start()
        settings = km_settings.copy_with(KAFKA_BOOTSTRAP_SERVERS=broker.bootstrap)
        env = _monitor_env(settings, tmp_path, HEARTBEAT_INTERVAL=0.5)
        with open(log, "wb") as out:
            proc = subprocess.Popen([*CLI, "kafka-monitor"], env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            produce(settings, encode(crawl("http://example.com/first")))
            _wait_for(lambda: queued(redis_client, keys, ["c1"], ["example.com"]) == 1, 20)
            broker.stop()  # in-memory storage: it comes back empty, as a new cluster
            _wait_for(lambda: "check KAFKA_BOOTSTRAP_SERVERS" in log.read_text(), 15)
            assert proc.poll() is None
            broker.start()
            produce(settings, encode(*(crawl(f"http://example.com/{i}") for i in range(20))))
            _wait_for(lambda: queued(redis_client, keys, ["c1"], ["example.com"]) == 21, 40)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0, log.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    finally:
        broker.close()
