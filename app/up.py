"""``crawlhive up``: a whole cluster in the foreground on one machine.

Starts a private Redis and/or broker when REDIS_URL / KAFKA_BOOTSTRAP_SERVERS are not set
(:mod:`crawlhive.app.embedded`), records the addresses for other ``crawlhive`` commands
(:mod:`crawlhive.app.state`), creates the topics, and runs every component that exists as a child
process (restarted with back-off if it dies). On SIGINT/SIGTERM, or after ``--duration``, it stops
the children (SIGTERM, then SIGKILL after a grace period) and the services, and returns 0.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from crawlhive.app.embedded import EmbeddedBroker, EmbeddedRedis, die_with_parent_hook, free_port
from crawlhive.app.plan import up_plan
from crawlhive.app.signals import on_forced_stop
from crawlhive.app.state import claim_state, clear_state, shared_settings, write_state
from crawlhive.utils.backends.kafka_clients import ensure_topics
from crawlhive.utils.backends.redis_clients import check_redis, keys_from_settings, redis_from_settings
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.config.errors import BackendUnavailable, CrawlhiveError, SettingsError
from crawlhive.utils.config.log import mask_url
from crawlhive.utils.config.settings import Settings, settings_env
from crawlhive.utils.contract.topics import TOPICS
from crawlhive.utils.process.kinds import heartbeat_components
from crawlhive.utils.state.heartbeat import live_nodes

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

#: Topics the cluster reads or writes (docs/contract.md §1); per-appid topics are created on demand.

#: What ``up`` and ``demo`` allow their crawlers when CRAWLER_ALLOWED_NETWORKS is not set.
LOOPBACK_NETWORKS = ["127.0.0.0/8", "::1/128"]
#: Seconds a child gets to exit after SIGTERM before it is killed.
STOP_GRACE_S = 15.0
#: Seconds `up` waits for every component's first heartbeat before it prints its summary anyway.
READY_TIMEOUT_S = 60.0
#: Seconds between two status lines.
STATUS_EVERY_S = 10.0
#: SINK_ROLL_SECONDS of the file sinks ``up --sink`` starts, unless set: a file a few seconds after
#: its first record (the default, 300 s, suits a production sink, not a first look at the output).
UP_SINK_ROLL_SECONDS = 5.0
#: KAFKA_SESSION_TIMEOUT_MS of the cleaners ``up`` starts on its embedded broker, unless set. That
#: broker holds every join of a group for half the session timeout (in steps of a second), and a
#: cleaner started, restarted or added cleans nothing until its join ends: at 2 s it is cleaning
#: about 1.3 s after its start on 2 cores (1.32 s measured), against 3.8 s at the default 6 s. Its heartbeats
#: come from librdkafka's own thread, so a busy cleaner keeps its membership; a machine stalled
#: for 2 s moves its partitions to another cleaner, which cleans their records again (at least
#: once, docs/contract.md §13). Apache Kafka refuses sessions under 6 s by default, hence the
#: embedded broker only.
UP_CLEANER_SESSION_TIMEOUT_MS = 2000


class SinkUnusable(CrawlhiveError):
    """A ``--sink`` store cannot be written (checked before anything starts); ``main()`` exits
    with 2. The message names the URL (password masked) and the store's error."""

    exit_code = 2


def check_sinks(settings: Settings, urls: Sequence[str]) -> None:
    """Open and close the store of each sink URL in *urls* (create its table or folder), so that
    ``up --sink`` refuses to start with a store it cannot write rather than restart the sink forever.

    Raises:
        SinkUnusable: a URL names no store, or its store refused or did not answer.
    """
    from crawlhive.sink.store import store_for

    for url in urls:
        try:
            store = store_for(settings, url)
            try:
                store.open()
            finally:
                store.close()
        except (SettingsError, BackendUnavailable) as exc:
            raise SinkUnusable(f"--sink {mask_url(url)} cannot be written: {exc}") from exc


