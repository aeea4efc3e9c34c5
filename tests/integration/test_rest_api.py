"""The REST API (docs/contract.md §7) against the real app under uvicorn, a real Redis and a real broker:
health, /feed and /poll, routing errors, /crawls.

A :class:`FakeRedisMonitor` answers requests with a uuid the way the redis-monitor does, so /feed's
wait-for-answer path runs end to end through Kafka. (/metrics, /openapi.json, the dashboard, the API
key, the Host header, unreachable backends and the `crawlhive rest` command: test_rest_api_serving.py.)
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import redis
from support.rest import FakeRedisMonitor, RunningRest, running_rest
from support.rest_api import (
    MAX_BODY,
    WAIT_S,
    _metrics,
    failure,
    http,
    monitor,
    rclient,
    rest,
    rest_settings,
    unique,
)

from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import Frontier, FrontierLeaser, FrontierRequest
from crawlhive.utils.state.heartbeat import Heartbeat, new_node_id

# the fixtures imported from support.rest_api: pytest finds them here
__all__ = ["http", "monitor", "rclient", "rest", "rest_settings"]


# --- GET / ----------------------------------------------------------------------------------------


def test_health_is_green_with_both_backends_and_not_enveloped(http: httpx.Client) -> None:
    for response in (http.get("/"), http.post("/")):
        assert response.status_code == 200
        body = response.json()
        assert set(body) == {"kafka_connected", "redis_connected", "uptime_sec", "my_id", "node_health"}
        assert body["kafka_connected"] is True and body["redis_connected"] is True
        assert body["node_health"] == "GREEN"
        assert len(body["my_id"]) == 12 and int(body["my_id"], 16) >= 0
        assert isinstance(body["uptime_sec"], int)


def test_health_is_yellow_while_a_sink_says_it_fails(http: httpx.Client, rest_settings: Settings) -> None:
    """A sink that cannot write (its store or Kafka gone) publishes why; GET / is then YELLOW, and
    GREEN again once it works (its state published without the error)."""
    from crawlhive.utils.backends.redis_clients import keys_from_settings, redis_from_settings
    from crawlhive.utils.state.sinks import publish, withdraw

    client = redis_from_settings(rest_settings)
    keys = keys_from_settings(rest_settings)
    state = {"sink": "postgresql-0badc0de", "kind": "postgresql", "topic": "t", "group": "g", "lag": None}
    try:
        publish(client, keys, "node1", {**state, "error": "PostgreSQL unreachable; check SINK_URL"}, 60)
        assert http.get("/").json()["node_health"] == "YELLOW"
        publish(client, keys, "node1", state, 60)
        assert http.get("/").json()["node_health"] == "GREEN"
    finally:
        withdraw(client, keys, "node1")
        client.close()


# --- POST /feed -------------------------------------------------------------------------------------


def test_feed_produces_a_valid_crawl_request_as_received(http: httpx.Client, monitor: FakeRedisMonitor) -> None:
    crawlid = unique("c")
    request = {"url": "example.com/page", "appid": "testapp", "crawlid": crawlid}
    response = http.post("/feed", json=request)
    assert response.status_code == 200
    assert response.json() == {"status": "SUCCESS", "data": None, "error": None}
    assert monitor.wait_for(crawlid=crawlid) == request  # no defaults filled in, URL not rewritten


def test_feed_rejects_invalid_requests_with_the_kafka_monitor_cause_and_sends_nothing(
    http: httpx.Client, monitor: FakeRedisMonitor
) -> None:
    crawlid = unique("bad")
    cases = [
        ({"url": "http://example.com/", "appid": "ab", "crawlid": crawlid}, "crawl: 'ab' is too short (at /appid)"),
        (
            {"url": "http://example.com/", "appid": "testapp", "crawlid": crawlid, "priority": 51},
            "crawl: 51 is greater than the maximum of 50 (at /priority)",  # SCHEMA_PRIORITY_MAX applies
        ),
        (
            {"url": "ftp://x/", "appid": "testapp", "crawlid": crawlid},
            "crawl: 'ftp://x/' is not an absolute http(s) URL (at /url)",
        ),
        (
            {"action": "stop", "appid": "testapp", "uuid": "u1", "spiderid": "link"},
            "action: 'crawlid' is a required property",
        ),
        ([1, 2], "request must be a JSON object"),
    ]
    for request, cause in cases:
        response = http.post("/feed", json=request)
        assert response.status_code == 400, request
        assert response.json() == failure("JSON did not validate against schema.", cause)
    time.sleep(0.5)
    assert monitor.find(crawlid=crawlid) == []


def test_feed_needs_json(http: httpx.Client) -> None:
    expected = failure("The payload must be valid JSON.")
    bad_json = http.post("/feed", content=b'{"url": "x" "appid"}', headers={"Content-Type": "application/json"})
    assert (bad_json.status_code, bad_json.json()) == (400, expected)
    text = http.post("/feed", content=b'{"appid": "testapp", "uuid": "x"}', headers={"Content-Type": "text/plain"})
    cause = "send it with the header Content-Type: application/json (got 'text/plain'; other types are refused so"
    assert text.status_code == 400 and text.json()["error"]["cause"].startswith(cause), text.json()
    assert text.json()["error"]["message"] == expected["error"]["message"]  # type: ignore[index]
    bare = http.post("/feed", content=b'{"appid": "testapp", "uuid": "x"}', headers={"Content-Type": ""})
    assert "(got none;" in bare.json()["error"]["cause"]
    nan = http.post("/feed", content=b'{"priority": NaN}', headers={"Content-Type": "application/json"})
    assert (nan.status_code, nan.json()) == (400, expected)
    charset = http.post(
        "/feed",
        content=json.dumps({"url": "http://example.com/", "appid": "testapp", "crawlid": unique("cs")}).encode(),
        headers={"Content-Type": "application/json; charset=utf-8"},
    )
    assert charset.status_code == 200


def test_feed_and_poll_refuse_bodies_over_rest_max_body_bytes(http: httpx.Client) -> None:
    big = {"url": "http://example.com/", "appid": "testapp", "crawlid": "big", "attrs": {"x": "y" * MAX_BODY}}
    for path in ("/feed", "/poll"):
        response = http.post(path, json=big)
        assert (response.status_code, response.json()) == (413, failure("The payload is too large."))

    def chunks() -> Iterator[bytes]:  # no Content-Length: the size is counted while reading
        for _ in range(MAX_BODY // 100 + 2):
            yield b" " * 100

    chunked = http.post("/feed", content=chunks(), headers={"Content-Type": "application/json"})
    assert (chunked.status_code, chunked.json()) == (413, failure("The payload is too large."))


def test_a_large_non_ascii_feed_is_produced_as_utf8_or_refused_with_413_and_health_stays_green(
    rest_settings: Settings, monitor: FakeRedisMonitor
) -> None:
    """A 960 KB body of accents fits KAFKA_PRODUCER_MAX_REQUEST_SIZE (1 MiB) as UTF-8; re-encoded
    with ASCII escapes it was 2.9 MB, the broker refused it, /feed answered 500 "Unable to connect
    to Kafka" and health turned YELLOW. One that does not fit as produced is a 413 naming the limit."""
    roomy = rest_settings.copy_with(REST_MAX_BODY_BYTES=4 * 1024 * 1024)
    with running_rest(roomy) as running, httpx.Client(base_url=running.url, timeout=60) as client:
        crawlid = unique("big")
        fits = {"url": "http://e.com/", "appid": "bigapp", "crawlid": crawlid, "method": "POST", "body": "é" * 480_000}
        raw = json.dumps(fits, ensure_ascii=False).encode()
        assert 950_000 < len(raw) < 1_000_000
        response = client.post("/feed", content=raw, headers={"Content-Type": "application/json"})
        assert (response.status_code, response.json()["status"]) == (200, "SUCCESS"), response.text
        assert monitor.wait_for(crawlid=crawlid)["body"] == fits["body"]

        crawlid = unique("huge")
        over = {**fits, "crawlid": crawlid, "body": "é" * 530_000}  # 1.06 MB as UTF-8
        response = client.post("/feed", json=over)
        assert response.status_code == 413
        error = response.json()["error"]
        assert error["message"] == "The payload is too large."
        assert "KAFKA_PRODUCER_MAX_REQUEST_SIZE=1048576" in error["cause"] and "bytes as produced" in error["cause"]
        health = client.get("/").json()
        assert (health["kafka_connected"], health["node_health"]) == (True, "GREEN")
        time.sleep(0.5)
        assert monitor.find(crawlid=crawlid) == []
        small = {"url": "http://e.com/", "appid": "bigapp", "crawlid": unique("after")}
        assert client.post("/feed", json=small).status_code == 200  # the producer is still fine


