"""The monitors: the plugins of the kafka-monitor and the redis-monitor, and the redis-monitor's loop.

Part of :mod:`crawlhive.utils.config.defaults` (read its docstring first)."""

# ruff: noqa: E501

from typing import Any

PLUGINS: dict[str, Any] = {}
"""Plugins of the monitor being run, ``{"dotted.path.Class": rank or null}``, merged over its
built-ins (null removes one). Applied before the monitor's own map below."""

KAFKA_MONITOR_PLUGINS: dict[str, Any] = {}
"""kafka-monitor plugins, ``{"dotted.path.Class": rank or null}`` merged over the built-ins
(null removes one)."""

REDIS_MONITOR_PLUGINS: dict[str, Any] = {}
"""redis-monitor plugins, ``{"dotted.path.Class": rank or null}`` merged over the built-ins."""

REDIS_MONITOR_BLOCK_MS: int = 250
"""Milliseconds one read of the control stream may wait for a request (``XREADGROUP BLOCK``); also
bounds how late a timer-driven redis-monitor plugin runs. Must stay well under redis-py's 5 s
socket timeout."""

REDIS_MONITOR_BATCH: int = 100
"""Control requests one redis-monitor iteration reads and answers at most."""

REDIS_MONITOR_CLAIM_IDLE_S: float = 30.0
"""Seconds a control request may stay unanswered with one redis-monitor before another one takes
it over (its monitor died). Keep it above KAFKA_FEED_TIMEOUT: a live monitor renews what it holds."""

REDIS_MONITOR_MAX_ATTEMPTS: int = 3
"""Times a redis-monitor plugin may fail on one control request before the request is reported
(a dead letter with stage ``control``, or the plugin's error answer) instead of retried."""

REDIS_MONITOR_RETRY_S: float = 1.0
"""Seconds before a control request whose plugin failed is tried again."""

REDIS_MONITOR_TICK_S: float = 0.25
"""Seconds between two runs of the redis-monitor's timer-driven plugins (expiry timers, crawl
completion); the lease reaper runs every fourth tick."""

REDIS_MONITOR_EXPIRE_ENABLED: bool = True
"""Fire crawls' expiry timers (docs/contract.md §3.4) in this redis-monitor."""

REDIS_MONITOR_COMPLETE_ENABLED: bool = True
"""Emit ``complete`` events (docs/contract.md §3.12) from this redis-monitor."""

REDIS_MONITOR_REAPER_ENABLED: bool = True
"""Reclaim expired leases (crawlers that died) in this redis-monitor."""