@dataclass
class Child:
    """One component process and its restart bookkeeping."""

    name: str
    argv: list[str]
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    next_start: float = 0.0
    env: dict[str, str] = field(default_factory=dict)

    def start(self) -> None:
        # A session of its own: a terminal's Ctrl-C reaches `up` only, which then sends each child
        # exactly one SIGTERM (a second signal would force the child's stop; docs/contract.md §17.1).
        self.process = subprocess.Popen(
            self.argv, env=self.env, start_new_session=True, preexec_fn=die_with_parent_hook()
        )
        logger.info("started %s (pid %d)", self.name, self.process.pid)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, already_signalled: bool = False) -> None:
        """SIGTERM (unless *already_signalled*: a second one forces an exit), then SIGKILL after a grace."""
        if self.process is None or self.process.poll() is not None:
            return
        if not already_signalled:
            self.process.terminate()
        try:
            self.process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            logger.warning("%s did not stop within %.0fs; killing it", self.name, STOP_GRACE_S)
            self.process.kill()
            self.process.wait()


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _rest_port_chosen(settings: Settings) -> Settings:
    """*settings* with a concrete REST_PORT, so that the address printed is the one the REST child
    binds: a free port for REST_PORT=0, or when the default port is taken (the user did not ask
    for it)."""
    host, port = settings.REST_HOST, settings.REST_PORT
    if port == 0 or (not settings.is_set("REST_PORT") and not _port_free(host, port)):
        return settings.copy_with(REST_PORT=free_port(host))
    return settings


def embedded_note(embedded: Mapping[str, str], service: str) -> str:
    """`` (embedded: <binary>)`` when *embedded* (``LocalCluster.embedded``) says the cluster
    started *service* itself, else ''."""
    binary = embedded.get(service)
    return f" (embedded: {binary})" if binary else ""


def backend_lines(live: Settings, embedded: Mapping[str, str]) -> list[str]:
    """The lines ``up`` and ``demo`` print about Redis and Kafka (after their own prefix): the
    addresses in use, with every secret of REDIS_URL masked by :func:`~crawlhive.utils.config.log.mask_url`."""
    kafka = ",".join(live.KAFKA_BOOTSTRAP_SERVERS)
    return [
        f"Redis {mask_url(live.REDIS_URL)}{embedded_note(embedded, 'redis')}",
        f"Kafka {kafka}{embedded_note(embedded, 'broker')}",
    ]


def loopback_note() -> str:
    """The line ``up`` and ``demo`` print when they allow their crawlers loopback."""
    return (
        f"crawlers may fetch from this machine ({', '.join(LOOPBACK_NETWORKS)}), as CRAWLER_ALLOWED_NETWORKS "
        "is not set; other private networks stay blocked (docs/security.md)"
    )


@contextlib.contextmanager
def backing_services(settings: Settings, started: dict[str, str] | None = None) -> Iterator[Settings]:
    """*settings* with REDIS_URL / KAFKA_BOOTSTRAP_SERVERS pointing at running services.

    Starts an embedded service for each address the user did not set, and stops it on exit;
    *started* (if given) gets the binary of each service started, by name (``redis``, ``broker``).
    """
    with contextlib.ExitStack() as stack:
        overrides: dict[str, object] = {}
        notes = started if started is not None else {}
        if not settings.is_set("REDIS_URL"):
            redis_service = EmbeddedRedis()
            # A second Ctrl-C kills it at once, also while it is being stopped: the hook is
            # registered first, so it is unregistered only after the stop.
            stack.callback(on_forced_stop(redis_service.kill))
            stack.enter_context(redis_service)
            overrides["REDIS_URL"] = redis_service.url
            notes["redis"] = redis_service.executable
        if not settings.is_set("KAFKA_BOOTSTRAP_SERVERS"):
            broker = EmbeddedBroker()
            stack.callback(on_forced_stop(broker.kill))
            stack.enter_context(broker)
            overrides["KAFKA_BOOTSTRAP_SERVERS"] = broker.bootstrap
            notes["broker"] = broker.executable
        yield settings.copy_with(**overrides) if overrides else settings


