"""Support for the crawler's end-to-end tests: a test web site, crawler subprocesses, seeds, and a
collector of what the crawlers write to Kafka.

The site (:class:`TestSite`) is a threaded ``http.server`` on two loopback addresses (127.0.0.1 and
127.0.0.2, so two domains) that records every request it gets. Pages are registered per test under
a unique path prefix.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import secrets
import subprocess
import sys
import threading
import time
import urllib.parse
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from crawlhive.app.demo_site import SiteServer
from crawlhive.utils.backends.kafka_clients import ensure_topics, make_consumer
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import CLUSTER_SHARDS, is_cluster, redis_from_settings, write_pipeline
from crawlhive.utils.config.settings import Settings, env_value
from crawlhive.utils.frontier import Frontier, FrontierLeaser, reclaim_expired_leases, seed_from_request

CLI = [sys.executable, "-m", "crawlhive.app.cli"]

#: Defaults the kafka-monitor fills into a crawl request (docs/contract.md §2.1 step 5).
CRAWL_DEFAULTS: dict[str, Any] = {
    "spiderid": "link",
    "priority": 1,
    "maxdepth": 0,
    "domain_max_pages": None,
    "max_pages": None,
    "allowed_domains": None,
    "allow_regex": None,
    "deny_regex": None,
    "deny_extensions": None,
    "expires": 0,
    "useragent": None,
    "cookie": None,
    "attrs": None,
    "method": "GET",
    "headers": None,
    "body": None,
    "cookies": None,
}


#: FRONTIER_SHARDS of the components the tests start (the environment's, as they inherit it).
TEST_FRONTIER_SHARDS = int(
    os.environ.get("FRONTIER_SHARDS") or (64 if os.environ.get("CRAWLHIVE_TEST_REDIS") == "cluster" else 0)
)


def redis_for(url: str) -> redis.Redis:
    """A bytes client for the REDIS_URL *url*, as the components build theirs: a cluster client
    on a Redis Cluster (``CRAWLHIVE_TEST_REDIS=cluster``)."""
    return redis_from_settings(Settings.from_overrides(REDIS_URL=url))


def keys_for(prefix: str, client: redis.Redis | None = None) -> Keys:
    """The keys the components the tests start use: FRONTIER_SHARDS comes from the environment
    (``make test``'s second pass runs with 4 shards); automatic, it is 64 when *client* is a
    Redis Cluster client."""
    shards = TEST_FRONTIER_SHARDS or (CLUSTER_SHARDS if client is not None and is_cluster(client) else 1)
    return Keys(prefix, shards)


@dataclass
class Seen:
    """One request the site received."""

    host: str
    path: str
    method: str
    headers: dict[str, str]
    body: bytes
    at: float


Handler = Callable[["Seen"], tuple[int, dict[str, str], bytes]]


def html(*links: str, title: str = "page", extra: str = "") -> bytes:
    """A small HTML page linking to *links* (anchor text = the link)."""
    anchors = "".join(f'<a href="{u}">{u}</a>\n' for u in links)
    return f"<html><head><title>{title}</title></head><body>{anchors}{extra}</body></html>".encode()


@dataclass
class TestSite:
    """Pages by path (same on both hosts); every request is recorded."""

    port: int = 0
    pages: dict[str, Handler] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    servers: list[SiteServer] = field(default_factory=list)

    __test__ = False  # not a pytest class

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def page(self, path: str, body: bytes, status: int = 200, content_type: str = "text/html; charset=utf-8") -> None:
        self.pages[path] = lambda _seen: (status, {"Content-Type": content_type}, body)

    def handler(self, path: str, func: Handler) -> None:
        self.pages[path] = func

    def hits(self, prefix: str) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.path.startswith(prefix)]

    def start(self) -> None:
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                host = self.server.server_address[0]
                path = urllib.parse.urlsplit(self.path).path
                seen = Seen(str(host), self.path, self.command, dict(self.headers.items()), body, time.time())
                with site.lock:
                    site.seen.append(seen)
                func = site.pages.get(path) or site.pages.get(self.path)
                if func is None:
                    status, headers, content = 404, {"Content-Type": "text/html"}, b"<html>not found</html>"
                else:
                    status, headers, content = func(seen)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(content)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve

        first = SiteServer(("127.0.0.1", self.port), Handler)
        self.port = first.server_address[1]
        second = SiteServer(("127.0.0.2", self.port), Handler)
        for server in (first, second):
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)
        self.page("/robots.txt", b"User-agent: *\nDisallow: /private/\n", content_type="text/plain")

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


def descendants(pid: int) -> list[int]:
    """Every process below *pid* (one read of ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def process_env(settings: Settings, **values: Any) -> dict[str, str]:
    """Environment of a crawlhive subprocess: this one's, with *settings*' addresses and prefixes
    (Redis, Kafka, CRAWLHIVE_HOME) and *values* (settings) in place of the ones inherited."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS", "KAFKA_HOSTS")}
    values = {
        "REDIS_URL": settings.REDIS_URL,
        "KAFKA_BOOTSTRAP_SERVERS": ",".join(settings.KAFKA_BOOTSTRAP_SERVERS),
        "REDIS_KEY_PREFIX": settings.REDIS_KEY_PREFIX,
        "KAFKA_TOPIC_PREFIX": settings.KAFKA_TOPIC_PREFIX,
        "CRAWLHIVE_HOME": settings.CRAWLHIVE_HOME,
        **values,
    }
    env.update({name: env_value(value) for name, value in values.items()})
    return env


def crawler_env(settings: Settings, **overrides: Any) -> dict[str, str]:
    """Environment for a crawler subprocess with *settings* (Redis, Kafka, prefixes) and *overrides*,
    over quick test values (no throttle, short time-outs and back-offs, loopback allowed)."""
    values: dict[str, Any] = {
        "QUEUE_HITS": 100000,
        "QUEUE_WINDOW": 1,
        "QUEUE_MODERATED": False,
        "DOWNLOAD_TIMEOUT": 3,
        "RETRY_TIMES": 2,
        "RETRY_BACKOFF_BASE": 0.2,  # retries wait out a short back-off (§14); its own test sets more
        "LEASE_TIMEOUT": 10,
        "HEARTBEAT_INTERVAL": 1,
        "CRAWLER_ALLOWED_NETWORKS": ["127.0.0.0/8"],  # the test sites are on loopback (§10.2)
        "LOG_LEVEL": "INFO",
    }
    return process_env(settings, **{**values, **overrides})


class Crawler:
    """One ``crawlhive crawler`` subprocess; its log goes to a file under *log_dir*."""

    def __init__(
        self,
        env: dict[str, str],
        log_dir: Path,
        spider: str = "link",
        name: str = "crawler",
        extra_args: list[str] | None = None,
    ) -> None:
        self.log_path = log_dir / f"{name}-{time.monotonic_ns()}.log"
        self.log = self.log_path.open("w")
        command = [*CLI, "crawler", "--spider", spider, *(extra_args or [])]
        self.proc = subprocess.Popen(command, env=env, stdout=self.log, stderr=self.log)

    def wait_ready(
        self, redis_client: redis.Redis, prefix: str, count: int = 1, timeout: float = 30, keys: Keys | None = None
    ) -> None:
        """Wait until *count* crawler heartbeats exist (the crawler is polling the frontier); *keys*
        when the crawler has another FRONTIER_SHARDS than the tests' own."""
        deadline = time.monotonic() + timeout
        index = (keys or keys_for(prefix, redis_client)).heartbeat_index("crawler")
        while time.monotonic() < deadline:
            if redis_client.zcard(index) >= count:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"crawler not ready:\n{self.output()}")

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text()

    def terminate(self, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout)
        finally:
            self.log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()


class LeaseReaper:
    """What the redis-monitor's lease reaper does, in a thread of the test: every *interval_s*,
    reclaim the expired leases of *spider* (``requeued`` counts each pass's requeued leases)."""

    def __init__(
        self, client: redis.Redis, settings: Settings, spider: str = "link", interval_s: float = 0.3, retries: int = 2
    ) -> None:
        self.worker = FrontierLeaser.from_settings(client, settings)
        self.spider, self.interval_s, self.retries = spider, interval_s, retries
        self.requeued: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.requeued.append(reclaim_expired_leases(self.worker, self.spider, self.retries).requeued)
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)


