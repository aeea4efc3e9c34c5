"""Frontier tails (docs/contract.md §23): spill long crawl queues into FRONTIER_TAIL_URL and refill
their heads from it, on a thread of this redis-monitor's own (the mover's loop:
:class:`~crawlhive.utils.frontier.tail_mover.TailMover`), so neither control answers nor timers wait
for the store, and a refill follows the pop that asked for it within REDIS_MONITOR_TICK_S or less.
Several redis-monitors move tails side by side: every step is safe to run twice.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Self

from crawlhive.redis_monitor.plugins import MonitorPlugin
from crawlhive.utils.config.errors import NotConfigured
from crawlhive.utils.frontier.tail_mover import TailMover

if TYPE_CHECKING:
    from crawlhive.redis_monitor.monitor import RedisMonitor

logger = logging.getLogger(__name__)


class FrontierTails(MonitorPlugin):
    """Runs the tail mover while the redis-monitor runs (off without FRONTIER_TAIL_URL)."""

    name = "FrontierTails"
    tick_every = 1

    def __init__(self, mover: TailMover) -> None:
        self.mover = mover
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_monitor(cls, monitor: RedisMonitor) -> Self:
        mover = TailMover.from_settings(monitor.redis, monitor.settings)
        if mover is None:
            raise NotConfigured("FRONTIER_TAIL_URL is empty: queues keep no tails")
        return cls(mover)

    def tick(self) -> None:
        """Start the mover's thread, or start it again if it died."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(
                target=self.mover.run, args=(self._stop,), name="frontier-tails", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