class LocalCluster:
    """Backing services (embedded when not configured), topics, state file and component children.

    ``with LocalCluster(settings, {"crawlers": 2}) as cluster:`` yields with everything started;
    ``cluster.settings`` has the live addresses; leaving the block stops it all.
    """

    def __init__(
        self,
        settings: Settings,
        counts: Mapping[str, int] | None = None,
        extra_env: dict[str, str] | None = None,
        command: str = "up",
        forwarded: Mapping[str, Sequence[str]] | None = None,
        values: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        #: The crawlers of this local development cluster may fetch from loopback (its own sites),
        #: unless the user chose CRAWLER_ALLOWED_NETWORKS (docs/contract.md §10.2).
        self.allows_loopback = not settings.is_set("CRAWLER_ALLOWED_NETWORKS")
        if self.allows_loopback:
            settings = settings.copy_with(CRAWLER_ALLOWED_NETWORKS=LOOPBACK_NETWORKS)
        if not settings.is_set("FRONTIER_TAIL_URL"):  # queue tails in its state directory (§23)
            settings = settings.copy_with(FRONTIER_TAIL_URL=str(settings.home.resolve() / "frontier-tails"))
        #: The command running it (``up``, ``demo``), as the state file names it to a second one.
        self.command = command
        wanted_port = settings.REST_PORT
        settings = _rest_port_chosen(settings)
        #: Why REST is not on the port asked for (its default was taken), or ''.
        self.rest_note = (
            f" (port {wanted_port} is taken; set REST_PORT to choose)"
            if wanted_port and settings.REST_PORT != wanted_port
            else ""
        )
        self.requested = settings
        #: The binaries of the services started for it (``redis``, ``broker``), if any.
        self.embedded: dict[str, str] = {}
        #: Each child (:func:`~crawlhive.app.plan.up_plan`: *counts* by ``up`` option,
        #: ``{"crawlers": 2}``, the rest at their defaults; *values* of the options that start one
        #: process per value, ``{"sink": [url]}``).
        self.plan = up_plan(counts, forwarded, values)
        #: The ``--sink`` URLs (each store is checked before anything starts).
        self.sink_urls = list((values or {}).get("sink", ()))
        self.extra_env = extra_env or {}
        self.children: list[Child] = []
        self._stack = contextlib.ExitStack()
        self.settings = settings

    def __enter__(self) -> LocalCluster:
        from crawlhive.rest.server import check_exposure

        check_exposure(self.requested)  # before anything starts: exit 2 names REST_API_KEY
        check_sinks(self.requested, self.sink_urls)  # and exit 2 names a --sink it cannot write
        if any("--render" in p.argv for p in self.plan if p.kind == "crawler"):
            from crawlhive.crawler.render.browser import check_render_installed, find_browser

            check_render_installed()  # and a missing browser or scrapy-playwright is named here
            find_browser(self.requested)
        # Before anything starts: a second cluster would take the other commands over (exit 1).
        nonce = claim_state(self.requested.home, self.command)
        self._stack.callback(clear_state, self.requested.home, nonce)
        try:
            self.settings = self._stack.enter_context(backing_services(self.requested, self.embedded))
            redis = redis_from_settings(self.settings)
            self._stack.callback(redis.close)
            check_redis(redis, self.settings)
            ensure_topics(self.settings, [self.settings.topic(t) for t in TOPICS])
            write_state(
                self.settings.home,
                self.settings.REDIS_URL,
                self.settings.KAFKA_BOOTSTRAP_SERVERS,
                nonce,
                self.command,
                shared_settings(self.settings),
            )
            self._stack.callback(clear_state, self.settings.home, nonce)
            env = {**os.environ, **settings_env(self.settings), **self.extra_env}
            if not self.requested.is_set("LOG_STOP_SIGNALS"):
                # `up` prints that it is stopping, once: the components' own first-signal lines
                # would repeat it once each for a single Ctrl-C (they are DEBUG then).
                env["LOG_STOP_SIGNALS"] = "false"
            self.children = [
                Child(
                    p.name,
                    [sys.executable, "-m", "crawlhive.app.cli", *p.argv],
                    env={**env, **self.kind_env().get(p.kind, {}), **p.env},
                )
                for p in self.plan
            ]
            # The force hook is unregistered after the children's stop (a LIFO stack), so that a
            # second Ctrl-C during that stop kills them at once.
            self._stack.callback(on_forced_stop(self.force))
            self._stack.callback(self._stop_children)
            for child in self.children:
                child.start()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def kind_env(self) -> dict[str, dict[str, str]]:
        """Settings ``up`` gives the processes of a kind unless the user set them: the file sinks
        roll within seconds (UP_SINK_ROLL_SECONDS), and on the embedded broker the cleaners join
        within a second (UP_CLEANER_SESSION_TIMEOUT_MS)."""
        kinds: dict[str, dict[str, str]] = {}
        if not self.requested.is_set("SINK_ROLL_SECONDS"):
            kinds["sink"] = {"SINK_ROLL_SECONDS": str(UP_SINK_ROLL_SECONDS)}
        if "broker" in self.embedded and not self.requested.is_set("KAFKA_SESSION_TIMEOUT_MS"):
            kinds["cleaner"] = {"KAFKA_SESSION_TIMEOUT_MS": str(UP_CLEANER_SESSION_TIMEOUT_MS)}
        return kinds

    def force(self) -> None:
        """Kill every child now (a second Ctrl-C); the services then stop as usual, quickly."""
        for child in self.children:
            if child.process is not None and child.process.poll() is None:
                child.process.kill()

    def _stop_children(self) -> None:
        for child in self.children:  # all at once, so they shut down in parallel
            if child.process is not None and child.process.poll() is None:
                child.process.terminate()
        for child in self.children:
            child.stop(already_signalled=True)

    def supervise_once(self) -> None:
        """Restart children that died, with back-off."""
        now = time.monotonic()
        for child in self.children:
            if not child.alive() and now >= child.next_start:
                if child.process is not None:
                    child.restarts += 1
                    delay = min(30.0, 2.0**child.restarts)
                    logger.warning(
                        "%s exited with %s; restarting in %.0fs", child.name, child.process.returncode, delay
                    )
                    child.process = None
                    child.next_start = now + delay
                    continue
                child.start()


def wait_ready(
    cluster: LocalCluster, timeout_s: float, progress: Callable[[str, bool], None] | None = None
) -> dict[str, tuple[int, int]]:
    """Wait until every component of *cluster* sent a heartbeat, or *timeout_s* passed.

    Returns:
        component -> (live processes, wanted), as they were when it returned. *progress* gets a
        ``starting: …`` line at each look, and True with the last one when all are ready.
    """
    heartbeats = set(heartbeat_components())
    wanted = dict(Counter(p.kind for p in cluster.plan if p.kind in heartbeats))
    keys = keys_from_settings(cluster.settings)
    redis = redis_from_settings(cluster.settings)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            have = {c: (sum(len(v) for v in live_nodes(redis, keys, c).values()), n) for c, n in wanted.items()}
            ready = all(live >= n for live, n in have.values())
            if progress is not None:
                progress(f"starting: {', '.join(f'{c} {live}/{n}' for c, (live, n) in have.items())}", ready)
            if ready or time.monotonic() > deadline:
                return have
            cluster.supervise_once()
            time.sleep(0.3)
    finally:
        redis.close()


def run_cluster(
    settings: Settings,
    counts: Mapping[str, int] | None = None,
    duration_s: float | None = None,
    forwarded: Mapping[str, Sequence[str]] | None = None,
    values: Mapping[str, Sequence[str]] | None = None,
) -> int:
    """Run the cluster until interrupted (or for *duration_s*); returns the exit code.

    The start-up output ends with a summary printed once every component is ready (or after
    READY_TIMEOUT_S, saying which is not), so it is the last thing on the screen (§17.4).
    """
    started = False
    try:
        with LocalCluster(settings, counts, forwarded=forwarded, values=values) as cluster:
            started = True
            live = cluster.settings
            have = wait_ready(cluster, READY_TIMEOUT_S)
            late = [f"{c} {n_live}/{n}" for c, (n_live, n) in have.items() if n_live < n]
            if late:
                print(f"crawlhive up: not ready after {READY_TIMEOUT_S:.0f}s: {', '.join(late)}", flush=True)
            for line in backend_lines(live, cluster.embedded):
                print(f"crawlhive up: {line}", flush=True)
            print(f"crawlhive up: topics {', '.join(live.topic(t) for t in TOPICS)}", flush=True)
            if cluster.allows_loopback:
                print(f"crawlhive up: {loopback_note()}", flush=True)
            print(
                f"crawlhive up: addresses recorded in {live.home / 'up.json'} for other crawlhive commands", flush=True
            )
            if any(c.name == "rest" for c in cluster.children):
                from crawlhive.rest.server import rest_url

                rest = rest_url(live.REST_HOST, live.REST_PORT)  # what the child binds (§10.1)
                print(f"crawlhive up: REST {rest}/ (dashboard: {rest}/dashboard){cluster.rest_note}", flush=True)
            names = ", ".join(c.name for c in cluster.children) or "none built yet"
            print(f"crawlhive up: components: {names}. Ctrl-C stops everything.", flush=True)
            try:
                _supervise(cluster, duration_s)
            finally:
                print("crawlhive up: stopping", flush=True)
    finally:
        if started:  # also after Ctrl-C, which unwinds this function as an exception
            print("crawlhive up: stopped", flush=True)
    return 0


def _supervise(cluster: LocalCluster, duration_s: float | None) -> None:
    """Restart dead children; every STATUS_EVERY_S, print the status line if it changed (an idle,
    healthy cluster stays quiet: docs/contract.md §17.4)."""
    deadline = None if duration_s is None else time.monotonic() + duration_s
    next_status = time.monotonic() + STATUS_EVERY_S
    last = _status(cluster.children, None, cluster.settings, bool(cluster.sink_urls))  # what the summary said
    redis = redis_from_settings(cluster.settings)
    try:
        while deadline is None or time.monotonic() < deadline:
            cluster.supervise_once()
            now = time.monotonic()
            if now >= next_status:
                status = _status(cluster.children, redis, cluster.settings, bool(cluster.sink_urls))
                if status != last:
                    print(f"crawlhive up: {status}", flush=True)
                    last = status
                next_status = now + STATUS_EVERY_S
            time.sleep(0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic())))
    finally:
        redis.close()


def _status(children: list[Child], redis: RedisClient | None, settings: Settings, sinks: bool = False) -> str:
    """One line of cluster health; *redis* None takes Redis as reachable (just checked); with
    *sinks*, a sink that reports it fails makes the cluster unhealthy, and the line says why."""
    redis_state = "ok"
    failing: dict[str, str] = {}
    try:
        if redis is not None:
            check_redis(redis, settings)
            if sinks:
                from crawlhive.utils.state.sinks import failing_sinks

                failing = failing_sinks(redis, keys_from_settings(settings), settings.HEARTBEAT_TIMEOUT)
    except BackendUnavailable:
        redis_state = "UNREACHABLE"
    running = sum(c.alive() for c in children)
    healthy = redis_state == "ok" and not failing
    line = f"healthy={healthy} redis={redis_state} components running={running}/{len(children)}"
    for name, reason in sorted(failing.items()):
        line += f"; sink {name} failing: {reason}"
    return line