def test_feed_with_uuid_returns_the_answer(http: httpx.Client, monitor: FakeRedisMonitor) -> None:
    uuid = unique("s-")
    started = time.monotonic()
    response = http.post("/feed", json={"uuid": uuid, "appid": "testapp", "stats": "queue"})
    assert time.monotonic() - started < WAIT_S  # answered as soon as the answer came, not after the wait
    body = response.json()
    assert response.status_code == 200 and body["status"] == "SUCCESS" and body["error"] is None
    assert body["data"]["uuid"] == uuid and body["data"]["stats"] == "queue"
    assert body["data"]["queues"] == {"total_backlog": 0}
    assert monitor.find(uuid=uuid) == [{"uuid": uuid, "appid": "testapp", "stats": "queue"}]


def test_lone_surrogates_are_not_json_here(http: httpx.Client) -> None:
    """The shared parser refuses unpaired surrogate escapes (no Redis key or UTF-8 record holds them)."""
    for path, body in [("/feed", b'{"uuid": "sur-\\ud800", "appid": "testapp"}'), ("/poll", b'{"poll_id": "\\udfff"}')]:
        response = http.post(path, content=body, headers={"Content-Type": "application/json"})
        assert (response.status_code, response.json()) == (400, failure("The payload must be valid JSON."))


