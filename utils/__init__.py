"""crawlhive's shared library: settings, logging, connections, Redis keys, queues, throttle, stats.

Every service (kafka-monitor, crawler, redis-monitor, rest) imports from here; nothing here imports
a service.
"""

from __future__ import annotations

__version__ = "0.1.0"
