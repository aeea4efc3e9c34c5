"""redis-monitor plugins: each answers one kind of control-stream entry and/or runs on a timer.

A plugin is built through ``from_monitor`` (raising :class:`~crawlhive.utils.config.errors.NotConfigured`
behind its ``*_ENABLED`` flag to opt out) and loaded by the shared loader
(:func:`crawlhive.utils.process.plugins.load_plugins`) from :data:`BUILTIN_PLUGINS` merged with the
settings ``PLUGINS`` and ``REDIS_MONITOR_PLUGINS``. The monitor hands each control entry to the
first plugin (in rank order) whose :meth:`MonitorPlugin.accepts` is true, produces what its
:meth:`MonitorPlugin.handle` returns, and acknowledges the entry only after Kafka acknowledged that.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self

from crawlhive.utils.contract.records import server_time as server_time

if TYPE_CHECKING:
    from crawlhive.redis_monitor.monitor import RedisMonitor

#: Built-in plugins and their ranks; PLUGINS / REDIS_MONITOR_PLUGINS merge over this (null removes).
BUILTIN_PLUGINS: dict[str, int] = {
    "crawlhive.redis_monitor.plugins.info.InfoMonitor": 100,
    "crawlhive.redis_monitor.plugins.stop.StopMonitor": 200,
    "crawlhive.redis_monitor.plugins.expire.ExpireMonitor": 300,
    "crawlhive.redis_monitor.plugins.stats.StatsMonitor": 400,
    "crawlhive.redis_monitor.plugins.domain_config.DomainConfigMonitor": 500,
    "crawlhive.redis_monitor.plugins.complete.CompleteMonitor": 600,
    "crawlhive.redis_monitor.plugins.reaper.LeaseReaper": 700,
    "crawlhive.redis_monitor.plugins.waiting.WaitingCrawls": 800,
    "crawlhive.redis_monitor.plugins.recrawl.RecrawlReleaser": 900,
    "crawlhive.redis_monitor.plugins.tails.FrontierTails": 1000,
    "crawlhive.redis_monitor.plugins.bloom.BloomCompaction": 1100,
}


@dataclass(frozen=True, slots=True)
class Outbound:
    """One message a plugin wants produced.

    Attributes:
        message: the JSON object to send.
        dead_letter: False: an answer or notification, sent to ``<prefix>.outbound_firehose`` (and
            ``<prefix>.outbound_<appid>`` with KAFKA_APPID_TOPICS, docs/contract.md §1); True: a dead letter,
            sent to ``<prefix>.dead_letter`` only.
    """

    message: dict[str, Any]
    dead_letter: bool = False


class MonitorPlugin(ABC):
    """Base of redis-monitor plugins.

    Subclasses set :attr:`name`, implement :meth:`from_monitor`, and either answer control entries
    (:meth:`accepts` and :meth:`handle`) or run on the monitor's timer (:attr:`tick_every` and
    :meth:`tick`), or both.
    """

    name: ClassVar[str]
    """Name under which stats count the entries it handled (``InfoMonitor``)."""
    tick_every: ClassVar[int] = 0
    """Run :meth:`tick` every this many REDIS_MONITOR_TICK_S; 0 = never."""

    @classmethod
    @abstractmethod
    def from_monitor(cls, monitor: RedisMonitor) -> Self:
        """Build the plugin from *monitor* (settings, Redis, keys). Raise NotConfigured to opt out."""

    def accepts(self, kind: str, request: dict[str, Any]) -> bool:
        """True if this plugin answers a control entry of *kind* with *request*."""
        return False

    def handle(self, kind: str, request: dict[str, Any]) -> list[Outbound]:
        """Act on one accepted entry and return what to produce (possibly nothing).

        Called again for the same entry only if it raised, or after a crash of the monitor before
        Kafka acknowledged the result, so effects should be idempotent or harmless to repeat.

        Raises:
            redis.RedisError: Redis failed; the monitor backs off and retries without counting it.
            Exception: anything else counts as a failed attempt (REDIS_MONITOR_MAX_ATTEMPTS).
        """
        raise NotImplementedError(f"{self.name} accepts entries but does not handle them")

    def failed(self, kind: str, request: dict[str, Any], error: str) -> list[Outbound] | None:
        """What to produce for an entry this plugin failed on REDIS_MONITOR_MAX_ATTEMPTS times.

        Returns:
            The messages to send instead of an answer, or None for the monitor's default: a dead
            letter with stage ``control``.
        """
        return None

    def close(self) -> None:
        """Stop what the plugin started (a thread of its own); called once when the monitor stops."""
        return None

    def tick(self) -> None:
        """Timer work (every :attr:`tick_every` ticks). Notifications it causes must be appended to
        the control stream (by the script that changes the state), not produced directly.

        Raises:
            redis.RedisError: Redis failed; the monitor backs off.
        """
        return None


class ThreadPlugin(MonitorPlugin):
    """A plugin whose work runs on a thread of its own (:meth:`run` until the event it is given is
    set), so neither control answers nor timers wait for it: each tick starts the thread, or starts
    it again if it died; :meth:`close` stops it."""

    tick_every = 1
    #: The thread's name.
    thread_name: ClassVar[str]
    #: Seconds :meth:`close` waits for the thread.
    join_s: ClassVar[float] = 10.0

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @abstractmethod
    def run(self, stop: threading.Event) -> None:
        """The thread's work, until *stop* is set."""

    def tick(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self.run, args=(self._stop,), name=self.thread_name, daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.join_s)
            self._thread = None