def test_many_concurrent_feeds_each_get_their_own_answer(rest: RunningRest) -> None:
    import concurrent.futures

    uuids = [unique("par-") for _ in range(12)]

    def feed(uuid: str) -> dict[str, object]:
        with httpx.Client(base_url=rest.url, timeout=30) as client:
            return client.post("/feed", json={"uuid": uuid, "appid": "testapp"}).json()  # type: ignore[no-any-return]

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(len(uuids)) as pool:
        answers = list(pool.map(feed, uuids))
    assert time.monotonic() - started < WAIT_S * 2  # the waits overlap: no request blocks another
    assert [a["data"]["uuid"] for a in answers] == uuids  # type: ignore[index]


def test_unanswered_feed_gives_a_poll_id_and_the_late_answer_is_polled_once(
    http: httpx.Client, monitor: FakeRedisMonitor
) -> None:
    uuid = unique("late-")
    started = time.monotonic()
    response = http.post("/feed", json={"uuid": uuid, "appid": "testapp", "stats": "kafka-monitor"})
    assert WAIT_S <= time.monotonic() - started < WAIT_S + 3
    assert response.json() == {"status": "SUCCESS", "data": {"poll_id": uuid}, "error": None}
    answer = {"stats": "kafka-monitor", "appid": "testapp", "uuid": uuid, "server_time": 1, "total": {"lifetime": 3}}
    monitor.send(answer)
    deadline = time.monotonic() + 10
    while (polled := http.post("/poll", json={"poll_id": uuid})).status_code == 404:
        assert time.monotonic() < deadline, "the late answer was never stored for /poll"
        time.sleep(0.1)
    assert polled.status_code == 200
    assert polled.json() == {"status": "SUCCESS", "data": answer, "error": None}
    again = http.post("/poll", json={"poll_id": uuid})
    assert (again.status_code, again.json()) == (404, failure("Could not find matching poll_id"))