def seed(settings: Settings, redis_client: redis.Redis, origin: str = "", **request: Any) -> None:
    """Queue a crawl request as the kafka-monitor would (defaults filled in)."""
    message = {**CRAWL_DEFAULTS, **request}
    pipe = write_pipeline(redis_client)
    Frontier.from_settings(redis_client, settings).push(
        [seed_from_request(message, origin or f"test/{time.monotonic_ns()}")], pipe
    )
    pipe.execute()


class Collector:
    """Reads topics in a thread and keeps their JSON messages, by crawlid."""

    def __init__(self, settings: Settings, topics: list[str]) -> None:
        self.messages: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self.consumer = make_consumer(settings, *topics, group_id=None)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for records in self.consumer.poll(timeout_ms=100).values():
                for record in records:
                    message = json.loads(record.value)
                    message["_topic"] = record.topic
                    with self.lock:
                        self.messages[str(message.get("crawlid"))].append(message)

    def of(self, crawlid: str, topic: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [m for m in self.messages[crawlid] if topic is None or m["_topic"] == topic]

    def wait_for(self, crawlid: str, count: int, timeout: float = 20, topic: str | None = None) -> list[dict[str, Any]]:
        """Messages of *crawlid* once there are at least *count* (or whatever came by *timeout*)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.of(crawlid, topic)
            if len(found) >= count:
                return found
            time.sleep(0.05)
        return self.of(crawlid, topic)

    def settle(self, crawlid: str, quiet_s: float = 1.0, timeout: float = 20) -> list[dict[str, Any]]:
        """Messages of *crawlid* once none arrived for *quiet_s*."""
        deadline = time.monotonic() + timeout
        last = -1
        changed = time.monotonic()
        while time.monotonic() < deadline:
            n = len(self.of(crawlid))
            if n != last:
                last, changed = n, time.monotonic()
            elif time.monotonic() - changed >= quiet_s:
                break
            time.sleep(0.05)
        return self.of(crawlid)

    def close(self) -> None:
        self._stop.set()
        self.thread.join(5)
        self.consumer.close()


def isolated_settings(redis_url: str, kafka_bootstrap: str, home: Path, token_prefix: str) -> Settings:
    """Settings on the test Redis and broker under a key and topic prefix of their own."""
    token = f"{token_prefix}{secrets.token_hex(5)}"
    return Settings.from_overrides(
        REDIS_URL=redis_url,
        KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
        REDIS_KEY_PREFIX=token,
        KAFKA_TOPIC_PREFIX=token,
        CRAWLHIVE_HOME=str(home),
        FRONTIER_SHARDS=TEST_FRONTIER_SHARDS,
    )


def output_collector(settings: Settings) -> Collector:
    """A collector of what crawlers write: the firehose, spider items and dead letters (created first)."""
    topics = [settings.topic(t) for t in ("crawled_firehose", "items", "dead_letter")]
    ensure_topics(settings, topics)
    return Collector(settings, topics)


@contextlib.contextmanager
def crawler_module(
    redis_url: str, kafka_bootstrap: str, home: Path, token_prefix: str, spider: str = "link", **overrides: Any
) -> Iterator[dict[str, Any]]:
    """One real ``crawlhive crawler`` on its own key and topic prefix, with a collector of its
    output topics: ``{"settings", "redis", "collector", "crawler", "home"}``. Everything under the
    prefix is deleted afterwards, and the crawler must have stopped cleanly."""
    settings = isolated_settings(redis_url, kafka_bootstrap, home, token_prefix)
    token = settings["REDIS_KEY_PREFIX"]
    client = redis_for(redis_url)
    collector = output_collector(settings)
    crawler = Crawler(crawler_env(settings, **overrides), home, spider=spider)
    try:
        crawler.wait_ready(client, token)
        yield {"settings": settings, "redis": client, "collector": collector, "crawler": crawler, "home": home}
    finally:
        code = crawler.terminate()
        collector.close()
        for key in client.scan_iter(match=f"{token}*", count=1000):
            client.delete(key)
        client.close()
        assert code == 0, crawler.output()
