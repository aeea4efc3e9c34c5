"""Domain-config requests (docs/contract.md §2.5): throttle and blacklist per domain, applied by redis-monitor."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawlhive.kafka_monitor.plugins import Cause
from crawlhive.kafka_monitor.plugins.action import ControlHandler
from crawlhive.utils.domains import domain_of_host, host_problem
from crawlhive.utils.log import excerpt
from crawlhive.utils.proxies import pools_from_settings

if TYPE_CHECKING:
    from crawlhive.utils.settings import Settings


class DomainConfigHandler(ControlHandler):
    """domain-update, domain-remove, blacklist-update, blacklist-remove."""

    kind = "domain-config"
    name = "DomainConfigHandler"
    schema_file = "domain_config.json"

    @classmethod
    def semantic_check(cls, message: dict[str, Any]) -> tuple[dict[str, Any], Cause | None]:
        raw = message["domain"]
        # Before any IDNA step: encoding a huge host costs the square of its length (1 MB: 4 s).
        problem = host_problem(raw)
        if problem is not None:
            return message, (problem, "/domain")
        domain = "" if any(c in raw for c in "/?#@ \t\r\n") else domain_of_host(raw)
        if not domain:
            return message, (f"{excerpt(raw)} is not a valid domain", "/domain")
        message["domain"] = domain
        return message, None

    @classmethod
    def limits_check(cls, message: dict[str, Any], settings: Settings) -> Cause | None:
        """A ``domain-update``'s ``proxy_pool`` is a pool in force (§21.1)."""
        if not message.get("proxy_pool"):
            return None
        if message.get("action") != "domain-update":
            return "proxy_pool belongs to domain-update only", "/proxy_pool"
        unknown = pools_from_settings(settings).unknown(message["proxy_pool"])
        return None if unknown is None else (unknown, "/proxy_pool")
