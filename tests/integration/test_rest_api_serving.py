"""The REST API (docs/contract.md §7) against the real app under uvicorn, a real Redis and a real broker:
/metrics, /openapi.json and the dashboard; the API key and the Host header checked before routing;
unreachable backends; the `crawlhive rest` command and the addresses it serves (§10.1).
(Health, /feed, /poll and /crawls: test_rest_api.py.)
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from support.rest import FakeRedisMonitor, RunningRest, running_rest
from support.rest_api import (
    _metrics,
    failure,
    http,
    monitor,
    rclient,
    rest,
    rest_settings,
    unique,
)

from crawlhive.utils.backends.kafka_clients import make_producer
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import Frontier, FrontierLeaser, FrontierRequest
from crawlhive.utils.process.intake import request_validator
from crawlhive.utils.state.heartbeat import Heartbeat, new_node_id
from crawlhive.utils.state.stats import (
    Stats,
    crawler_counter_name,
    failed_counter_name,
    items_counter_name,
    machine_counter_name,
)

# the fixtures imported from support.rest_api: pytest finds them here
__all__ = ["http", "monitor", "rclient", "rest", "rest_settings"]


# --- /metrics -----------------------------------------------------------------------------------------------


def test_metrics_expose_cluster_state_from_redis(
    http: httpx.Client, rest_settings: Settings, rclient: redis.Redis, rest: RunningRest
) -> None:
    spider = "metricspider"  # a spider type of its own: other tests queue "link" work
    keys = keys_from_settings(rest_settings)
    stats = Stats(rclient, keys, rest_settings.getlist("STATS_TIMES"))
    before = _metrics(http)
    stats.incr_many(
        [
            ("kafka-monitor", "total", 7),
            ("kafka-monitor", "fail", 2),
            ("kafka-monitor", "plugin:ScraperHandler", 4),
            ("kafka-monitor", "plugin:StatsHandler", 1),
            ("crawler", crawler_counter_name("link", 200), 5),
            ("crawler", crawler_counter_name("link", 404), 1),
            ("crawler", crawler_counter_name("link", 302), 9),  # not in STATS_RESPONSE_CODES: not exposed
            ("crawler", machine_counter_name("worker-1", 200), 5),  # host names are never labels
            ("crawler", items_counter_name("link"), 6),
            ("crawler", failed_counter_name("link"), 3),
            ("cleaner", "cleaned", 8),
            ("cleaner", "skipped", 2),
            ("cleaner", "dead_letters", 1),
        ]
    )
    crawler = Heartbeat(rclient, keys, "crawler", new_node_id(), "worker-1", 60, extra={"spider": spider})
    crawler.beat()
    crawlid = unique("m")
    pipe = rclient.pipeline()
    Frontier.from_settings(rclient, rest_settings).push(
        [
            FrontierRequest(
                url=f"http://example{i}.com/", appid="metrics", crawlid=crawlid, spiderid=spider, request_id=str(i)
            )
            for i in range(3)
        ],
        pipe,
    )
    pipe.execute()
    worker = FrontierLeaser.from_settings(rclient, rest_settings)
    assert worker.pop(spider).lease is not None

    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    after = _metrics(http)

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert after[("crawlhive_nodes", (("component", "crawler"),))] >= 1
    assert after[("crawlhive_nodes", (("component", "rest"),))] >= 1
    assert delta("crawlhive_queue_backlog", spiderid=spider) == 2
    assert delta("crawlhive_queue_domains", spiderid=spider) == 2
    assert delta("crawlhive_inflight_requests", spiderid=spider) == 1
    assert delta("crawlhive_active_crawls", spiderid=spider) == 1
    assert delta("crawlhive_spider_crawlers", spiderid=spider) == 1
    assert delta("crawlhive_pages_crawled_total", spiderid="link") == 6
    assert delta("crawlhive_responses_total", spiderid="link", code="200") == 5
    assert delta("crawlhive_responses_total", spiderid="link", code="404") == 1
    assert ("crawlhive_responses_total", (("code", "302"), ("spiderid", "link"))) not in after
    assert delta("crawlhive_requests_failed_total", spiderid="link") == 3
    assert delta("crawlhive_incoming_total", kind="crawl") == 4
    assert delta("crawlhive_incoming_total", kind="stats") == 1
    assert delta("crawlhive_incoming_total", kind="invalid") == 2
    assert delta("crawlhive_dead_letter_total", stage="validation") == 2
    assert delta("crawlhive_dead_letter_total", stage="crawl") == 3
    assert delta("crawlhive_dead_letter_total", stage="clean") == 1  # §13
    assert delta("crawlhive_cleaner_records_total", kind="cleaned") == 8
    assert delta("crawlhive_cleaner_records_total", kind="skipped") == 2
    assert ("crawlhive_nodes", (("component", "cleaner"),)) in after
    assert ("crawlhive_cleaner_lag", ()) in after  # the cleaners' consumer lag (§13)
    assert after[("crawlhive_rest_responses_total", (("code", "200"), ("method", "GET")))] >= 1
    labels = {label for (_, pairs) in after for label, _ in pairs}
    allowed = {"component", "spiderid", "code", "kind", "stage", "method", "le", "domain", "outcome", "node", "lane"}
    allowed.add("rung")  # the fetch ladder's families (§25.7)
    assert labels <= allowed
    crawler.stop()


# --- /openapi.json and /dashboard ------------------------------------------------------------------------


def test_openapi_documents_every_endpoint_and_the_incoming_schemas(http: httpx.Client, rest_settings: Settings) -> None:
    doc = http.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    assert {"/", "/feed", "/poll", "/crawls", "/crawls/{appid}/{crawlid}", "/metrics", "/dashboard"} <= set(
        doc["paths"]
    )
    assert set(doc["paths"]["/crawls/{appid}/{crawlid}"]) == {"get", "delete"}
    schemas = doc["components"]["schemas"]
    effective = request_validator(rest_settings).schemas
    by_kind = {plugin.kind: schema for plugin, schema in effective.items()}
    for kind, name in [("crawl", "CrawlRequest"), ("action", "ActionRequest"), ("stats", "StatsRequest")]:
        assert schemas[name]["properties"] == by_kind[kind]["properties"]
    assert schemas["DomainConfigRequest"]["required"] == by_kind["domain-config"]["required"]
    assert schemas["CrawlRequest"]["properties"]["priority"]["maximum"] == 50  # the effective limit
    crawl = schemas["CrawlRequest"]["properties"]  # §10.3 limits, the same as the kafka-monitor's
    assert crawl["url"]["maxLength"] == 8192 and crawl["allow_regex"]["maxItems"] == 100
    assert crawl["attrs"]["maxJsonBytes"] == 65536 and crawl["method"]["enum"] == ["GET", "HEAD", "POST"]
    assert schemas["DomainConfigRequest"]["properties"]["window"]["maximum"] == 604800
    feed_body = doc["paths"]["/feed"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert len(feed_body["anyOf"]) == 4


def test_dashboard_is_one_self_contained_page(http: httpx.Client) -> None:
    page = http.get("/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    # no other site may frame it (docs/contract.md §10.1)
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    html = page.text
    assert "<script" in html and "src=" not in html and "<link" not in html and "@import" not in html
    assert "http://" not in html and "https://" not in html
    data = http.get("/dashboard/data").json()
    assert data["status"] == "SUCCESS"
    assert {"nodes", "crawls", "spiders", "domains", "dead_letters", "totals", "finished", "domain_config"} <= set(
        data["data"]
    )


def test_dashboard_lists_recent_dead_letters_without_their_payload(
    http: httpx.Client, rest_settings: Settings, rest: RunningRest
) -> None:
    secret = {"url": "http://e.com/", "headers": {"Authorization": "Bearer s3cret-token"}}
    letter = {"stage": "validation", "error": "Invalid request: x", "payload": secret, "appid": "dlapp"}
    producer = make_producer(rest_settings)
    try:
        producer.send(rest_settings.topic("dead_letter"), json.dumps(letter).encode()).get(timeout=10)
    finally:
        producer.close(timeout=2)
    deadline = time.monotonic() + 10
    while not (
        shown := [d for d in http.get("/dashboard/data").json()["data"]["dead_letters"] if d.get("appid") == "dlapp"]
    ):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert shown[0]["error"] == "Invalid request: x" and shown[0]["stage"] == "validation"
    assert "payload" not in shown[0]  # what a stranger sent is never shown (docs/contract.md §10.1)
    assert "s3cret-token" not in http.get("/dashboard/data").text


# --- API key and unreachable backends ---------------------------------------------------------------------


def test_api_key_is_checked_before_routing(rest_settings: Settings, monitor: FakeRedisMonitor) -> None:
    keyed = rest_settings.copy_with(REST_API_KEY="s3cret")
    missing = failure("Missing or invalid API key")
    with running_rest(keyed) as running, httpx.Client(base_url=running.url, timeout=30) as client:
        assert client.get("/").status_code == 200
        assert client.get("/metrics").status_code == 200
        for method, path in [("POST", "/feed"), ("GET", "/nope"), ("GET", "/openapi.json"), ("GET", "/dashboard")]:
            for headers in ({}, {"X-Api-Key": "wrong"}):
                response = client.request(method, path, headers=headers)
                assert (response.status_code, response.json()) == (401, missing), (method, path, headers)
        ok = {"X-Api-Key": "s3cret"}
        assert client.get("/nope", headers=ok).status_code == 404
        assert client.get("/openapi.json", headers=ok).status_code == 200
        fed = client.post("/feed", json={"url": "http://e.com/", "appid": "keyapp", "crawlid": "k1"}, headers=ok)
        assert fed.status_code == 200
        assert client.get("/dashboard", params={"api_key": "s3cret"}).status_code == 200
        assert client.get("/dashboard/data", params={"api_key": "s3cret"}).status_code == 401  # header only
        assert client.get("/dashboard/data", headers=ok).status_code == 200


def test_a_host_header_naming_another_site_is_refused_before_anything_else(
    http: httpx.Client, rest: RunningRest, rest_settings: Settings, monitor: FakeRedisMonitor
) -> None:
    """DNS rebinding (docs/contract.md §10.1): a page of rebind.attacker.example whose name now
    resolves to 127.0.0.1 reaches a keyless loopback REST with its own name as ``Host``."""
    port = rest.url.rsplit(":", 1)[1]
    crawlid = unique("rebind")
    request = {"url": "http://e.com/", "appid": "rebindapp", "crawlid": crawlid}
    for host in ("rebind.attacker.example", f"rebind.attacker.example:{port}", "localhost.attacker.example", "[::2]"):
        for method, path in (("POST", "/feed"), ("GET", "/"), ("GET", "/crawls"), ("GET", "/dashboard")):
            response = http.request(method, path, json=request, headers={"Host": host})
            assert response.status_code == 400, (host, method, path)
            body = response.json()
            assert body["error"]["message"] == "Invalid host header"
            assert "REST_ALLOWED_HOSTS" in body["error"]["cause"] and host in body["error"]["cause"]
    huge = "a" * 5000 + ".example"
    refused = http.get("/", headers={"Host": huge})
    assert refused.status_code == 400 and huge not in refused.text  # cut short, never quoted whole
    for host in ("localhost", f"localhost:{port}", "LOCALHOST", f"127.0.0.1:{port}", f"[::1]:{port}", "[::1]"):
        assert http.get("/", headers={"Host": host}).status_code == 200, host
    assert http.post("/feed", json=request, headers={"Host": f"localhost:{port}"}).status_code == 200
    time.sleep(0.5)
    assert len(monitor.find(crawlid=crawlid)) == 1  # only the allowed one was produced

    named = rest_settings.copy_with(REST_ALLOWED_HOSTS=["crawl.example.org", "*.corp.example"], REST_API_KEY="k3y")
    with (
        running_rest(named, wait_for_kafka=False, host="127.0.0.2") as running,
        httpx.Client(base_url=running.url, timeout=30) as client,
    ):
        key = {"X-Api-Key": "k3y"}
        for host in ("crawl.example.org", "crawl.example.org:443", "a.corp.example", "127.0.0.2", "localhost"):
            assert client.get("/crawls", headers={"Host": host, **key}).status_code == 200, host
        for host in ("rebind.attacker.example", "corp.example.evil", "127.0.0.1.nip.io"):
            response = client.get("/crawls", headers={"Host": host})  # 400 before the key is asked for
            assert response.status_code == 400 and "REST_ALLOWED_HOSTS" in response.text, host
    anyone = rest_settings.copy_with(REST_ALLOWED_HOSTS=["*"])
    with (
        running_rest(anyone, wait_for_kafka=False) as running,
        httpx.Client(base_url=running.url, timeout=30) as client,
    ):
        assert client.get("/", headers={"Host": "rebind.attacker.example"}).status_code == 200


def test_unreachable_backends_give_500_and_red_health(redis_settings: Settings, tmp_path: Path) -> None:
    from crawlhive.app.embedded import free_port

    dead = redis_settings.copy_with(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")  # Kafka is dead there too
    with running_rest(dead, wait_for_kafka=False) as running, httpx.Client(base_url=running.url, timeout=30) as client:
        health = client.get("/").json()
        assert (health["kafka_connected"], health["redis_connected"], health["node_health"]) == (False, False, "RED")
        fed = client.post("/feed", json={"url": "http://e.com/", "appid": "deadapp", "crawlid": "d1"})
        assert (fed.status_code, fed.json()) == (500, failure("Unable to connect to Kafka"))
        for response in (
            client.post("/poll", json={"poll_id": "x"}),
            client.get("/crawls/deadapp/d1"),
            client.get("/metrics"),
        ):
            assert (response.status_code, response.json()) == (500, failure("Unable to connect to Redis"))


def test_crawlhive_rest_serves_until_sigterm(redis_settings: Settings) -> None:
    import os
    import signal
    import subprocess
    import sys

    from crawlhive.app.embedded import free_port
    from crawlhive.utils.config.settings import settings_env

    port = free_port()
    env = {**os.environ, **settings_env(redis_settings)}
    command = [sys.executable, "-m", "crawlhive.app.cli", "rest", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/", timeout=2).json()
                break
            except httpx.TransportError:
                assert process.poll() is None and time.monotonic() < deadline, "crawlhive rest did not start"
                time.sleep(0.1)
        assert health["redis_connected"] is True and health["node_health"] == "YELLOW"  # Kafka is dead here
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()


# --- exposure (docs/contract.md §10.1) ---------------------------------------------------------------------


def _rest_command(settings: Settings, *args: str, **env: str) -> tuple[list[str], dict[str, str]]:
    import os
    import sys

    from crawlhive.utils.config.settings import settings_env

    base = {k: v for k, v in os.environ.items() if not k.startswith("REST_")}
    return [sys.executable, "-m", "crawlhive.app.cli", "rest", *args], {**base, **settings_env(settings), **env}


def _serving(process: Any, url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.TransportError:
            assert process.poll() is None and time.monotonic() < deadline, "crawlhive rest did not start"
            time.sleep(0.1)


def _stop(process: Any) -> str:
    import signal
    import subprocess

    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return str(process.communicate()[0])


def test_rest_refuses_a_public_address_without_a_key(redis_settings: Settings) -> None:
    import subprocess

    from crawlhive.app.embedded import free_port

    port = free_port()
    command, env = _rest_command(redis_settings, "--host", "0.0.0.0", "--port", str(port))
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "REST_API_KEY" in done.stderr and "REST_INSECURE" in done.stderr
    with pytest.raises(httpx.TransportError):  # nothing was bound
        httpx.get(f"http://127.0.0.1:{port}/", timeout=2)


def test_rest_serves_a_public_address_with_a_key_or_when_told_it_is_insecure(redis_settings: Settings) -> None:
    import subprocess

    from crawlhive.app.embedded import free_port

    for extra, warned in (({"REST_API_KEY": "k3y"}, False), ({"REST_INSECURE": "true"}, True)):
        port = free_port("0.0.0.0")
        command, env = _rest_command(redis_settings, "--host", "0.0.0.0", "--port", str(port), **extra)
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            _serving(process, f"http://127.0.0.1:{port}/")
        finally:
            output = _stop(process)
        assert f"REST service on http://0.0.0.0:{port}" in output, output
        assert ("REST_INSECURE=true" in output and "WARNING" in output) is warned, output


def test_rest_listens_on_loopback_by_default_and_prints_the_port_it_bound(redis_settings: Settings) -> None:
    import re
    import subprocess

    command, env = _rest_command(redis_settings, "--port", "0")
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 30
        line = ""
        while "REST service on" not in line:
            assert process.poll() is None and time.monotonic() < deadline, "no address printed"
            line = process.stdout.readline()
        match = re.search(r"REST service on http://127\.0\.0\.1:(\d+) ", line)
        assert match and match.group(1) != "0", line
        assert httpx.get(f"http://127.0.0.1:{match.group(1)}/", timeout=5).status_code == 200
    finally:
        _stop(process)
