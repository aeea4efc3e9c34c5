"""The kafka-monitor against a real Redis and a real broker: every request kind, every rejection,
at-least-once without duplicates on redelivery. (Failures and recovery, SIGKILL, Redis and broker
outages, signals, stats and heartbeats: test_kafka_monitor_recovery.py.)"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import redis
from support.crawler import keys_for
from support.kafka_monitor import (
    crawl,
    drain,
    encode,
    km_settings,
    monitor,
    produce,
    queued,
    read_incoming,
    read_topic,
    state_keys,
)

from crawlhive.kafka_monitor.monitor import KafkaMonitor
from crawlhive.rest.cluster import ClusterView
from crawlhive.utils.backends.kafka_clients import record_origin
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.validation import Accepted
from crawlhive.utils.frontier import (
    FrontierLeaser,
    FrontierReader,
    OptionSet,
    decode_priority,
    seed_from_request,
)
from crawlhive.utils.process.intake import request_validator
from crawlhive.utils.state.control import ControlQueue

if TYPE_CHECKING:
    from conftest import IsolatedNames

# the fixtures imported from support.kafka_monitor: pytest finds them here
__all__ = ["km_settings", "monitor"]


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
                " 'machine', 'queue', 'rest', 'proxies', 'fetch', 'sink', 'all'] (at /stats)",
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
