"""The components of a crawl on a Redis Cluster as subprocesses, for the cluster crawl tests
(test_cluster_crawl.py, test_cluster_failover.py): kafka-monitor, redis-monitor and crawlers on one
cluster, a producer of requests and a collector of pages and answers; the site they crawl, served on
24 loopback addresses (24 domains, so the frontier's 64 shards spread over every primary)."""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from crawlhive.app.demo_site import SiteServer
from crawlhive.utils.backends.kafka_clients import ensure_topics, make_producer
from crawlhive.utils.config.settings import Settings
from support.crawler import CLI, Collector, Crawler, crawler_env, keys_for, redis_for
from support.redis_cluster import LocalCluster

HOSTS = [f"127.0.0.{i}" for i in range(1, 25)]


class MultiHostSite:
    """The same paths on each of HOSTS (one server each, one port): a page links what
    :meth:`links` says (none by default); every request is recorded in *hits*; *delay_s* per page."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.servers: list[SiteServer] = []
        self.port = 0
        self.hits: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def url(self, host: str, page: int | str) -> str:
        """``/p/<page>`` of *host*, or the path *page* when it is a string."""
        path = f"/p/{page}" if isinstance(page, int) else page
        return f"http://{host}:{self.port}{path}"

    def links(self, host: str, path: str) -> list[str]:
        return []

    def body(self, host: str, path: str) -> bytes:
        anchors = "".join(f'<a href="{u}">x</a>' for u in self.links(host, path))
        return f"<html><head><title>{host}{path}</title></head><body>{anchors}</body></html>".encode()

    def start(self) -> None:
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                host = str(self.server.server_address[0])
                with site.lock:
                    site.hits.append((host, self.path))
                if site.delay_s:
                    time.sleep(site.delay_s)
                if self.path == "/robots.txt":
                    content, kind = b"User-agent: *\n", "text/plain"
                else:
                    content, kind = site.body(host, self.path), "text/html; charset=utf-8"
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

        for host in HOSTS:
            server = SiteServer((host, self.port), Handler)
            self.port = server.server_address[1]
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


class Component:
    """One ``crawlhive <command>`` subprocess, its log in a file."""

    def __init__(self, command: str, env: dict[str, str], log_dir: Path) -> None:
        self.log_path = log_dir / f"{command}-{time.monotonic_ns()}.log"
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen([*CLI, command], env=env, stdout=self.log, stderr=self.log)

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(30)
        finally:
            self.log.close()


class Stack:
    """kafka-monitor, redis-monitor and crawlers on the cluster, a producer of requests and a
    collector of pages and answers."""

    def __init__(self, settings: Settings, home: Path, **overrides: Any) -> None:
        self.settings = settings
        self.home = home
        self.env = crawler_env(
            settings,
            REDIS_MONITOR_TICK_S=0.2,
            REDIS_MONITOR_BLOCK_MS=200,
            REDIS_MONITOR_RETRY_S=0.5,
            **overrides,
        )
        topics = [settings.topic(t) for t in ("incoming", "crawled_firehose", "outbound_firehose", "dead_letter")]
        ensure_topics(settings, topics)
        self.collector = Collector(settings, topics[1:])
        self.producer = make_producer(settings)
        self.components = [Component(c, self.env, home) for c in ("kafka-monitor", "redis-monitor")]
        self.crawlers: list[Crawler] = []
        self.redis = redis_for(settings["REDIS_URL"])

    def crawler(self, name: str = "crawler") -> Crawler:
        crawler = Crawler(self.env, self.home, name=name)
        self.crawlers.append(crawler)
        return crawler

    def send(self, message: dict[str, Any]) -> None:
        self.producer.send(self.settings.topic("incoming"), json.dumps(message).encode())
        self.producer.flush(10)

    def answer(self, crawlid: str, action: str, timeout: float = 30) -> dict[str, Any]:
        """The last answer of *crawlid* whose action (or, for an info answer, uuid) is *action*."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [
                m
                for m in self.collector.of(crawlid, self.settings.topic("outbound_firehose"))
                if action in (m.get("action"), m.get("uuid"))
            ]
            if found:
                return found[-1]
            time.sleep(0.1)
        raise AssertionError(f"no {action!r} answer for {crawlid} in {self.collector.of(crawlid)}: {self.logs()}")

    def pages(self, crawlid: str) -> list[str]:
        return [m["url"] for m in self.collector.of(crawlid, self.settings.topic("crawled_firehose"))]

    def logs(self) -> str:
        return "\n".join(p.output()[-3000:] for p in [*self.components, *self.crawlers])

    def close(self) -> list[int]:
        codes = [c.terminate() for c in self.crawlers] + [c.stop() for c in self.components]
        self.collector.close()
        self.producer.close()
        for key in self.redis.scan_iter(match=f"{self.settings['REDIS_KEY_PREFIX']}*", count=1000):
            self.redis.delete(key)
        self.redis.close()
        return codes


def keys_on_primaries(cluster: LocalCluster, prefix: str) -> dict[int, int]:
    """Keys under *prefix* on each primary, by port."""
    out = {}
    for node in cluster.primary_nodes():
        out[node.port] = sum(1 for _ in node.client().scan_iter(match=f"{prefix}:*", count=1000))
    return out


def frontier_report(client: Any, prefix: str, spider: str, appid: str, crawlid: str) -> str:
    """What the frontier holds of one crawl, shard by shard, for a failure message: queued
    requests per domain, leases (with seconds to their deadline on the Redis clock) and the shard's
    counters; then the crawl record, and whether the crawl is active or finished."""
    keys = keys_for(prefix, client)
    ref = keys.crawl_ref(spider, appid, crawlid)
    lines = []
    for shard in range(keys.shards):
        parts = []
        for render in (False, True):
            domains = client.smembers(keys.crawl_domains(spider, appid, crawlid, render, shard))
            for domain in sorted(m.decode() for m in domains):
                queue = keys.crawl_queue(spider, appid, crawlid, domain, render)
                parts.append(f"queued {domain}{'(render)' if render else ''}: {client.zcard(queue)}")
        leases = keys.leases(spider, shard)
        node = client.get_node_from_key(leases)
        now_s, now_us = client.time(target_nodes=node) if hasattr(client, "get_node_from_key") else client.time()
        now = now_s + now_us / 1e6
        for member in client.smembers(keys.crawl_leases(spider, appid, crawlid, shard)):
            deadline = client.zscore(leases, member)
            due = "no lease" if deadline is None else f"deadline in {deadline - now:.0f}s"
            parts.append(f"lease {member.decode(errors='replace')[:120]}: {due}")
        counters = client.hmget(keys.crawl_shard(spider, appid, crawlid, shard), "inflight", "crawled", "failed")
        if parts or any(int(c or 0) for c in counters[:1]):
            lines.append(f"shard {shard} ({node.name}): inflight/crawled/failed {[int(c or 0) for c in counters]}")
            lines += [f"  {p}" for p in parts]
    fields = client.hgetall(keys.crawl(spider, appid, crawlid)).items()
    record = {k.decode(): v.decode(errors="replace") for k, v in fields if not k.startswith(b"o:")}
    lines.append(f"record: {record}")
    active, finished = client.sismember(keys.active_crawls(), ref), client.zscore(keys.finished_crawls(), ref)
    lines.append(f"active: {active}; finished: {finished}")
    return "\n".join(lines)
