"""The WARC sink (docs/contract.md §20.4): pages a real crawler fetched (gzip-encoded, binary, a
404) archived as WARC/1.1 by ``crawlhive sink --to warc://…``, read back with warcio: every digest
checked, the payload as served, the decoded-away headers kept, the CDXJ index pointing at each
response."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from support.crawler import Crawler, TestSite, crawler_env, redis_for, seed
from support.sinks import log_of, start_sink, wait_until
from warcio.archiveiterator import ArchiveIterator

from crawlhive.sink.store import sink_group
from crawlhive.utils.backends.kafka_clients import consumer_lag, ensure_topics
from crawlhive.utils.config.settings import Settings

pytestmark = pytest.mark.timeout(180)

#: pywb's commands (``make pywb`` installs pywb into .venv-pywb: it cannot share crawlhive's
#: virtualenv, requirements-pywb.txt says why); CRAWLHIVE_TEST_PYWB names another bin folder.
PYWB = Path(os.environ.get("CRAWLHIVE_TEST_PYWB") or Path(__file__).resolve().parents[2] / ".venv-pywb" / "bin")

ARTICLE = "<html><head><title>Zipped</title></head><body><p>" + "Réponse compressée. " * 200 + "</p></body></html>"
IMAGE = bytes(range(256)) * 8


def _sha1_b32(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode()


def test_crawled_pages_become_warc_records_with_digests_and_an_index(settings: Settings, tmp_path: Path) -> None:
    site = TestSite()
    site.start()
    zipped = gzip.compress(ARTICLE.encode())
    site.handler(
        "/w/",
        lambda _s: (200, {"Content-Type": "text/html; charset=utf-8", "Content-Encoding": "gzip"}, zipped),
    )
    site.page("/w/logo.bin", IMAGE, content_type="application/octet-stream")
    site.page("/w/gone", b"<html>gone</html>", status=404)
    ensure_topics(settings, [settings.topic(t) for t in ("crawled_firehose", "dead_letter")])
    client = redis_for(settings["REDIS_URL"])
    env = {"KAFKA_BASE_64_ENCODE": True}
    crawler = Crawler(crawler_env(settings, **env), tmp_path)
    out = tmp_path / "warc"
    url = f"warc://{out}/"
    sink = start_sink(settings, tmp_path, url, SINK_ROLL_SECONDS=1, **env)
    group = sink_group(settings.copy_with(SINK_URL=url), url)
    source = settings.topic("crawled_firehose")
    try:
        crawler.wait_ready(client, settings["REDIS_KEY_PREFIX"], timeout=120)
        for path in ("/w/", "/w/logo.bin", "/w/gone"):
            seed(settings, client, appid="warc", crawlid="w1", url=site.url(path), maxdepth=0)
        wait_until("three pages archived", lambda: _responses(out) >= 3, timeout=90, process=sink)
        wait_until("the group's lag to reach 0", lambda: consumer_lag(settings, source, group) == 0, process=sink)
    finally:
        sink.send_signal(signal.SIGTERM)
        assert crawler.terminate(timeout=60) == 0, crawler.output()
        try:
            assert sink.wait(30) == 0
        except subprocess.TimeoutExpired:
            sink.kill()
            sink.wait()
        client.close()
        site.stop()
    assert "WARNING" not in log_of(sink) and "Traceback" not in log_of(sink), log_of(sink)

    responses, requests = {}, {}
    warcs = sorted(out.rglob("*.warc.gz"))
    # <topic>/<partition>/<topic>-<partition>-<first>-<last>.warc.gz: a name unique in the set
    assert warcs and all(
        re.fullmatch(rf"{re.escape(source)}-{w.parent.name}-\d+-\d+\.warc\.gz", w.name)
        and w.parent.parent.name == source
        for w in warcs
    )
    for warc in warcs:
        stream = io.BytesIO(warc.read_bytes())
        for record in ArchiveIterator(stream, check_digests=True):
            assert record.rec_headers.protocol == "WARC/1.1"
            assert record.digest_checker.passed is not False, record.digest_checker.problems
            target = record.rec_headers.get_header("WARC-Target-URI")
            if record.rec_type == "response":
                payload = record.content_stream().read()
                assert record.rec_headers.get_header("WARC-Payload-Digest") == _sha1_b32(payload)
                assert record.http_headers.get_header("Content-Length") == str(len(payload))
                responses[target] = (record.rec_headers, record.http_headers, payload)
            else:
                assert record.rec_type == "request"
                requests[target] = (record.rec_headers, record.http_headers)
        index = [
            line.split(" ", 2)
            for line in warc.with_name(warc.name.replace(".warc.gz", ".cdxj")).read_text().splitlines()
        ]
        data = warc.read_bytes()
        for key, stamp, fields_json in index:
            fields = json.loads(fields_json)
            assert fields["filename"] == warc.name and len(stamp) == 14 and key.startswith("127.0.0.1:")
            start, length = int(fields["offset"]), int(fields["length"])
            [record] = list(ArchiveIterator(io.BytesIO(data[start : start + length])))
            assert record.rec_type == "response" and record.rec_headers.get_header("WARC-Target-URI") == fields["url"]
            assert record.rec_headers.get_header("WARC-Payload-Digest") == fields["digest"]

    assert set(responses) == {site.url(p) for p in ("/w/", "/w/logo.bin", "/w/gone")} == set(requests)
    warc_headers, http_headers, payload = responses[site.url("/w/")]
    assert payload == ARTICLE.encode()  # decoded, as the item carries it
    assert http_headers.get_statuscode() == "200" and http_headers.protocol == "HTTP/1.1"
    assert http_headers.get_header("Content-Encoding") is None
    assert http_headers.get_header("X-Crawlhive-Original-Content-Encoding") == "gzip"
    assert http_headers.get_header("X-Crawlhive-Original-Content-Length") == str(len(zipped))
    request_warc, request_http = requests[site.url("/w/")]
    assert request_warc.get_header("WARC-Concurrent-To") == warc_headers.get_header("WARC-Record-ID")
    assert request_http.protocol == "GET" and request_http.get_header("User-Agent").startswith("crawlhive/")
    assert responses[site.url("/w/logo.bin")][2] == IMAGE
    assert responses[site.url("/w/gone")][1].get_statuscode() == "404"


def _responses(out: Path) -> int:
    found = 0
    for warc in out.rglob("*.warc.gz"):
        found += sum(1 for r in ArchiveIterator(io.BytesIO(warc.read_bytes())) if r.rec_type == "response")
    return found


def _item(i: int) -> dict[str, object]:
    """A crawled item (§5) of fixed size, with text body."""
    url = f"http://w{i % 3}.example/p/{i:05d}"
    return {
        "appid": "warc",
        "crawlid": "w2",
        "url": url,
        "response_url": url,
        "status_code": 200,
        "status_msg": "OK",
        "response_headers": {"Content-Type": ["text/html; charset=utf-8"]},
        "request_headers": {"User-Agent": ["crawlhive/0.1.0"]},
        "body": f"<html><body>page {i:05d} " + "x" * 400 + "</body></html>",
        "encoding": "utf-8",
        "links": [],
        "attrs": None,
        "timestamp": "2026-11-25T12:00:00.000000",
        "protocol": "HTTP/1.1",
        "original_headers": {},
    }


def test_a_warc_sink_killed_mid_stream_leaves_a_readable_set(settings: Settings, tmp_path: Path) -> None:
    """SIGKILL a WARC sink while it writes, start another: every page is in exactly one response
    record of a complete, readable file whose index points at it."""
    from support.sinks import produce

    source = settings.topic("crawled_firehose")
    ensure_topics(settings, [source, settings.topic("dead_letter")])
    pages = 400
    produce(settings, source, [_item(i) for i in range(pages)])
    size = len(json.dumps(_item(0)).encode())
    out = tmp_path / "warc"
    url = f"warc://{out}/"
    group = sink_group(settings.copy_with(SINK_URL=url), url)
    roll = {"SINK_ROLL_BYTES": 10 * size}
    victim = start_sink(settings, tmp_path, url, SINK_MAX_POLL_RECORDS=5, SINK_ROLL_SECONDS=3600, **roll)
    try:
        wait_until("the first files", lambda: len(list(out.rglob("*.warc.gz"))) >= 5, process=victim)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
    assert _responses(out) < pages, "the sink finished before it was killed: nothing was tested"
    second = start_sink(settings, tmp_path, url, SINK_ROLL_SECONDS=1, **roll)
    try:
        wait_until("every page archived", lambda: _responses(out) >= pages, process=second)
        wait_until("the group's lag to reach 0", lambda: consumer_lag(settings, source, group) == 0, process=second)
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0
    seen: list[str] = []
    for warc in sorted(out.rglob("*.warc.gz")):
        data = warc.read_bytes()
        targets = []
        for record in ArchiveIterator(io.BytesIO(data), check_digests=True):
            assert record.digest_checker.passed is not False, (warc, record.digest_checker.problems)
            if record.rec_type == "response":
                targets.append(record.rec_headers.get_header("WARC-Target-URI"))
        index = warc.with_name(warc.name.replace(".warc.gz", ".cdxj")).read_text().splitlines()
        assert sorted(json.loads(line.split(" ", 2)[2])["url"] for line in index) == sorted(targets)
        seen += targets
    assert sorted(seen) == sorted(str(_item(i)["url"]) for i in range(pages))  # each page once


def test_pywb_replays_the_pages_the_sink_archived(settings: Settings, tmp_path: Path) -> None:
    """docs/operations.md ("WARC"): a pywb collection of the sink's WARC files and CDXJ indexes,
    served by a real ``wayback`` on loopback, replays each page as archived: payload, status line,
    content type (``id_``: the original, not rewritten). The files of every partition go into
    one ``archive/`` folder, which needs their names to be unique in the set."""
    from support.sinks import produce

    wayback, manager = PYWB / "wayback", PYWB / "wb-manager"
    if not wayback.exists():
        pytest.fail(f"pywb is not installed in {PYWB}: run `make pywb` (or set CRAWLHIVE_TEST_PYWB)")
    source = settings.topic("crawled_firehose")
    ensure_topics(settings, [source, settings.topic("dead_letter")])
    gone = {**_item(3), "url": "http://w0.example/gone", "response_url": "http://w0.example/gone"}
    gone |= {"status_code": 404, "status_msg": "Not Found", "body": "<html>no such page</html>"}
    items = [_item(0), _item(1), gone]
    produce(settings, source, items)
    out = tmp_path / "warc"
    sink = start_sink(settings, tmp_path, f"warc://{out}/", SINK_ROLL_SECONDS=1)
    try:
        wait_until("three pages archived", lambda: _responses(out) >= 3, process=sink)
    finally:
        sink.send_signal(signal.SIGTERM)
        assert sink.wait(30) == 0
    root = tmp_path / "pywb"
    root.mkdir()
    subprocess.run([str(manager), "init", "crawl"], cwd=root, check=True, capture_output=True, timeout=60)
    stamps = {}
    for warc in out.rglob("*.warc.gz"):
        shutil.copy(warc, root / "collections" / "crawl" / "archive" / warc.name)
        index = warc.with_name(warc.name.replace(".warc.gz", ".cdxj"))
        shutil.copy(index, root / "collections" / "crawl" / "indexes" / index.name)
        for line in index.read_text().splitlines():
            _key, stamp, fields = line.split(" ", 2)
            stamps[json.loads(fields)["url"]] = stamp
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (tmp_path / "wayback.log").open("w")
    server = subprocess.Popen(
        [str(wayback), "-p", str(port), "-b", "127.0.0.1"], cwd=root, stdout=log, stderr=subprocess.STDOUT
    )

    def replay(url: str) -> tuple[int, str, bytes]:
        address = f"http://127.0.0.1:{port}/crawl/{stamps[url]}id_/{url}"
        try:
            with urllib.request.urlopen(address, timeout=30) as answer:  # noqa: S310 - loopback
                return answer.status, answer.headers.get("Content-Type", ""), answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers.get("Content-Type", ""), error.read()

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "wayback.log").read_text()
                time.sleep(0.2)
        for item in items:
            status, content_type, body = replay(str(item["url"]))
            assert status == item["status_code"], (item["url"], status, body[:300])
            assert content_type == "text/html; charset=utf-8" and body == str(item["body"]).encode()
    finally:
        server.terminate()
        server.wait(30)
        log.close()
