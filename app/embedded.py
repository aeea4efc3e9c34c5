"""Real services on free loopback ports: a private ``redis-server`` and a Tansu Kafka-compatible broker.

``crawlhive up`` and the integration tests use these to run a whole cluster on one machine without
Docker. Each service is a child process listening on ``127.0.0.1:<port>`` only, with its own work
directory holding a ``<name>.log`` file that captures the child's stdout and stderr (a file, not a
pipe, so a chatty child can never block on a full pipe).

No orphans: on Linux every child asks the kernel (``prctl(PR_SET_PDEATHSIG, SIGTERM)``) to be sent
SIGTERM when its parent dies, even by SIGKILL. The signal fires when the *thread* that started the
child exits, so start services from a long-lived thread (the main thread). Each child runs in a
session of its own, so a Ctrl-C in the terminal (SIGINT to the whole foreground process group)
reaches only the parent, which stops the services last, after everything that uses them
(docs/contract.md §17.1). On a normal exit :meth:`EmbeddedService.close` (``__exit__``) and an
``atexit`` hook stop whatever is still running.

Example::

    with EmbeddedCluster() as cluster:
        settings = Settings.from_overrides(
            REDIS_URL=cluster.redis_url, KAFKA_BOOTSTRAP_SERVERS=cluster.bootstrap
        )
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import redis

from crawlhive.app.binaries import find_broker_bin, find_redis_server
from crawlhive.utils.config.errors import BackendUnavailable, EmbeddedServiceError

logger = logging.getLogger(__name__)

#: Loopback address every embedded service binds to.
HOST = "127.0.0.1"
#: Tansu storage used unless told otherwise: in memory, gone when the broker stops.
DEFAULT_BROKER_STORAGE = "memory://tansu/"

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


# --- ports and child processes ------------------------------------------------------------------


def free_port(host: str = HOST) -> int:
    """A TCP port that nothing listens on at this instant.

    Another process may take it before the caller binds it; services started on a port chosen
    here retry with a new port when that happens.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def die_with_parent_hook() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive SIGTERM when its parent dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()

    def hook() -> None:  # runs in the child between fork and exec: keep it tiny
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return hook


# --- one service ---------------------------------------------------------------------------------

#: Services whose child may be running, held strongly so that none is collected while it runs.
_running: set[EmbeddedService] = set()
_atexit_lock = threading.Lock()
_atexit_registered = False


def _close_all_at_exit() -> None:
    for service in list(_running):
        try:
            service.close()
        except Exception:  # best effort at interpreter exit: try every service
            logger.exception("could not stop embedded %s", service.name)


def _register(service: EmbeddedService) -> None:
    global _atexit_registered
    with _atexit_lock:
        if not _atexit_registered:
            atexit.register(_close_all_at_exit)
            _atexit_registered = True
        _running.add(service)


