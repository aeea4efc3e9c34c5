"""Fuzzing the real kafka-monitor: hypothesis-generated records on ``<prefix>.incoming`` (random JSON,
near-valid requests of every kind, huge strings, deep nesting, invalid UTF-8, raw bytes) go to one
running ``crawlhive kafka-monitor`` process. After each batch:

* the process is alive and its loop keeps consuming (the batch is fully accounted for);
* every rejected record is on ``dead_letter`` (stage ``validation``, with its reason);
* every valid crawl request is queued in the frontier, every other valid request is an entry of the
  control stream.

Which records are valid is decided by the cluster's own validator (the one the REST API and
``crawlhive feed`` use), so this checks the monitor's plumbing under hostile input, not the schemas
(tests/unit/test_validation.py does those). Bounded: BATCHES examples of up to 25 records.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from support.chaos import Proc, TopicReader, component_env, wait_until

from crawlhive.utils.backends.kafka_clients import ensure_topics, make_producer
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.validation import Accepted
from crawlhive.utils.process.intake import request_validator

pytestmark = [
    pytest.mark.timeout(240),
    # A socket of a refused connection attempt that kafka-python dropped during the broker-restart
    # chaos test (test_chaos.py) can be finalised while this test runs; only that is ignored.
    pytest.mark.filterwarnings("ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"),
]
BATCHES = int(os.environ.get("CRAWLHIVE_FUZZ_BATCHES", "100"))

# --- strategies ------------------------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
random_json = st.recursive(
    json_scalars, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5)
)
words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=3, max_size=12)
urls = st.one_of(
    st.builds("http://{}.example/{}".format, words, words),
    st.builds("https://{}.example/{}".format, words, words),
    st.sampled_from(["http://127.0.0.1:1/", "https://xn--bcher-kva.example/", "ftp://x/", "", "not a url"]),
    st.text(max_size=40),
)
huge = st.integers(min_value=10_000, max_value=300_000).map(lambda n: "x" * n)
deep = st.integers(min_value=1, max_value=5_000).map(lambda d: "[" * d + "]" * d)


@st.composite
def crawl_like(draw: st.DrawFn) -> dict[str, Any]:
    """A valid crawl request, then perhaps broken: a key dropped, a value replaced, a key added."""
    message: dict[str, Any] = {"url": draw(urls), "appid": draw(words), "crawlid": draw(words)}
    optional = {
        "priority": st.integers(1, 100) | st.integers(-5, 120),
        "maxdepth": st.integers(0, 3) | st.integers(-1, 5),
        "spiderid": words,
        "expires": st.integers(0, 2**40),
        "attrs": random_json.filter(lambda v: isinstance(v, dict)) | st.just({"k": "v"}),
        "useragent": st.text(max_size=20),
        "allowed_domains": st.lists(words, max_size=3, unique=True),
        "headers": st.dictionaries(words, st.text(max_size=20), max_size=3),
        "method": st.sampled_from(["GET", "POST", "get", "BREW"]),
        "body": st.text(max_size=30) | huge,
        "cookies": st.dictionaries(words, words, max_size=2),
        "domain_max_pages": st.integers(0, 2000) | st.integers(-1, 3000),
    }
    for name in draw(st.lists(st.sampled_from(sorted(optional)), max_size=4, unique=True)):
        message[name] = draw(optional[name])
    mutation = draw(st.sampled_from(["none"] * 5 + ["drop", "replace", "extra", "null", "huge", "nest"]))
    if mutation == "drop":
        message.pop(draw(st.sampled_from(sorted(message))))
    elif mutation == "replace":
        message[draw(st.sampled_from(sorted(message)))] = draw(random_json)
    elif mutation == "extra":
        message[draw(words)] = draw(random_json)
    elif mutation == "null":
        message[draw(st.sampled_from(sorted(message)))] = None
    elif mutation == "huge":
        message[draw(st.sampled_from(["url", "appid", "attrs", "crawlid"]))] = draw(huge)
    elif mutation == "nest":
        depth = draw(st.integers(1, 900))
        nested: Any = "leaf"
        for _ in range(depth):
            nested = {"n": nested}
        message["attrs"] = nested
    return message


@st.composite
def other_kinds(draw: st.DrawFn) -> dict[str, Any]:
    """Action, stats and domain-config requests, valid or nearly so."""
    kind = draw(st.sampled_from(["info", "stop", "stats", "domain-update", "blacklist-update", "domain-remove"]))
    base: dict[str, Any] = {"uuid": draw(words), "appid": draw(words)}
    if kind in ("info", "stop"):
        base.update(action=kind, spiderid=draw(words), crawlid=draw(words))
    elif kind == "stats":
        base["stats"] = draw(st.sampled_from(["kafka-monitor", "redis-monitor", "crawler", "queue", "all", "bogus"]))
    else:
        base.update(action=kind, domain=draw(urls))
        if kind == "domain-update":
            base.update(hits=draw(st.integers(-1, 50)), window=draw(st.integers(-1, 100)), scale=draw(st.floats(0, 2)))
    if draw(st.booleans()):
        victim = draw(st.sampled_from(sorted(base)))
        base[victim] = draw(random_json)
    return base


def encoded(value: Any, ensure_ascii: bool) -> bytes:
    return json.dumps(value, ensure_ascii=ensure_ascii).encode("utf-8", "surrogatepass")


records = st.one_of(
    st.builds(encoded, crawl_like(), st.booleans()),
    st.builds(encoded, crawl_like(), st.booleans()),
    st.builds(encoded, other_kinds(), st.booleans()),
    st.builds(encoded, crawl_like(), st.booleans()),
    st.builds(encoded, other_kinds(), st.booleans()),
    st.builds(encoded, random_json, st.booleans()),
    st.binary(max_size=200),  # mostly invalid UTF-8 / not JSON
    st.builds(lambda m: encoded(m, True).replace(b'"url"', b'"\xff\xfeurl"', 1), crawl_like()),  # invalid UTF-8
    deep.map(str.encode),  # nesting deeper than the parser allows
    st.builds(lambda s: json.dumps(s).encode(), huge),  # a huge JSON string, not an object
    st.just(b""),
    st.sampled_from([b"NaN", b'{"url": Infinity}', b'{"a": "\\ud800"}', b"{", b"null", b"[]", b"\x00"]),
)


settings_for_fuzz = hypothesis_settings(
    max_examples=BATCHES,
    deadline=None,
    database=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


# --- the test --------------------------------------------------------------------------------------


class Ledger:
    """What the monitor should have done so far, and where to see what it did."""

    def __init__(self, settings: Settings, client: redis.Redis) -> None:
        self.settings = settings
        self.client = client
        self.keys = keys_from_settings(settings)
        self.validator = request_validator(settings)
        self.rejected = self.crawls = self.controls = 0

    def expect(self, raw: bytes) -> None:
        outcome = self.validator.validate_raw(raw)
        if not isinstance(outcome, Accepted):
            self.rejected += 1
        elif outcome.plugin.kind == "crawl":
            self.crawls += 1
        else:
            self.controls += 1

    def queued(self) -> int:
        prefix = self.settings["REDIS_KEY_PREFIX"]
        found = 0
        for key in self.client.scan_iter(match=f"{prefix}:*", count=1000):
            rest = key.decode()[len(prefix) + 1 :]
            if rest.startswith("{"):  # a frontier shard's hash tag
                rest = rest[rest.index("}:") + 2 :]
            if rest.startswith("cq:"):
                found += int(self.client.zcard(key))
        return found

    def control_entries(self) -> int:
        return int(self.client.xlen(self.keys.control_stream()))


@pytest.fixture
def monitor(settings: Settings, redis_client: redis.Redis, tmp_path: Path) -> Iterator[tuple[Proc, Any, TopicReader]]:
    ensure_topics(settings, [settings.topic("incoming"), settings.topic("dead_letter")])
    proc = Proc("kafka-monitor", ["kafka-monitor"], component_env(settings, HEARTBEAT_INTERVAL=1), tmp_path).start()
    producer = make_producer(settings)
    reader = TopicReader(settings, [settings.topic("dead_letter")])
    keys = keys_from_settings(settings)
    try:
        assert wait_until(lambda: redis_client.zcard(keys.heartbeat_index("kafka-monitor")) >= 1, 30), proc.tail()
        yield proc, producer, reader
    finally:
        producer.close(timeout=5)
        reader.close()
        assert proc.terminate() == 0, proc.tail()


def test_fuzzed_incoming_never_crashes_the_kafka_monitor(
    monitor: tuple[Proc, Any, TopicReader], settings: Settings, redis_client: redis.Redis
) -> None:
    proc, producer, reader = monitor
    ledger = Ledger(settings, redis_client)
    topic = settings.topic("incoming")
    dead_topic = settings.topic("dead_letter")
    sent = [0]

    @settings_for_fuzz
    @given(batch=st.lists(records, min_size=1, max_size=25))
    def one_batch(batch: list[bytes]) -> None:
        for raw in batch:
            ledger.expect(raw)
            producer.send(topic, raw)
        producer.flush(timeout=10)
        sent[0] += len(batch)

        def accounted() -> bool:
            return (
                len(reader.of(dead_topic)) >= ledger.rejected
                and ledger.queued() >= ledger.crawls
                and ledger.control_entries() >= ledger.controls
            )

        assert wait_until(accounted, 30, step=0.05), (
            f"after {sent[0]} records: {len(reader.of(dead_topic))} dead letters of {ledger.rejected}, "
            f"{ledger.queued()} queued of {ledger.crawls}, {ledger.control_entries()} control of "
            f"{ledger.controls}\n{proc.tail()}"
        )
        assert proc.alive(), proc.tail()

    one_batch()
    wait_until(lambda: False, 1.0)  # anything extra (a record handled twice) would show up by now
    letters = reader.of(dead_topic)
    assert len(letters) == ledger.rejected
    assert ledger.queued() == ledger.crawls
    assert ledger.control_entries() == ledger.controls
    for letter in letters:
        assert letter["stage"] == "validation"
        assert letter["error"].startswith(("Unparseable JSON: ", "Invalid request: ")), letter["error"]
    assert proc.alive(), proc.tail()
    assert "Traceback" not in proc.tail(10**7), proc.tail()
    print(f"fuzz: {sent[0]} records, {ledger.rejected} rejected, {ledger.crawls} crawls, {ledger.controls} other")
