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

from crawlhive.utils.connections import ensure_topics, make_consumer, make_producer
from crawlhive.utils.settings import Settings

CLI = [sys.executable, "-m", "crawlhive.utils.app.cli"]
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
