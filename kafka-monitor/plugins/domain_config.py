"""Domain-config requests (docs/contract.md §2.5): throttle and blacklist per domain, applied by redis-monitor."""

from __future__ import annotations

from crawlhive.kafka_monitor.plugins.action import ControlHandler
from crawlhive.utils.contract.messages import DomainConfigRequest


class DomainConfigHandler(DomainConfigRequest, ControlHandler):
    """domain-update, domain-remove, blacklist-update, blacklist-remove."""
