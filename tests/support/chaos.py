"""Support for the chaos and fuzz tests: a multi-host test site, component subprocesses that can be
SIGKILLed and restarted, a topic reader, and the Redis-state audit.

The site (:class:`TreeSite`) serves the same page tree on several loopback addresses (127.0.0.x,
one domain each to the frontier, docs/contract.md §3.2): per host ``/`` links to ``branching`` sections
``/s<i>/``, each linking to ``branching`` leaves ``/s<i>/p<j>``; a leaf links to the same leaf on the
next host (a link found at ``maxdepth``, listed but not followed). A crawl seeded with every host's
``/`` at ``maxdepth`` 2 therefore fetches ``hosts * (1 + b + b*b)`` pages. Every request is recorded
with its arrival time.
"""

from __future__ import annotations

import http.server
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from crawlhive.app.demo_site import SiteServer
from crawlhive.app.embedded import EmbeddedRedis, die_with_parent_hook, free_port
from crawlhive.utils.backends.kafka_clients import make_consumer
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.config.settings import Settings
from support.crawler import process_env

CLI = [sys.executable, "-m", "crawlhive.app.cli"]


def scale() -> str:
    """``CRAWLHIVE_CHAOS_SCALE``: ``ci`` (default: a few hundred pages, about a minute) or ``full``."""
    return os.environ.get("CRAWLHIVE_CHAOS_SCALE", "ci").strip().lower() or "ci"


# --- the site --------------------------------------------------------------------------------------


@dataclass
class Hit:
    """One request the site received."""

    host: str
    path: str
    at: float
    status: int


@dataclass
class TreeSite:
    """The page tree on *hosts* loopback addresses (all on one port); see the module docstring.

    Args:
        hosts: number of hosts, 127.0.0.1 … 127.0.0.<hosts>.
        branching: sections per host and leaves per section.
        delay_s: seconds each page takes to answer (keeps leases in flight at kill time).
        robots: the ``/robots.txt`` body of every host.
        responder: optional hook ``(host, path) -> (status, headers, body) | None`` tried first.
    """

    hosts: int = 10
    branching: int = 6
    delay_s: float = 0.0
    robots: str = "User-agent: *\nDisallow: /private/\n"
    responder: Callable[[str, str], tuple[int, dict[str, str], bytes] | None] | None = None
    port: int = 0
    hits: list[Hit] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    servers: list[SiteServer] = field(default_factory=list)

    @property
    def host_names(self) -> list[str]:
        return [f"127.0.0.{i + 1}" for i in range(self.hosts)]

    def url(self, host: str, path: str = "/") -> str:
        return f"http://{host}:{self.port}{path}"

    def seeds(self) -> list[str]:
        return [self.url(h) for h in self.host_names]

    def expected_urls(self) -> set[str]:
        b = self.branching
        paths = ["/"] + [f"/s{i}/" for i in range(b)] + [f"/s{i}/p{j}" for i in range(b) for j in range(b)]
        return {self.url(h, p) for h in self.host_names for p in paths}

    def page(self, host: str, path: str) -> bytes | None:
        b = self.branching
        if path == "/":
            links = [f"/s{i}/" for i in range(b)] + ["/private/secret"]
        elif path.startswith("/s") and path.endswith("/") and path[2:-1].isdigit() and int(path[2:-1]) < b:
            links = [f"{path}p{j}" for j in range(b)] + ["/"]
        else:
            parts = path.strip("/").split("/")
            ok = len(parts) == 2 and parts[0][1:].isdigit() and parts[1][1:].isdigit() and parts[1][:1] == "p"
            if not (ok and int(parts[0][1:]) < b and int(parts[1][1:]) < b):
                return None
            names = self.host_names
            other = names[(names.index(host) + 1) % len(names)]
            links = [f"/s{parts[0][1:]}/", self.url(other, path)]
        anchors = "".join(f'<a href="{link}">{link}</a>\n' for link in links)
        return f"<html><head><title>{host}{path}</title></head><body>{anchors}</body></html>".encode()

    def fetched(self, prefix: str = "") -> list[Hit]:
        with self.lock:
            return [h for h in self.hits if h.path.startswith(prefix)]

    def start(self) -> TreeSite:
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
                pass

            def do_GET(self) -> None:  # noqa: N802 - stdlib's name
                host = str(self.server.server_address[0])
                path = self.path.split("?", 1)[0]
                at = time.time()
                answer = site.responder(host, path) if site.responder else None
                if answer is None:
                    if path == "/robots.txt":
                        answer = 200, {"Content-Type": "text/plain"}, site.robots.encode()
                    else:
                        body = site.page(host, path)
                        if site.delay_s:
                            time.sleep(site.delay_s)
                        answer = (200, {}, body) if body is not None else (404, {}, b"<html>not found</html>")
                status, headers, content = answer
                with site.lock:
                    site.hits.append(Hit(host, path, at, status))
                self.send_response(status)
                headers = {"Content-Type": "text/html; charset=utf-8", **headers}
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

        self.port = self.port or free_port()
        for host in self.host_names:
            server = SiteServer((host, self.port), Handler)
            threading.Thread(target=server.serve_forever, name=f"site-{host}", daemon=True).start()
            self.servers.append(server)
        return self

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


# --- component processes ---------------------------------------------------------------------------


def component_env(settings: Settings, **overrides: Any) -> dict[str, str]:
    """Environment of a component subprocess: *settings*' addresses and prefixes, plus *overrides*
    (``CRAWLHIVE_CHAOS_LOG_LEVEL=DEBUG`` in the test's environment traces every page)."""
    return process_env(settings, LOG_LEVEL=os.environ.get("CRAWLHIVE_CHAOS_LOG_LEVEL", "INFO"), **overrides)


