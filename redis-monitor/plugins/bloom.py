"""Compaction of Bloom seen-sets (docs/contract.md §3.8): seal their fingerprint logs into
FRONTIER_TAIL_URL and rebuild each filter at about 1.9 bytes per URL as it grows, on a thread of
this redis-monitor's own (:class:`~crawlhive.utils.frontier.bloom_compactor.BloomCompactor`): a
rebuild takes seconds on a large filter, and neither control answers nor the tail mover's refills
wait for it. Several redis-monitors compact side by side: a filter's lock keeps them apart.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Self

from crawlhive.redis_monitor.plugins import MonitorPlugin
from crawlhive.utils.config.errors import NotConfigured
from crawlhive.utils.frontier.bloom_compactor import BloomCompactor

if TYPE_CHECKING:
    from crawlhive.redis_monitor.monitor import RedisMonitor


class BloomCompaction(MonitorPlugin):
    """Runs the Bloom compactor while the redis-monitor runs (off without FRONTIER_TAIL_URL or
    with DUPEFILTER_BLOOM_ABOVE 0)."""

    name = "BloomCompaction"
    tick_every = 1

    def __init__(self, compactor: BloomCompactor) -> None:
        self.compactor = compactor
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_monitor(cls, monitor: RedisMonitor) -> Self:
        compactor = BloomCompactor.from_settings(monitor.redis, monitor.settings)
        if compactor is None:
            raise NotConfigured("FRONTIER_TAIL_URL is empty or DUPEFILTER_BLOOM_ABOVE is 0: no Bloom compaction")
        return cls(compactor)

    def tick(self) -> None:
        """Start the compactor's thread, or start it again if it died."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(
                target=self.compactor.run, args=(self._stop,), name="bloom-compaction", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