def test_poll_validates_its_body(http: httpx.Client, rclient: redis.Redis, rest: RunningRest) -> None:
    schema_error = "JSON did not validate against schema."
    cases = [
        ({"poll_id": "x", "crazykey": 1}, "Additional properties are not allowed ('crazykey' was unexpected)"),
        ({}, "'poll_id' is a required property"),
        ({"poll_id": ""}, "'' should be non-empty (at /poll_id)"),
        ({"poll_id": 5}, "5 is not of type 'string' (at /poll_id)"),
    ]
    for body, cause in cases:
        response = http.post("/poll", json=body)
        assert (response.status_code, response.json()) == (400, failure(schema_error, cause)), body
    bad = http.post("/poll", content=b"{", headers={"Content-Type": "application/json"})
    assert (bad.status_code, bad.json()) == (400, failure("The payload must be valid JSON."))
    rclient.set(rest.service.keys.poll_result("corrupt"), b"{not json")
    corrupt = http.post("/poll", json={"poll_id": "corrupt"})
    assert (corrupt.status_code, corrupt.json()) == (500, failure("Unparseable JSON Received from redis"))


def test_an_answer_consumed_by_one_instance_is_pollable_from_another(
    rest: RunningRest, rest_settings: Settings, monitor: FakeRedisMonitor
) -> None:
    with running_rest(rest_settings) as other, httpx.Client(timeout=30) as client:
        # An answer nobody waits for: both instances store it; whichever is polled first has it.
        orphan = {"stats": "rest", "appid": "testapp", "uuid": unique("orphan-"), "server_time": 1}
        monitor.send(orphan)
        deadline = time.monotonic() + 10
        while (polled := client.post(f"{other.url}/poll", json={"poll_id": orphan["uuid"]})).status_code == 404:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert polled.json()["data"] == orphan
        assert client.post(f"{rest.url}/poll", json={"poll_id": orphan["uuid"]}).status_code == 404  # one-shot

        # An answer /feed delivered on one instance is not stored by the other.
        uuid = unique("deliv-")
        fed = client.post(f"{rest.url}/feed", json={"uuid": uuid, "appid": "testapp"})
        assert fed.json()["data"]["uuid"] == uuid
        time.sleep(1.0)  # both listeners have seen the answer by now
        for instance in (rest, other):
            assert client.post(f"{instance.url}/poll", json={"poll_id": uuid}).status_code == 404


# --- routing and errors -----------------------------------------------------------------------------------


def test_unknown_paths_and_methods_get_the_404_envelope(http: httpx.Client) -> None:
    expected = failure("The desired endpoint does not exist")
    for method, path in [
        ("GET", "/nope"),
        ("GET", "/feed"),
        ("PUT", "/poll"),
        ("POST", "/metrics"),
        ("GET", "/crawls/x"),
    ]:
        response = http.request(method, path)
        assert (response.status_code, response.json()) == (404, expected), (method, path)


# --- /crawls ------------------------------------------------------------------------------------------


