"""The compose deployment, run for real (docs/contract.md §22.2, §22.3): the images built here, the
cluster of docker/docker-compose.yml (with docker/compose.test.yml: host networking, stand-ins for
Kafka and Redis) crawls a site served on loopback while `crawler` is scaled 1 -> 3 -> 1 and one
crawler container is `docker kill`ed: every page is emitted at least once, the crawl completes, and
`info` agrees. The same on the redis-cluster profile (3 primaries, 3 replicas, REDIS_WAIT_REPLICAS=1).
With the default Redis the monitoring profile runs too: a real Prometheus (Debian's) scrapes REST's
/metrics, loads docker/monitoring/alerts.yml, and has the crawl's response times and domains; and a
page larger than one Kafka message goes through the shared blob store (the volume `blobs`) to the
cleaner and to a sink (profile sink), REST answers the Host header the production Prometheus sends,
and the deployment's hardening holds (Redis refuses a client without the password, the components'
root file systems are read-only without capabilities, blobs are their owner's only).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import redis
import yaml
from support.cluster_crawl import MultiHostSite
from support.crawler import Collector, TestSite
from support.docker import REPO, Deployment, Engine, readme_docker_steps, run
from support.sinks import POSTGRES_URL

from crawlhive.utils.backends.kafka_clients import ensure_topics, make_producer
from crawlhive.utils.config.settings import Settings

pytestmark = pytest.mark.timeout(1200)

HOSTS = [f"127.0.0.{i}" for i in range(1, 7)]
#: Pages per host: the seed links each host's /p/0, which links its /p/1 .. /p/{WIDTH - 1}. Each host
#: is fetched once every 2 s cluster-wide (docker/compose.test.yml) and a page takes PAGE_DELAY_S
#: to serve, so the crawl lasts about a minute: long enough to be scaled and killed in the middle.
WIDTH = 20
PAGE_DELAY_S = 0.5
#: Each case: (compose profiles, extra environment, services to start first, run the README's
#: monitoring step and the large page through the blob store to the cleaner and a sink).
PROFILES: dict[str, tuple[list[str], dict[str, str], list[str], bool]] = {
    "default": ([], {}, [], True),
    "redis-cluster": (
        ["redis-cluster"],
        {"REDIS_WAIT_REPLICAS": "1"},
        [f"redis-node-{i}" for i in range(1, 7)],
        False,
    ),
}
ALERT_RULES = 9  # docker/monitoring/alerts.yml


class ChainSite(MultiHostSite):
    def links(self, host: str, path: str) -> list[str]:
        if path == "/seed":
            return [self.url(h, 0) for h in HOSTS]
        if path == "/p/0":
            return [self.url(host, p) for p in range(1, WIDTH)]
        return []

    def all_pages(self) -> set[str]:
        return {self.url(h, p) for h in HOSTS for p in range(WIDTH)}


@pytest.fixture
def site() -> Iterator[ChainSite]:
    from support import cluster_crawl as clustercrawlkit

    served = ChainSite(delay_s=PAGE_DELAY_S)
    original, clustercrawlkit.HOSTS = clustercrawlkit.HOSTS, HOSTS
    try:
        served.start()
    finally:
        clustercrawlkit.HOSTS = original
    yield served
    served.stop()


def wait_until(what: str, check: Any, timeout: float, deployment: Deployment) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout} s\n{deployment.logs()}")


@pytest.mark.parametrize("profile", list(PROFILES))
def test_scaled_and_killed_crawlers_of_the_compose_deployment_emit_every_page(
    engine: Engine, images: str, site: ChainSite, profile: str
) -> None:
    profiles, extra_env, first, monitoring = PROFILES[profile]
    # README.md's "Run it on Docker" after the images: start, scale to 3, scale to 1, monitoring, down.
    start, scale_up, scale_down, monitor, down = readme_docker_steps()[2:]
    assert "--scale crawler=3" in scale_up and "--scale crawler=1" in scale_down and down.endswith(" down")
    deployment = Deployment(f"chtest{secrets.token_hex(3)}", profiles, extra_env)
    collector = producer = None
    try:
        if first:  # the Redis Cluster's nodes, then its one-off join
            deployment("up", "-d", "--wait", "--wait-timeout", "120", *first)
            deployment("run", "--rm", "redis-cluster-init", timeout=120)
        deployment.readme(start)
        settings = Settings.from_overrides(
            REDIS_URL=deployment.redis_url,
            KAFKA_BOOTSTRAP_SERVERS=[deployment.bootstrap],
            KAFKA_TOPIC_PREFIX=deployment.project,
        )
        topics = [
            settings.topic(t) for t in ("incoming", "crawled_firehose", "outbound_firehose", "cleaned", "dead_letter")
        ]
        ensure_topics(settings, topics)
        collector = Collector(settings, topics[1:])
        producer = make_producer(settings)

        def send(message: dict[str, Any]) -> None:
            producer.send(settings.topic("incoming"), json.dumps(message).encode())
            producer.flush(10)

        def pages() -> set[str]:
            return {m["url"] for m in collector.of("dock", settings.topic("crawled_firehose"))}

        def answer(key: str) -> dict[str, Any] | None:
            found = [
                m
                for m in collector.of("dock", settings.topic("outbound_firehose"))
                if key in (m.get("action"), m.get("uuid"))
            ]
            return found[-1] if found else None

        seed = site.url("127.0.0.1", "/seed")
        send({"url": seed, "appid": "dapp", "crawlid": "dock", "spiderid": "link", "maxdepth": 2})
        wait_until("the first pages", lambda: len(pages()) >= 3, 120, deployment)

        deployment.readme(scale_up)
        assert len(deployment.containers("crawler")) == 3
        wait_until("pages from the scaled crawlers", lambda: len(pages()) >= 3 + len(HOSTS), 120, deployment)
        assert pages() < site.all_pages() | {seed}, "the crawl ended before it was scaled: make the site slower"
        victim = deployment.containers("crawler")[-1]
        run(engine.docker, "kill", victim)
        deployment.readme(scale_down)
        assert len(deployment.containers("crawler")) == 1

        done = wait_until("complete", lambda: answer("complete"), 300, deployment)
        missing = site.all_pages() - pages()
        assert not missing, f"pages never emitted: {sorted(missing)}\n{deployment.logs()}"
        assert done["total_crawled"] >= 1 + len(HOSTS) * WIDTH, done
        send({"action": "info", "appid": "dapp", "crawlid": "dock", "spiderid": "link", "uuid": "dock-info"})
        info = wait_until("the info answer", lambda: answer("dock-info"), 60, deployment)
        assert info["total_pending"] == 0, info
        assert info["total_crawled"] == done["total_crawled"], (info, done)
        if monitoring:
            check_hardening(deployment, engine)
            check_large_page(deployment, settings, collector, send)
            check_rest_host_of_prometheus(deployment)
            deployment.readme(monitor)
            check_prometheus(deployment)
    finally:
        if collector is not None:
            collector.close()
        if producer is not None:
            producer.close()
        deployment.down()


def check_prometheus(deployment: Deployment) -> None:
    """Prometheus of the monitoring profile: REST is a healthy target, every alert rule loaded, and
    the crawl's figures (response-time histogram, per-domain counters, crawlers) are in its store."""
    base = f"http://127.0.0.1:{deployment.ports['CH_PROM_PORT']}/api/v1"

    def get(path: str, **query: str) -> Any:
        url = f"{base}/{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    rules = get("rules")["groups"]
    loaded = [rule for group in rules for rule in group["rules"] if rule["type"] == "alerting"]
    assert len(loaded) == ALERT_RULES and all(rule["health"] != "err" for rule in loaded), rules

    def scraped() -> bool:
        targets = get("targets")["activeTargets"]
        latency = get("query", query='sum(crawlhive_response_seconds_count{spiderid="link"})')["result"]
        return bool(targets) and targets[0]["health"] == "up" and bool(latency) and float(latency[0]["value"][1]) > 0

    wait_until("Prometheus scraping the crawl's figures", scraped, 60, deployment)
    domains = get("query", query='crawlhive_domain_responses_total{outcome="success"}')["result"]
    assert {series["metric"]["domain"] for series in domains} >= set(HOSTS), domains
    crawlers = get("query", query='crawlhive_nodes{component="crawler"}')["result"]
    assert crawlers and float(crawlers[0]["value"][1]) >= 1, crawlers


