"""Stats requests (docs/contract.md §2.4), handed to the redis-monitor."""

from __future__ import annotations

from crawlhive.kafka_monitor.plugins.action import ControlHandler


class StatsHandler(ControlHandler):
    """Stats of one type, or all."""

    kind = "stats"
    name = "StatsHandler"
    schema_file = "stats.json"
