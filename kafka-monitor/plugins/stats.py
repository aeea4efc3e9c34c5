"""Stats requests (docs/contract.md §2.4), handed to the redis-monitor."""

from __future__ import annotations

from crawlhive.kafka_monitor.plugins.action import ControlHandler
from crawlhive.utils.contract.messages import StatsRequest


class StatsHandler(StatsRequest, ControlHandler):
    """Stats of one type, or all."""