class Proc:
    """One ``crawlhive <args>`` subprocess that can be killed and started again; its output (all
    incarnations) goes to ``<log_dir>/<name>.log``."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.args = args
        self.env = env
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> Proc:
        with self.log_path.open("ab") as log:
            log.write(f"\n=== start {self.starts} at {time.time():.3f}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [*CLI, *self.args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent_hook(),
            )
        self.starts += 1
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL (no clean-up of any kind) and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def terminate(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL after *timeout*; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def wait_until(predicate: Callable[[], bool], timeout: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


# --- Kafka -----------------------------------------------------------------------------------------


class TopicReader:
    """Reads *topics* from their beginning in a thread (no consumer group) and keeps every message."""

    def __init__(self, settings: Settings, topics: Iterable[str]) -> None:
        self.messages: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self.consumer = make_consumer(settings, *topics, group_id=None)
        self.thread = threading.Thread(target=self._run, name="topic-reader", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                batches = self.consumer.poll(timeout_ms=100)
            except Exception:  # kafka-python raises many types while a broker restarts; keep reading
                time.sleep(0.2)
                continue
            for records in batches.values():
                for record in records:
                    with self.lock:
                        self.messages[record.topic].append(json.loads(record.value))

    def of(self, topic: str) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.messages[topic])

    def close(self) -> None:
        self._stop.set()
        self.thread.join(5)
        self.consumer.close()


# --- Redis -----------------------------------------------------------------------------------------


class AofRedis(EmbeddedRedis):
    """An embedded Redis with an append-only file fsynced on every write (``appendfsync always``),
    so a SIGKILL loses no acknowledged write."""

    def __init__(self) -> None:
        super().__init__(appendonly=True)

    def _command(self) -> list[str]:
        command = super()._command()
        return [("always" if part == "everysec" else part) for part in command]

    def crash(self) -> None:
        """SIGKILL the server (no shutdown save; only the AOF survives)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()


def leftover_keys(client: redis.Redis, keys: Keys, prefix: str) -> dict[str, tuple[bytes, int]]:
    """Every key under *prefix*: name -> (type, TTL in seconds; -1 none)."""
    found = {}
    for name in client.scan_iter(match=f"{prefix}:*", count=1000):
        text = name.decode()
        found[text] = (client.type(name), client.ttl(name))
    return found


#: Key families a finished crawl may leave (utils/backends/keys.py), with whether each must carry a TTL.
#: Anything else (a queue, a lease, a registered domain, an armed timer, an active crawl) means
#: the crawl left work behind.
ALLOWED_AFTER_COMPLETE: dict[str, bool] = {
    "crawl": True,  # the crawl record: CRAWL_RECORD_TTL after the last activity
    "crawl-fetch": True,  # how its pages were fetched, per rung (§25.7): as the crawl record
    "dupefilter": True,  # DUPEFILTER_TIMEOUT after the last fetch
    "page-caps": True,
    "stats": True,  # rolling windows expire after the longest STATS_TIMES window
    "stats-unique": True,
    "stats-lifetime": False,  # lifetime totals and their index are kept by design
    "stats-index": False,
    "heartbeat": True,  # live processes (a killed one's expires after HEARTBEAT_TIMEOUT)
    "nodes": False,  # heartbeat index, pruned by readers
    "queue-seq": False,  # arrival counter
    "frontier-shards": False,  # FRONTIER_SHARDS, fixed for the life of the data
    "control-origin": True,  # per-record idempotency markers, 1 day
    "seed-origin": True,
    "control": False,  # the control stream (must hold no pending entry: checked separately)
    "throttle": True,  # the rolling window of fetch starts
    "stopped": True,
    "finished-crawls": True,  # GET /crawls' list of ended crawls, CRAWL_RECORD_TTL
    "crawl-delay": True,  # a robots.txt Crawl-delay, refreshed with each read of the robots.txt
    # /metrics' response times and per-domain outcomes (§22.3): cluster lifetime counters, bounded
    # by METRICS_TOP_DOMAINS (domains) and the spider types (histograms), kept by design
    "metrics-response-seconds": False,
    "metrics-domains": False,
    "metrics-domain-failures": False,
    "tail-stats": False,  # a shard's tail counters: lifetime totals, and requests/segments at 0
    # a small cold queue's spill flag, kept COLD_WAIT_S (a minute) after it was raised: the
    # redis-monitor removes it then (its queue is empty by now)
    "tail-spill": False,
    "tail-refill": False,
}


def audit_leftovers(client: redis.Redis, keys: Keys, prefix: str) -> list[str]:
    """Problems with what is left under *prefix* once a crawl completed (empty list: clean)."""
    problems = []
    for name, (kind, ttl) in sorted(leftover_keys(client, keys, prefix).items()):
        rest = name[len(prefix) + 1 :]
        if rest.startswith("{"):  # a shard's hash tag (FRONTIER_SHARDS > 1)
            rest = rest[rest.index("}:") + 2 :]
        family = rest.split(":", 1)[0]
        if family not in ALLOWED_AFTER_COMPLETE:
            problems.append(f"{name} ({kind.decode()}, ttl {ttl}) is not allowed after completion")
        elif ALLOWED_AFTER_COMPLETE[family] and ttl < 0:
            problems.append(f"{name} ({kind.decode()}) has no TTL")
        elif family == "control" and client.xlen(name) and client.xpending(name, "redis-monitor")["pending"]:
            problems.append(f"{name} still has unanswered entries")
    return problems


def random_victim(rng: random.Random, procs: list[Proc]) -> Proc:
    return rng.choice(procs)