def test_get_crawl_reads_the_frontier(http: httpx.Client, rest_settings: Settings, rclient: redis.Redis) -> None:
    crawlid = unique("cr")
    assert http.get(f"/crawls/testapp/{crawlid}").json() == failure("Could not find matching crawl")
    assert http.get(f"/crawls/testapp/{crawlid}").status_code == 404

    frontier = Frontier.from_settings(rclient, rest_settings)
    pipe = rclient.pipeline()
    requests = [
        FrontierRequest(url="http://example.com/a", appid="testapp", crawlid=crawlid, priority=5, request_id="1"),
        FrontierRequest(url="http://example.com/b", appid="testapp", crawlid=crawlid, priority=-9, request_id="2"),
        FrontierRequest(url="http://other.org/", appid="testapp", crawlid=crawlid, request_id="3", expires=1893456000),
    ]
    frontier.push(requests, pipe)
    pipe.execute()
    response = http.get(f"/crawls/testapp/{crawlid}")
    assert response.status_code == 200
    data = response.json()["data"]
    assert len(data.pop("uuid")) == 32 and abs(data.pop("server_time") - time.time()) < 60
    assert data == {
        "appid": "testapp",
        "crawlid": crawlid,
        "spiderid": "link",
        "total_pending": 3,
        "total_domains": 2,
        "domains": {
            "example.com": {"total": 2, "high_priority": 5, "low_priority": -9},
            "other.org": {"total": 1, "high_priority": 1, "low_priority": 1},
        },
        "expires": "1893456000",
        "total_inflight": 0,
        "total_crawled": 0,
        "total_failed": 0,
        "max_pages": rest_settings.CRAWL_MAX_PAGES_DEFAULT,  # every crawl has a budget (§10.7)
        "total_admitted": 0,
    }
    other_spider = http.get(f"/crawls/testapp/{crawlid}", params={"spiderid": "wandering"})
    assert other_spider.status_code == 404