def _big_page(size: int) -> bytes:
    """An article of about *size* bytes whose paragraphs all differ."""
    head = "<html><head><meta charset='utf-8'><title>The long report</title></head><body><article>"
    paragraphs = [
        f"<p>Paragraph {i} of the long report tells how river number {i} reached the sea after {i % 97} days.</p>\n"
        for i in range(size // 90)
    ]
    return (head + "".join(paragraphs) + "</article></body></html>").encode()


def check_large_page(deployment: Deployment, settings: Settings, collector: Collector, send: Any) -> None:
    """A page of 1.5 MiB (more than one Kafka message) is crawled by a crawler container, cleaned by
    the cleaner container and written whole by a sink container: all three share the blob store
    (docker-compose.yml's volume `blobs`). Its body_ref names the store without secrets."""
    page = _big_page(3 * 512 * 1024)
    digest = hashlib.sha256(page).hexdigest()
    site = TestSite()
    site.start()
    site.page("/big", page)
    table = f"chtier_{secrets.token_hex(4)}"
    deployment.extra_env["CH_SINK_URL"] = f"{POSTGRES_URL}?table={table}"
    crawled, cleaned, dead = (settings.topic(t) for t in ("crawled_firehose", "cleaned", "dead_letter"))
    try:
        deployment("--profile", "sink", "up", "-d", "--no-deps", "sink")
        send({"url": site.url("/big"), "appid": "dapp", "crawlid": "dockbig", "spiderid": "link", "maxdepth": 0})
        [item] = wait_until("the large page", lambda: collector.of("dockbig", crawled), 120, deployment)
        assert item["body"] is None and item["body_ref"]["sha256"] == digest, item.get("body_ref")
        assert item["body_ref"]["url"] == f"file:///var/lib/crawlhive/blobs/{digest}"
        mode = deployment("exec", "-T", "cleaner", "stat", "-c", "%a %U", f"/var/lib/crawlhive/blobs/{digest}")
        assert mode.split() == ["600", "crawlhive"], mode

        def cleaned_or_dead() -> list[dict[str, Any]]:
            return collector.of("dockbig", cleaned) + collector.of("dockbig", dead)

        [record] = wait_until("the large page cleaned", cleaned_or_dead, 180, deployment)
        assert record.get("title") == "The long report", record  # not a dead letter ("no blob")
        assert "Paragraph 1 of the long report tells how river number 1 reached the sea" in record["text"]

        def stored() -> list[Any]:
            try:
                with psycopg.connect(POSTGRES_URL) as conn:
                    return conn.execute(f"SELECT record FROM {table} WHERE url = %s", (site.url("/big"),)).fetchall()
            except psycopg.errors.UndefinedTable:
                return []

        [(row,)] = wait_until("the large page in the sink's table", stored, 120, deployment)
        assert row["body"] == page.decode() and row["body_ref"]["sha256"] == digest
        assert collector.of("dockbig", dead) == []
    finally:
        site.stop()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")


def check_rest_host_of_prometheus(deployment: Deployment) -> None:
    """REST answers the Host header Prometheus sends in the production deployment (its scrape target
    in docker/monitoring/prometheus.yml), and still refuses a name it was not given."""
    config = yaml.safe_load((REPO / "docker" / "monitoring" / "prometheus.yml").read_text())
    [target] = [t for job in config["scrape_configs"] for c in job["static_configs"] for t in c["targets"]]
    metrics = f"http://127.0.0.1:{deployment.ports['CH_REST_PORT']}/metrics"
    with urllib.request.urlopen(urllib.request.Request(metrics, headers={"Host": target}), timeout=10) as answer:
        assert answer.status == 200 and b"crawlhive_" in answer.read()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(metrics, headers={"Host": "rebind.example"}), timeout=10)
    refused.value.close()  # the error holds the answer's open connection
    assert refused.value.code == 400


def check_hardening(deployment: Deployment, engine: Engine) -> None:
    """Redis refuses a client without REDIS_PASSWORD; every crawlhive container runs with a
    read-only root file system, no capabilities and no-new-privileges."""
    anonymous = redis.Redis(host="127.0.0.1", port=deployment.ports["CH_REDIS_PORT"], socket_timeout=5)
    try:
        with pytest.raises(redis.exceptions.AuthenticationError):
            anonymous.ping()
    finally:
        anonymous.connection_pool.disconnect()
        anonymous.close()
    for service in ("kafka-monitor", "redis-monitor", "crawler", "cleaner", "rest"):
        for container in deployment.containers(service):
            inspected = json.loads(run(engine.docker, "inspect", container))[0]["HostConfig"]
            assert inspected["ReadonlyRootfs"] is True, service
            assert inspected["CapDrop"] == ["ALL"] and not inspected.get("CapAdd"), service
            assert "no-new-privileges:true" in inspected["SecurityOpt"], service
