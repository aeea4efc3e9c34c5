"""Compaction of Bloom seen-sets (docs/contract.md §3.8): seal their fingerprint logs into
FRONTIER_TAIL_URL and rebuild each filter at about 1.9 bytes per URL as it grows, on a thread of
this redis-monitor's own (:class:`~crawlhive.utils.frontier.bloom_compactor.BloomCompactor`): a
rebuild takes seconds on a large filter, and neither control answers nor the tail mover's refills
wait for it. Several redis-monitors compact side by side: a filter's lock keeps them apart.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Self

from crawlhive.redis_monitor.plugins import ThreadPlugin
from crawlhive.utils.config.errors import NotConfigured
from crawlhive.utils.frontier.bloom_compactor import BloomCompactor

if TYPE_CHECKING:
    from crawlhive.redis_monitor.monitor import RedisMonitor


class BloomCompaction(ThreadPlugin):
    """Runs the Bloom compactor while the redis-monitor runs (off without FRONTIER_TAIL_URL or
    with DUPEFILTER_BLOOM_ABOVE 0)."""

    name = "BloomCompaction"
    thread_name = "bloom-compaction"
    join_s = 30.0

    def __init__(self, compactor: BloomCompactor) -> None:
        super().__init__()
        self.compactor = compactor

    @classmethod
    def from_monitor(cls, monitor: RedisMonitor) -> Self:
        compactor = BloomCompactor.from_settings(monitor.redis, monitor.settings)
        if compactor is None:
            raise NotConfigured("FRONTIER_TAIL_URL is empty or DUPEFILTER_BLOOM_ABOVE is 0: no Bloom compaction")
        return cls(compactor)

    def run(self, stop: threading.Event) -> None:
        self.compactor.run(stop)