def test_get_crawls_lists_active_then_finished_crawls_with_how_they_ended(
    http: httpx.Client, rest_settings: Settings, rclient: redis.Redis
) -> None:
    """docs/contract.md §17.6: running, waiting, then complete / stopped / expired, most recent first.
    Crawls end through the calls the redis-monitor's complete, stop and expire plugins make."""
    from crawlhive.utils.frontier import FrontierReader

    appid = unique("lst")
    keys = keys_from_settings(rest_settings)
    frontier = Frontier.from_settings(rclient, rest_settings)
    reader = FrontierReader.from_settings(rclient, rest_settings)

    def push(crawlid: str, spiderid: str = "link") -> None:
        pipe = rclient.pipeline()
        request = FrontierRequest(
            url=f"http://{crawlid}.example.com/", appid=appid, crawlid=crawlid, spiderid=spiderid, request_id=crawlid
        )
        frontier.push([request], pipe)
        pipe.execute()

    def finish_all() -> None:
        cursor = None
        while cursor != 0:
            cursor, _ = reader.scan_complete(cursor or 0)

    crawler = Heartbeat(rclient, keys, "crawler", new_node_id(), "worker-1", 60, extra={"spider": "link"})
    crawler.beat()
    try:
        push("done", spiderid="lists")  # a spider type of its own: the pop below gets this request
        worker = FrontierLeaser.from_settings(rclient, rest_settings)
        lease = worker.pop("lists").lease
        assert lease is not None and lease.request.crawlid == "done"
        worker.ack(lease, "crawled")
        finish_all()
        assert reader.purge("lists", appid, "done") == 0  # a stop after it completed: still complete
        time.sleep(1.1)  # distinct end times, so the order is known
        push("stopped")
        reader.purge("link", appid, "stopped", ended_as="stopped")
        finish_all()
        time.sleep(1.1)
        push("expired")
        reader.purge("link", appid, "expired", ended_as="expired")
        finish_all()
        push("running")
        push("waiting", spiderid="nobody-crawls-this")

        crawls = [c for c in http.get("/crawls").json()["data"]["crawls"] if c["appid"] == appid]
        states = [(c["crawlid"], c["state"]) for c in crawls]
        assert set(states[:2]) == {("running", "running"), ("waiting", "waiting")}  # active first
        assert states[2:] == [("expired", "expired"), ("stopped", "stopped"), ("done", "complete")]  # latest first
        by_id = {c["crawlid"]: c for c in crawls}
        assert set(by_id["running"]) == {
            "appid",
            "crawlid",
            "spiderid",
            "state",
            "total_pending",
            "total_inflight",
            "total_crawled",
            "total_failed",
            "started",
            "ended",
            "reason",
            "admission_stopped",
            "fetch",
        }
        assert by_id["running"]["fetch"] is None  # no crawler counted a page of it (§25.7)
        assert by_id["running"]["reason"] is None and by_id["done"]["reason"] is None
        assert by_id["waiting"]["reason"] == (
            "no live crawler serves spider type 'nobody-crawls-this': start one with "
            "`crawlhive crawler --spider nobody-crawls-this`"
        )
        assert by_id["running"]["total_pending"] == 1 and by_id["running"]["ended"] is None
        assert by_id["done"]["total_crawled"] == 1 and by_id["done"]["ended"] >= by_id["done"]["started"] > 0
        assert by_id["done"]["spiderid"] == "lists"
        assert by_id["waiting"]["spiderid"] == "nobody-crawls-this"

        active = [c["crawlid"] for c in http.get("/crawls", params={"state": "active"}).json()["data"]["crawls"]]
        assert {"running", "waiting"} <= set(active) and not {"done", "stopped", "expired"} & set(active)
        finished = http.get("/crawls", params={"state": "finished", "limit": 2}).json()["data"]["crawls"]
        assert [c["crawlid"] for c in finished] == ["expired", "stopped"]
        for bad in ({"limit": 0}, {"limit": 1001}, {"state": "sleeping"}):
            assert http.get("/crawls", params=bad).status_code == 400
        shown = http.get("/dashboard/data").json()["data"]
        assert [c["crawlid"] for c in shown["finished"] if c["appid"] == appid] == ["expired", "stopped", "done"]
        # §11: which spider types live crawlers serve, and which crawls wait for one nobody runs
        spiders = {s["spiderid"]: s for s in shown["spiders"]}
        assert spiders["nobody-crawls-this"]["crawlers"] == 0 and spiders["nobody-crawls-this"]["backlog"] == 1
        assert spiders["link"]["crawlers"] >= 1
        rows = {c["crawlid"]: c["state"] for c in shown["crawls"] if c["appid"] == appid}
        assert rows["waiting"] == "waiting" and rows["running"] == "running"
        assert "none: crawls wait" in http.get("/dashboard").text
        rclient.hset(keys.domain_config(), "slow.example", json.dumps({"hits": 1, "window": 60, "scale": 0.5}))
        rclient.sadd(keys.domain_blacklist(), "banned.example")
        config = http.get("/dashboard/data").json()["data"]["domain_config"]
        assert {"domain": "slow.example", "hits": 1, "window": 60, "scale": 0.5} in config["overrides"]
        assert "banned.example" in config["blacklist"]
        assert (
            "Recently finished crawls" in http.get("/dashboard").text
            and 'id="domain-config"' in http.get("/dashboard").text
        )
        push("done", spiderid="lists")  # resubmitted: active again, no longer finished
        again = {c["crawlid"]: c for c in http.get("/crawls").json()["data"]["crawls"] if c["appid"] == appid}
        assert again["done"]["state"] == "waiting" and again["done"]["ended"] is None  # no crawler of "lists"
    finally:
        crawler.stop()
        rclient.hdel(keys.domain_config(), "slow.example")
        rclient.srem(keys.domain_blacklist(), "banned.example")


