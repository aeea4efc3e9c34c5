"""Pieces every worker loop shares: back-off, failure messages, stop signals.

Both monitors (and any other long-running component) loop on a stop flag, back off when Redis or
Kafka fails, log which setting to check, and stop gracefully on the first SIGINT/SIGTERM and at
once on the second. The loops differ; these pieces do not, so they live here once.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Protocol

from redis.exceptions import (
    BusyLoadingError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from crawlhive.utils.config.errors import BackendUnavailable, CrawlhiveError
from crawlhive.utils.config.log import mask_url
from crawlhive.utils.contract.kafka_errors import (
    CommitFailedError,
    IllegalGenerationError,
    KafkaError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)


#: The file in CRAWLHIVE_HOME where ``crawlhive up`` records the addresses of its Redis and broker
#: for the other commands (written by ``crawlhive.app.state``; read here to tell a passing
#: outage from a cluster that is gone for good).
UP_STATE_FILE = "up.json"


def pid_alive(pid: int) -> bool:
    """True if a process *pid* exists (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True  # no /proc (not Linux): kill(0) said it exists


class ClusterGone(CrawlhiveError):
    """The ``crawlhive up`` this process took its addresses from has exited: its Redis and broker
    are gone with it, so retrying can never succeed (:func:`cluster_gone`)."""


def uses_up_state(settings: Settings) -> bool:
    """Whether this process took REDIS_URL or KAFKA_BOOTSTRAP_SERVERS from the record of a
    ``crawlhive up`` (source ``state``): only then can :func:`cluster_gone` tell anything."""
    return any(settings.source(name) == "state" for name in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS"))


def cluster_gone(settings: Settings) -> str | None:
    """Why the cluster of this process is gone for good, or None when it may come back.

    Only a process that took REDIS_URL or KAFKA_BOOTSTRAP_SERVERS from the record of a ``crawlhive
    up`` (source ``state``) can tell: its cluster is gone once that record is removed (``up`` exited),
    names a process that is no longer alive (``up`` was killed), or names other addresses (another
    ``up`` started since). Addresses the user set are always worth retrying.
    """
    if not uses_up_state(settings):
        return None
    path = settings.home / UP_STATE_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        data = None
    except (OSError, ValueError):
        return None  # being rewritten, or unreadable: no proof of anything
    why = ""
    if not isinstance(data, dict) or not isinstance(data.get("pid"), int):
        why = f"it has exited and removed {path}"
    elif not pid_alive(data["pid"]):
        why = f"its process (pid {data['pid']}) has exited"
    elif data.get("REDIS_URL") != settings.REDIS_URL or data.get("KAFKA_BOOTSTRAP_SERVERS") != ",".join(
        settings.KAFKA_BOOTSTRAP_SERVERS
    ):
        why = f"it has exited; {path} now records another cluster (pid {data['pid']})"
    if not why:
        return None
    return (
        f"the crawlhive up whose Redis and broker this process used ({mask_url(settings.REDIS_URL)}, "
        f"{','.join(settings.KAFKA_BOOTSTRAP_SERVERS)}) is gone: {why}; start `crawlhive up` and run "
        "this command again"
    )


class Outage:
    """One WARNING when a backend stops answering, quiet retries while it is down, one INFO line
    when it answers again; :class:`ClusterGone` instead when the cluster is gone for good.

    For loops that retry on their own schedule (the crawler, REST); :class:`Backoff` is the same
    rule for loops that wait between attempts. Safe to share between threads (a lost update costs
    at most one extra line).
    """

    def __init__(self, settings: Settings, log: logging.Logger | None = None) -> None:
        self.settings = settings
        self.log = log or logger
        self._since: float | None = None

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, what: str) -> None:
        """A backend call failed with a transient error; *what* names it and the setting to check.

        Raises:
            ClusterGone: the ``crawlhive up`` this process's addresses came from has exited.
        """
        gone = cluster_gone(self.settings)
        if gone is not None:
            raise ClusterGone(gone)
        if self._since is None:
            self._since = time.monotonic()
            self.log.warning("%s; retrying quietly until it answers", what)
        else:
            self.log.debug("%s (still)", what)

    def recovered(self) -> None:
        """A backend call succeeded: end the outage (one INFO line if there was one)."""
        since, self._since = self._since, None
        if since is not None:
            self.log.info("backends answer again after %.0fs", time.monotonic() - since)


class Shutdown(BaseException):  # noqa: N818 - named for what it is, as KeyboardInterrupt
    """Raised in the main thread by the first SIGINT/SIGTERM of a ``crawlhive`` command
    (:func:`crawlhive.app.signals.install_shutdown_handlers`), so ``with`` blocks unwind cleanly.

    A ``BaseException``, as ``KeyboardInterrupt`` is: an ``except Exception`` that retries (a
    broker probe while the crawler starts) must not swallow it, or the process goes on as if
    the signal had never come (seen: a crawler sent SIGTERM 0.8 s after its start ran on)."""


class ForcedShutdown(Exception):
    """Second SIGINT/SIGTERM: stop now, without finishing the current work (it is redelivered)."""


class Backoff:
    """Exponential back-off between failed attempts: *first_s* doubling to *max_s*, reset on success.

    The wait is sliced so that a stop request (SIGINT/SIGTERM) ends it within *slice_s*.
    """

    def __init__(self, first_s: float = 0.5, max_s: float = 10.0, slice_s: float = 0.1) -> None:
        self.first_s, self.max_s, self.slice_s = first_s, max_s, slice_s
        self.current_s = 0.0
        self.failures = 0

    def wait(self, reason: str, stop: Callable[[], bool] | None = None) -> None:
        """Log *reason* and sleep the next back-off; return early once ``stop()`` is true.

        The first failure of an outage is a WARNING; the retries that follow are DEBUG lines, so a
        long outage is one line, not one per attempt (:meth:`reset` says when it is over).
        """
        self.current_s = min(self.max_s, self.current_s * 2 or self.first_s)
        self.failures += 1
        if self.failures == 1:
            logger.warning("%s; retrying in %.1fs, then quietly until it answers", reason, self.current_s)
        else:
            logger.debug("%s; retrying in %.1fs (attempt %d)", reason, self.current_s, self.failures)
        deadline = time.monotonic() + self.current_s
        while (remaining := deadline - time.monotonic()) > 0:
            if stop is not None and stop():
                return
            time.sleep(min(self.slice_s, remaining))

    def reset(self) -> None:
        """The last attempt succeeded: the next failure waits *first_s* again."""
        if self.failures:
            logger.info("backends reachable again after %d failed attempt(s)", self.failures)
        self.current_s = 0.0
        self.failures = 0


#: Redis error replies that say "not now" rather than "never": the work is retried after a back-off.
#: Not ``OOM`` (:func:`is_out_of_memory`): waiting does not make the work fit, so the whole cluster
#: backed off behind one request too large for maxmemory; the caller refuses the work instead.
_TRANSIENT_REPLIES = ("LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY", "NOREPLICAS", "NOSCRIPT")

#: redis-py's cluster client reading the slot map while a primary fails over: no node answered, the
#: nodes disagreed on the owners, or the slots it read did not cover every slot. It is no
#: ``RedisError``, so a caller that catches only those would let it escape (a crawler's finish lost,
#: its leases left to expire). Other ``RedisClusterException``\ s are bugs or wrong settings.
_TRANSIENT_CLUSTER = (
    "Redis Cluster cannot be connected",
    "startup_nodes could not agree",
    "All slots are not covered",
)


def is_cluster_transient(exc: BaseException) -> bool:
    """True if *exc* is redis-py's cluster client failing to read the slot map during a failover
    (see ``_TRANSIENT_CLUSTER``), or a slot not covered (yet) by the map it read."""
    if isinstance(exc, SlotNotCoveredError):
        return True
    return isinstance(exc, RedisClusterException) and str(exc).startswith(_TRANSIENT_CLUSTER)


def is_out_of_memory(exc: BaseException) -> bool:
    """True if Redis refused a write because it reached ``maxmemory`` (an ``OOM`` reply, however
    redis-py reports it: its own exception, a pipeline's command, a ``MULTI`` it aborted, a script)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OutOfMemoryError):
            return True
        if isinstance(current, ResponseError):
            text = str(current)
            if text.startswith("OOM") or "used memory > 'maxmemory'" in text:
                return True
        current = current.__cause__ or current.__context__
    return False


def is_transient(exc: BaseException) -> bool:
    """True if *exc* means a backend is unreachable or busy, so retrying later can succeed.

    Connection failures, time-outs and busy, loading or read-only replies are. Other Redis errors
    are not (an error reply such as ``WRONGTYPE`` or a failing script, a value redis-py cannot
    encode): retrying would fail forever, so the caller reports the work concerned instead. Nor is
    out of memory (:func:`is_out_of_memory`): the work that needs the memory is refused (the
    kafka-monitor retries a batch once, then dead-letters its records).
    """
    if is_out_of_memory(exc):
        return False
    if isinstance(exc, BackendUnavailable | KafkaError | OSError):
        return True
    if isinstance(exc, RedisConnectionError | RedisTimeoutError | BusyLoadingError | ReadOnlyError):
        return True
    if isinstance(exc, ResponseError):
        return str(exc).startswith(_TRANSIENT_REPLIES)
    return is_cluster_transient(exc)


#: librdkafka's and the broker's names of a commit refused because the consumer is no longer a
#: member of its group (kafka-python raises the classes of :func:`lost_membership` for them).
_LOST_MEMBERSHIP = ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS", "_MAX_POLL_EXCEEDED")


def lost_membership(exc: BaseException) -> bool:
    """True if *exc* says the consumer had left (or been evicted from) its group: the broker is
    fine; a batch took longer than the poll interval, or the group rebalanced meanwhile."""
    if isinstance(exc, CommitFailedError | UnknownMemberIdError | IllegalGenerationError | RebalanceInProgressError):
        return True
    return isinstance(exc, KafkaError) and any(str(arg).startswith(_LOST_MEMBERSHIP) for arg in exc.args[:1])


def describe_failure(exc: BaseException, settings: Settings | None = None, poll_setting: str | None = None) -> str:
    """A one-line description of a backend failure that names the setting (and value) to check;
    *poll_setting*: the setting of the caller's poll interval, named when it lost its group."""
    if isinstance(exc, BackendUnavailable):
        return str(exc)  # already names the setting
    if lost_membership(exc):
        name = poll_setting or "KAFKA_MAX_POLL_INTERVAL_MS"
        limit = f" ({settings.get(name)} ms)" if settings is not None and settings.get(name) is not None else ""
        return (
            f"this consumer had left its Kafka group when it committed ({exc!r:.200}): one batch took longer "
            f"than {name}{limit}, or the group rebalanced meanwhile; nothing uncommitted is lost (it is read again)"
        )
    if isinstance(exc, RedisError) and is_out_of_memory(exc):
        where = f" ({mask_url(settings.REDIS_URL)})" if settings is not None else ""
        return f"Redis is out of memory (maxmemory reached); raise maxmemory or free memory on REDIS_URL{where}"
    if isinstance(exc, RedisError) or is_cluster_transient(exc):
        where = f" ({mask_url(settings.REDIS_URL)})" if settings is not None else ""
        return f"Redis failed ({exc!r}); check REDIS_URL{where}"
    if isinstance(exc, KafkaError | OSError):
        where = f" ({','.join(settings.KAFKA_BOOTSTRAP_SERVERS)})" if settings is not None else ""
        return f"Kafka failed ({exc!r}); check KAFKA_BOOTSTRAP_SERVERS{where}"
    return str(exc) or repr(exc)


class Stoppable(Protocol):
    """A worker with a stop flag that its loop checks between iterations."""

    stopping: bool


def install_stop_handlers(worker: Stoppable, what: str = "the current work") -> None:
    """First SIGINT/SIGTERM sets ``worker.stopping`` (finish *what*, then stop); the second raises
    :class:`ForcedShutdown` in the main thread. Call from the main thread only."""

    def handler(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if worker.stopping:
            raise ForcedShutdown(f"second {name}: stopping without finishing {what}")
        logger.info("%s received: stopping after %s (send it again to force)", name, what)
        worker.stopping = True

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


__all__ = [
    "Backoff",
    "ClusterGone",
    "Outage",
    "cluster_gone",
    "ForcedShutdown",
    "Stoppable",
    "describe_failure",
    "install_stop_handlers",
    "is_cluster_transient",
    "is_out_of_memory",
    "is_transient",
    "lost_membership",
]
