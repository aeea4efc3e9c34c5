"""Frontier tails (docs/contract.md §23): spill long crawl queues into FRONTIER_TAIL_URL and refill
their heads from it, on a thread of this redis-monitor's own (the mover's loop:
:class:`~crawlhive.utils.frontier.tail_mover.TailMover`), so neither control answers nor timers wait
for the store, and a refill follows the pop that asked for it within REDIS_MONITOR_TICK_S or less.
Several redis-monitors move tails side by side: every step is safe to run twice.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Self

from crawlhive.redis_monitor.plugins import ThreadPlugin
from crawlhive.utils.config.errors import NotConfigured
from crawlhive.utils.frontier.tail_mover import TailMover

if TYPE_CHECKING:
    from crawlhive.redis_monitor.monitor import RedisMonitor


class FrontierTails(ThreadPlugin):
    """Runs the tail mover while the redis-monitor runs (off without FRONTIER_TAIL_URL)."""

    name = "FrontierTails"
    thread_name = "frontier-tails"

    def __init__(self, mover: TailMover) -> None:
        super().__init__()
        self.mover = mover

    @classmethod
    def from_monitor(cls, monitor: RedisMonitor) -> Self:
        mover = TailMover.from_settings(monitor.redis, monitor.settings)
        if mover is None:
            raise NotConfigured("FRONTIER_TAIL_URL is empty: queues keep no tails")
        return cls(mover)

    def run(self, stop: threading.Event) -> None:
        self.mover.run(stop)