class EmbeddedService:
    """One child process serving on ``127.0.0.1:<port>``; subclasses say how to run and probe it.

    Lifecycle: :meth:`start` (returns once the service answers), :meth:`stop` (process only; the
    work directory and port stay, so :meth:`start` / :meth:`restart` bring it back on the same port),
    :meth:`close` (stop, then delete the work directory if this object created it). Used as a
    context manager it starts on enter and closes on exit.

    Args:
        port: the port to listen on; None picks a free one (kept across restarts).
        workdir: directory for the log and any data; None creates a temporary one, deleted by
            :meth:`close`. A given directory is created if missing and never deleted.
        executable: the binary to run; None locates it (see subclasses).
        startup_timeout: seconds :meth:`start` waits for the service to answer.
        stop_timeout: seconds :meth:`stop` waits after SIGTERM before it sends SIGKILL.
    """

    #: Short name used in logs, file names and errors.
    name = "service"
    #: Attempts with a fresh port when the automatically chosen one was taken meanwhile.
    port_attempts = 3

    def __init__(
        self,
        port: int | None = None,
        *,
        workdir: str | os.PathLike[str] | None = None,
        executable: str | None = None,
        startup_timeout: float = 20.0,
        stop_timeout: float = 5.0,
    ) -> None:
        self.executable = executable or self._find_executable()
        self._port_fixed = port is not None
        self.port: int = port if port is not None else free_port()
        self._own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix=f"crawlhive-{self.name}-") if workdir is None else workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False

    # subclass hooks
    def _find_executable(self) -> str:
        raise NotImplementedError

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _answers(self, remaining: float) -> bool:
        """True once the service answers a real request; called repeatedly until the deadline."""
        raise NotImplementedError

    # public surface
    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"{HOST}:{self.port}"

    @property
    def log_path(self) -> Path:
        """The file holding the child's stdout and stderr (appended to across restarts)."""
        return self.workdir / f"{self.name}.log"

    @property
    def pid(self) -> int | None:
        """The child's pid while it runs, else None."""
        return self._proc.pid if self._proc is not None and self.running else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Self:
        """Start the child and wait until it answers.

        Returns:
            self, for chaining.

        Raises:
            EmbeddedServiceError: the object was closed, the child exited, or it did not answer
                within ``startup_timeout``; the message includes the tail of its log.
        """
        if self._closed:
            raise EmbeddedServiceError(f"embedded {self.name} was closed; create a new one")
        if self.running:
            return self
        attempts_left = 1 if self._port_fixed else self.port_attempts
        while True:
            attempts_left -= 1
            try:
                self._spawn_and_wait()
                return self
            except _ExitedEarly as exc:
                if attempts_left == 0 or not self._port_in_use():
                    raise EmbeddedServiceError(str(exc)) from None
                logger.info("embedded %s: port %d was taken meanwhile; trying another", self.name, self.port)
                self.port = free_port()

    def _stop_wait_s(self) -> float:
        """Seconds :meth:`stop` waits after SIGTERM before SIGKILL."""
        return self.stop_timeout

    def _stopping_slowly(self, proc: subprocess.Popen[bytes]) -> None:
        """Log that *proc* outlived the wait after SIGTERM (it is killed next)."""
        logger.warning("embedded %s (pid %d) ignored SIGTERM; killing it", self.name, proc.pid)

    def stop(self) -> None:
        """Stop the child: SIGTERM, then SIGKILL after ``stop_timeout`` seconds. Idempotent."""
        proc, self._proc = self._proc, None
        _running.discard(self)
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(self._stop_wait_s())
            except subprocess.TimeoutExpired:
                self._stopping_slowly(proc)
                proc.kill()
                proc.wait()
        logger.info("stopped embedded %s on port %d (exit code %s)", self.name, self.port, proc.returncode)

    def kill(self) -> None:
        """SIGKILL the child now, if it runs (a second Ctrl-C); :meth:`stop` then returns at once.
        Safe to call from a signal handler."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def restart(self) -> Self:
        """Stop, then start again on the same port with the same work directory."""
        self.stop()
        self._port_fixed = True  # clients hold this address: never move
        return self.start()

    def close(self) -> None:
        """Stop the child and delete the work directory if this object created it. Idempotent."""
        self.stop()
        if not self._closed and self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        self._closed = True

    def log_tail(self, lines: int = 20) -> str:
        """The last *lines* lines of the child's log ('' when there is none)."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - 16384))
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.address} pid={self.pid}>"

    # internals
    def _spawn_and_wait(self) -> None:
        command = self._command()
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,  # a terminal's Ctrl-C is not theirs: they stop last (§17.1)
                preexec_fn=die_with_parent_hook(),  # only prctl + getppid: no locks, no allocation
            )
        _register(self)
        logger.info(
            "started embedded %s %s on %s (pid %d, log %s)",
            self.name,
            self.executable,
            self.address,
            self._proc.pid,
            self.log_path,
        )
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self.stop()
                raise _ExitedEarly(
                    f"embedded {self.name} ({self.executable}) exited with code {code} on port {self.port}; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                raise EmbeddedServiceError(
                    f"embedded {self.name} ({self.executable}) did not answer on {self.address} within "
                    f"{self.startup_timeout:g} s; log {self.log_path}:\n{self.log_tail()}"
                )
            if self._port_open() and self._answers(remaining):
                logger.debug("embedded %s on %s answers", self.name, self.address)
                return
            time.sleep(0.02)

    def _port_open(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def _port_in_use(self) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((HOST, self.port))
            except OSError:
                return True
            return False


class _ExitedEarly(Exception):
    """The child exited during start-up (possibly because its port was taken meanwhile)."""


class EmbeddedRedis(EmbeddedService):
    """A private ``redis-server`` on ``127.0.0.1:<port>``.

    Without persistence by default (``--save "" --appendonly no``): its data lives only as long as
    the process. With ``appendonly=True`` it keeps an append-only file in the work directory, so a
    :meth:`restart` (or a new object on the same ``workdir``) finds the data again.

    Args:
        port: see :class:`EmbeddedService`.
        appendonly: persist every write to an AOF in the work directory (fsync every second).
        workdir, executable, startup_timeout, stop_timeout: see :class:`EmbeddedService`;
            *executable* defaults to :func:`find_redis_server`.
    """

    name = "redis"

    def __init__(
        self,
        port: int | None = None,
        *,
        appendonly: bool = False,
        workdir: str | os.PathLike[str] | None = None,
        executable: str | None = None,
        startup_timeout: float = 20.0,
        stop_timeout: float = 5.0,
    ) -> None:
        self.appendonly = appendonly
        super().__init__(
            port, workdir=workdir, executable=executable, startup_timeout=startup_timeout, stop_timeout=stop_timeout
        )

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://{HOST}:{self.port}/0"

    def _find_executable(self) -> str:
        return find_redis_server()

    def _command(self) -> list[str]:
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "everysec"] if self.appendonly else ["--appendonly", "no"]
        )
        return [
            self.executable,
            "--bind",
            HOST,
            "--port",
            str(self.port),
            "--dir",
            str(self.workdir),
            "--save",
            "",
            *persistence,
            "--daemonize",
            "no",
            "--logfile",
            "",  # log to stdout, which is our log file
        ]

    def _answers(self, remaining: float) -> bool:
        client = redis.Redis(host=HOST, port=self.port, socket_timeout=min(remaining, 2.0), socket_connect_timeout=1.0)
        try:
            return bool(client.ping())
        except redis.RedisError:  # BusyLoadingError while an AOF loads, connection refused, ...
            return False
        finally:
            client.close()


