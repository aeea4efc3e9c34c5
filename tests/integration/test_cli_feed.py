"""`crawlhive feed --wait`: the answer to the request's uuid, read from the outbound topic.

The redis-monitor that answers does not exist yet, so each test plays its part: it waits until the
request is on ``<prefix>.incoming``, then produces the answer to ``<prefix>.outbound_firehose``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from crawlhive.utils.backends.kafka_clients import ensure_topics, make_consumer, make_producer
from crawlhive.utils.config.settings import Settings

CLI = [sys.executable, "-m", "crawlhive.app.cli"]
REQUEST = {"action": "info", "appid": "testapp", "spiderid": "link", "uuid": "w-1"}


def _env(settings: Settings, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_HOSTS", "REDIS_URL")}
    env.update(
        KAFKA_BOOTSTRAP_SERVERS=",".join(settings["KAFKA_BOOTSTRAP_SERVERS"]),
        KAFKA_TOPIC_PREFIX=settings["KAFKA_TOPIC_PREFIX"],
        CRAWLHIVE_HOME=str(home),
    )
    return env


def _send(settings: Settings, short: str, *messages: dict[str, Any]) -> None:
    producer = make_producer(settings)
    try:
        for message in messages:
            producer.send(settings.topic(short), json.dumps(message).encode())
        producer.flush(timeout=10)
    finally:
        producer.close(timeout=5)


def _wait_for_request(settings: Settings, timeout_s: float = 30.0) -> dict[str, Any]:
    consumer = make_consumer(settings, settings.topic("incoming"), group_id=None)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                for record in records:
                    return dict(json.loads(record.value))
    finally:
        consumer.close()
    raise AssertionError("the request never reached the incoming topic")


def test_feed_wait_prints_the_answer_sent_after_the_request_only(settings: Settings, tmp_path: Path) -> None:
    ensure_topics(settings, [settings.topic("incoming"), settings.topic("outbound_firehose")])
    _send(settings, "outbound_firehose", {**REQUEST, "stale": True})  # an older answer: must be skipped
    feed = subprocess.Popen(
        [*CLI, "feed", json.dumps(REQUEST), "--wait", "30"],
        env=_env(settings, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _wait_for_request(settings) == REQUEST
        answer = {"uuid": "w-1", "appid": "testapp", "spiderid": "link", "total_pending": 0, "server_time": 1}
        _send(settings, "outbound_firehose", {"uuid": "someone-else", "appid": "testapp"}, answer)
        out, err = feed.communicate(timeout=30)
    finally:
        if feed.poll() is None:
            feed.kill()
            feed.communicate()
    assert feed.returncode == 0, err
    assert json.loads(out) == answer
    assert f"sent to {settings.topic('incoming')}" in err


def test_feed_wait_exits_3_without_an_answer(settings: Settings, tmp_path: Path) -> None:
    request = {**REQUEST, "uuid": "nobody-answers"}
    out = subprocess.run(
        [*CLI, "feed", json.dumps(request), "--wait", "1"],
        env=_env(settings, tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 3, out.stderr
    assert out.stdout == ""
    assert f"no answer to uuid 'nobody-answers' on {settings.topic('outbound_firehose')} within 1s" in out.stderr


def test_feed_wait_without_uuid_just_sends(settings: Settings, tmp_path: Path) -> None:
    crawl = {"url": "http://example.com/", "appid": "testapp", "crawlid": "c1"}
    out = subprocess.run(
        [*CLI, "feed", json.dumps(crawl), "--wait", "5"],
        env=_env(settings, tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "--wait ignored: the request has no uuid" in out.stderr


def _incoming(settings: Settings, count: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    consumer = make_consumer(settings, settings.topic("incoming"), group_id=None)
    found: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(found) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                found += [json.loads(record.value) for record in records]
        time.sleep(0.5)
        for records in consumer.poll(timeout_ms=500).values():  # nothing more than expected
            found += [json.loads(record.value) for record in records]
    finally:
        consumer.close()
    return found


def test_feed_file_sends_valid_lines_lists_rejected_ones_and_exits_1(settings: Settings, tmp_path: Path) -> None:
    """docs/contract.md §14: one crawl request per line, URL or JSON; rejected lines listed with
    their number and reason; exit 1 when any was rejected, the others sent."""
    ensure_topics(settings, [settings.topic("incoming")])
    lines = [
        "http://a.example/1",
        "",
        "# a comment",
        "http://a.example/2",
        '{"url": "http://b.example/", "crawlid": "own", "priority": 5}',
        "ftp://a.example/3",
        '{"url": "http://b.example/broken"',
        '{"action": "info", "appid": "bulk", "uuid": "u1", "spiderid": "link"}',
        "a.example/4",
    ]
    path = tmp_path / "urls.txt"
    path.write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        [*CLI, "feed", "--file", str(path), "--appid", "bulk", "--crawlid", "b1", "--set-field", "maxdepth=1"],
        env=_env(settings, tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert "line 6: Invalid request: crawl: 'ftp://a.example/3' is not an absolute http(s) URL" in done.stderr
    assert "line 7: Invalid request: not JSON" in done.stderr
    assert "line 8: Invalid request: " in done.stderr  # an info request (with crawl fields added)
    assert f"feed: 4 crawl requests sent to {settings.topic('incoming')}; 3 lines rejected" in done.stderr
    sent = _incoming(settings, 4)
    assert sorted((m["url"], m["crawlid"], m["maxdepth"]) for m in sent) == [
        ("a.example/4", "b1", 1),  # sent as given; the kafka-monitor adds the scheme as it does for feed
        ("http://a.example/1", "b1", 1),
        ("http://a.example/2", "b1", 1),
        ("http://b.example/", "own", 1),
    ]
    assert {m["appid"] for m in sent} == {"bulk"}


def test_feed_file_exit_codes(settings: Settings, tmp_path: Path) -> None:
    ensure_topics(settings, [settings.topic("incoming")])
    path = tmp_path / "ok.txt"
    path.write_text("".join(f"http://c.example/{i}\n" for i in range(2000)))
    env = _env(settings, tmp_path)
    ok = subprocess.run(
        [*CLI, "feed", "--file", str(path), "--appid", "bulk", "--crawlid", "b2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert "feed: 2,000 crawl requests sent" in ok.stderr and "Traceback" not in ok.stderr
    assert len([m for m in _incoming(settings, 2000) if m["crawlid"] == "b2"]) == 2000
    no_ids = subprocess.run([*CLI, "feed", "--file", str(path)], env=env, capture_output=True, text=True, timeout=60)
    assert no_ids.returncode == 1 and "--appid and --crawlid are required" in no_ids.stderr
    missing = subprocess.run(
        [*CLI, "feed", "--file", str(tmp_path / "nope.txt"), "--appid", "bulk", "--crawlid", "b3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1 and "--file: cannot read" in missing.stderr and "Traceback" not in missing.stderr
    no_broker = subprocess.run(
        [*CLI, "feed", "--file", str(path), "--appid", "bulk", "--crawlid", "b4"],
        env={**env, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert no_broker.returncode == 2 and "KAFKA_BOOTSTRAP_SERVERS" in no_broker.stderr, no_broker.stderr


def test_feed_file_refuses_costly_and_forging_requests_at_once_with_short_reasons(
    settings: Settings, tmp_path: Path
) -> None:
    """The 200-pattern request (67 s of RE2 compiling before), a seed with an 8,000-character host, a
    crawlid with a newline and a secret header ending in one: each refused by the validator `feed` shares
    with the kafka-monitor, with a short reason on one line, the secret never shown."""
    ensure_topics(settings, [settings.topic("incoming")])
    patterns = {"allow_regex": [rf"\pL{{1,446}}a{i}" for i in range(100)]}
    patterns["deny_regex"] = [rf"\pL{{1,446}}d{i}" for i in range(100)]
    lines = [
        json.dumps({"url": "http://a.example/", **patterns}),
        json.dumps({"url": "http://" + "é" * 8000 + ".com/"}),
        json.dumps({"url": "http://a.example/", "crawlid": "c\n2026-11-26 ERROR forged"}),
        json.dumps({"url": "http://a.example/", "headers": {"Authorization": "Bearer s3cr3t\n"}}),
        "http://a.example/ok",
    ]
    path = tmp_path / "hostile.txt"
    path.write_text("\n".join(lines) + "\n")
    started = time.monotonic()
    done = subprocess.run(
        [*CLI, "feed", "--file", str(path), "--appid", "bulk", "--crawlid", "h1"],
        env=_env(settings, tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert time.monotonic() - started < 30, done.stderr  # start-up included; the checks take milliseconds
    assert done.returncode == 1, done.stderr
    err = done.stderr
    assert "line 1: Invalid request: crawl: pattern too complex: repetition '{1,446}' over SCHEMA_REGEX_MAX" in err
    assert "line 2: Invalid request: crawl: host name longer than 253 characters (8004) (at /url)" in err
    assert "line 3: Invalid request: crawl: 'c\\n2026-11-26 ERROR forged' does not match" in err
    assert "line 4: Invalid request: crawl: value does not match" in err
    assert "s3cr3t" not in err and "é" * 41 not in err and "\nforged" not in err and len(err) < 5000
    assert [m["url"] for m in _incoming(settings, 1)] == ["http://a.example/ok"]