def test_crawls_of_a_spider_nobody_runs_say_why_and_cannot_hide_newer_ones(
    rest_settings: Settings, rclient: redis.Redis, monitor: FakeRedisMonitor
) -> None:
    """docs/contract.md §17.6: MAX_CRAWLS crafted crawls for a spider nobody runs hid real ones from
    /crawls, the dashboard and /metrics (the first MAX_CRAWLS refs by name were read); a crawl that
    waits says why; GET and DELETE /crawls/{appid}/{crawlid} find a crawl whatever its spider type."""
    from crawlhive.rest.cluster import MAX_CRAWLS

    settings = rest_settings.copy_with(REDIS_KEY_PREFIX=f"{rest_settings['REDIS_KEY_PREFIX']}many")
    keys = keys_from_settings(settings)
    frontier = Frontier.from_settings(rclient, settings)

    def push(*requests: FrontierRequest) -> None:
        pipe = rclient.pipeline()
        frontier.push(list(requests), pipe)
        pipe.execute()

    crafted = [
        FrontierRequest(url="http://a.example/", appid="aaa", crawlid=f"c{i:04}", spiderid="aaa", request_id=str(i))
        for i in range(MAX_CRAWLS)
    ]
    push(*crafted)
    time.sleep(1.1)  # "started" is in seconds
    push(
        FrontierRequest(url="http://w.example/", appid="zzz", crawlid="real", spiderid="wandering", request_id="w"),
        FrontierRequest(url="http://r.example/", appid="zzz", crawlid="rendered", render=True, request_id="r"),
        FrontierRequest(url="http://p.example/", appid="zzz", crawlid="plain", request_id="p"),
    )
    crawler = Heartbeat(rclient, keys, "crawler", new_node_id(), "worker-1", 60, extra={"spider": "link"})
    crawler.beat()
    try:
        with running_rest(settings) as running, httpx.Client(base_url=running.url, timeout=30) as client:
            listed = client.get("/crawls", params={"state": "active", "limit": 1000}).json()["data"]["crawls"]
            assert len(listed) == MAX_CRAWLS
            newest = {c["crawlid"]: c for c in listed[:3]}
            assert set(newest) == {"real", "rendered", "plain"}  # newest first: the cut drops old ones
            assert (newest["real"]["state"], newest["plain"]["state"]) == ("waiting", "running")
            assert "no live crawler serves spider type 'wandering'" in newest["real"]["reason"]
            assert "`crawlhive crawler --spider link --render`" in newest["rendered"]["reason"]
            assert newest["plain"]["reason"] is None
            assert all(c["appid"] == "aaa" for c in listed[3:])

            shown = {c["crawlid"]: c for c in client.get("/dashboard/data").json()["data"]["crawls"]}
            assert shown["real"]["state"] == "waiting" and "wandering" in shown["real"]["reason"]
            assert shown["plain"]["reason"] is None
            metrics = _metrics(client)
            assert metrics[("crawlhive_active_crawls", (("spiderid", "wandering"),))] == 1

            found = client.get("/crawls/zzz/real")  # no ?spiderid=: found whatever its spider type
            assert found.status_code == 200 and found.json()["data"]["spiderid"] == "wandering"
            assert found.json()["data"]["total_pending"] == 1
            assert client.get("/crawls/zzz/real", params={"spiderid": "link"}).status_code == 404
            assert client.get("/crawls/zzz/rendered").json()["data"]["spiderid"] == "link"
            assert client.get("/crawls/zzz/nothing").status_code == 404
            stopped = client.delete("/crawls/zzz/real")
            assert stopped.status_code == 200 and stopped.json()["data"]["spiderid"] == "wandering"
            assert monitor.wait_for(action="stop", crawlid="real")["spiderid"] == "wandering"
    finally:
        crawler.stop()


def test_crawl_path_parameters_are_checked(http: httpx.Client) -> None:
    cases = [
        ("/crawls/ab/c1", "appid: 'ab' is too short"),
        (f"/crawls/testapp/{'x' * 41}", f"crawlid: '{'x' * 41}' is too long"),
    ]
    for path, cause in cases:
        for method in ("GET", "DELETE"):
            response = http.request(method, path)
            assert (response.status_code, response.json()) == (400, failure("Invalid path parameter.", cause))


def test_delete_crawl_feeds_a_stop_and_returns_its_answer(http: httpx.Client, monitor: FakeRedisMonitor) -> None:
    crawlid = unique("stop")
    response = http.delete(f"/crawls/testapp/{crawlid}", params={"spiderid": "link"})
    assert response.status_code == 200
    data = response.json()["data"]
    assert data["action"] == "stop" and data["crawlid"] == crawlid and data["total_purged"] == 0
    sent = monitor.wait_for(crawlid=crawlid)
    assert sent == {"action": "stop", "appid": "testapp", "crawlid": crawlid, "spiderid": "link", "uuid": data["uuid"]}