class EmbeddedBroker(EmbeddedService):
    """A Tansu Kafka-compatible broker on ``127.0.0.1:<port>``.

    Runs ``<bin> broker --listener-url tcp://127.0.0.1:P --advertised-listener-url tcp://127.0.0.1:P
    --storage-engine <storage>``. With the default in-memory storage every topic and offset is lost
    when the broker stops, including on :meth:`restart`.

    Args:
        port: see :class:`EmbeddedService`.
        storage: Tansu's ``--storage-engine`` URL (default ``memory://tansu/``).
        workdir, executable, startup_timeout, stop_timeout: see :class:`EmbeddedService`;
            *executable* defaults to :func:`find_broker_bin`.
    """

    name = "broker"

    def __init__(
        self,
        port: int | None = None,
        *,
        storage: str = DEFAULT_BROKER_STORAGE,
        workdir: str | os.PathLike[str] | None = None,
        executable: str | None = None,
        startup_timeout: float = 20.0,
        stop_timeout: float = 5.0,
    ) -> None:
        self.storage = storage
        super().__init__(
            port, workdir=workdir, executable=executable, startup_timeout=startup_timeout, stop_timeout=stop_timeout
        )

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>``, the value for KAFKA_BOOTSTRAP_SERVERS."""
        return self.address

    #: Seconds an in-memory broker gets after SIGTERM. Tansu then stops accepting connections and
    #: waits about 5 s for its clients to hang up (a ``crawlhive dump`` in another terminal never
    #: does) before it exits; its memory storage is gone either way, so it is killed sooner, quietly.
    memory_stop_wait_s = 1.0

    def _find_executable(self) -> str:
        return find_broker_bin()

    def _in_memory(self) -> bool:
        return self.storage.startswith("memory:")

    def _stop_wait_s(self) -> float:
        return min(self.stop_timeout, self.memory_stop_wait_s) if self._in_memory() else self.stop_timeout

    def _stopping_slowly(self, proc: subprocess.Popen[bytes]) -> None:
        if self._in_memory():  # Tansu draining its clients' connections: expected, nothing to lose
            logger.info("embedded broker (pid %d) still waits for its clients to disconnect; stopping it", proc.pid)
        else:
            super()._stopping_slowly(proc)

    def _command(self) -> list[str]:
        url = f"tcp://{HOST}:{self.port}"
        return [
            self.executable,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            self.storage,
        ]

    def _answers(self, remaining: float) -> bool:
        # The same factory every component uses: a metadata round trip through librdkafka.
        from crawlhive.utils.backends.kafka_clients import make_admin
        from crawlhive.utils.config.settings import Settings

        settings = Settings.from_overrides(KAFKA_BOOTSTRAP_SERVERS=[self.bootstrap])
        try:
            admin = make_admin(settings, bootstrap_timeout_ms=max(100, int(min(remaining, 5.0) * 1000)))
        except BackendUnavailable:
            return False
        admin.close()
        return True


# --- both ----------------------------------------------------------------------------------------


class EmbeddedCluster:
    """The services a local cluster needs, started together and stopped together.

    Args:
        redis: start an :class:`EmbeddedRedis`.
        broker: start an :class:`EmbeddedBroker`.
        workdir: parent directory for the services' work directories (``<workdir>/redis``,
            ``<workdir>/broker``); None gives each its own temporary directory.
        redis_options: extra keyword arguments for :class:`EmbeddedRedis` (e.g. ``appendonly``).
        broker_options: extra keyword arguments for :class:`EmbeddedBroker` (e.g. ``storage``).

    On enter both are started (Redis first); if one fails, the other is stopped before the error
    propagates. On exit both are closed.
    """

    def __init__(
        self,
        *,
        redis: bool = True,
        broker: bool = True,
        workdir: str | os.PathLike[str] | None = None,
        redis_options: dict[str, object] | None = None,
        broker_options: dict[str, object] | None = None,
    ) -> None:
        def where(sub: str) -> dict[str, object]:
            return {} if workdir is None else {"workdir": Path(workdir) / sub}

        self.redis: EmbeddedRedis | None = (
            EmbeddedRedis(**{**where("redis"), **(redis_options or {})}) if redis else None  # type: ignore[arg-type]
        )
        self.broker: EmbeddedBroker | None = (
            EmbeddedBroker(**{**where("broker"), **(broker_options or {})}) if broker else None  # type: ignore[arg-type]
        )

    @property
    def services(self) -> Sequence[EmbeddedService]:
        return [s for s in (self.redis, self.broker) if s is not None]

    @property
    def redis_url(self) -> str:
        """The embedded Redis's URL. Raises EmbeddedServiceError when Redis was not requested."""
        if self.redis is None:
            raise EmbeddedServiceError("this EmbeddedCluster runs no Redis")
        return self.redis.url

    @property
    def bootstrap(self) -> str:
        """The embedded broker's ``host:port``. Raises EmbeddedServiceError when no broker was requested."""
        if self.broker is None:
            raise EmbeddedServiceError("this EmbeddedCluster runs no broker")
        return self.broker.bootstrap

    def start(self) -> Self:
        """Start every service; on failure stop those already started and re-raise."""
        try:
            for service in self.services:
                service.start()
        except BaseException:
            self.close()
            raise
        return self

    def stop(self) -> None:
        """Stop every service (work directories stay)."""
        for service in reversed(self.services):
            service.stop()

    def close(self) -> None:
        """Stop every service and delete the temporary work directories."""
        for service in reversed(self.services):
            service.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
