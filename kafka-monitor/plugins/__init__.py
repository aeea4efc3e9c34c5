"""kafka-monitor plugins: one per kind of incoming request (docs/contract.md §2.1).

A plugin class is a message kind of the contract (:mod:`crawlhive.utils.contract.messages`: its
JSON Schema, its kind, the semantic checks of docs/contract.md §2.6) plus a stats name and, once
built through ``from_monitor``, the Redis writes each accepted request becomes, queued on the
batch's pipeline. Validation uses only the kind, so REST and ``crawlhive feed`` validate without
Redis and without the plugin modules: they read :data:`BUILTIN` (this module, light to import)
through its entry point, never a plugin's Redis writes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from crawlhive.utils.contract.messages import (
    ActionRequest,
    Cause,
    CrawlRequest,
    DomainConfigRequest,
    MessageKind,
    StatsRequest,
)

if TYPE_CHECKING:
    from crawlhive.kafka_monitor.monitor import KafkaMonitor
    from crawlhive.utils.backends.redis_types import RedisPipeline


#: The built-in plugins (docs/contract.md §2.1): class path -> rank, and the kind of the contract
#: each validates as. Published as the ``crawlhive.incoming`` entry point (pyproject.toml), so REST,
#: Redis-only mode and ``crawlhive feed`` validate as the kafka-monitor does without importing a
#: plugin module (:mod:`crawlhive.utils.process.intake`); PLUGINS / KAFKA_MONITOR_PLUGINS merge
#: over the ranks.
BUILTIN: dict[str, tuple[int, type[MessageKind]]] = {
    "crawlhive.kafka_monitor.plugins.crawl.ScraperHandler": (100, CrawlRequest),
    "crawlhive.kafka_monitor.plugins.action.ActionHandler": (200, ActionRequest),
    "crawlhive.kafka_monitor.plugins.stats.StatsHandler": (300, StatsRequest),
    "crawlhive.kafka_monitor.plugins.domain_config.DomainConfigHandler": (400, DomainConfigRequest),
}
#: The built-in plugins and their ranks, what the kafka-monitor loads them from.
BUILTIN_PLUGINS: dict[str, int] = {path: rank for path, (rank, _) in BUILTIN.items()}


@dataclass(frozen=True)
class Incoming:
    """One accepted request and where it came from.

    Attributes:
        message: the request with its schema defaults filled in.
        origin: ``"<topic>/<partition>/<offset>"``, unique per Kafka record; plugins derive
            idempotency ids from it so a redelivered record writes nothing twice.
        sent_ms: the Kafka record's timestamp (epoch ms, the producer's clock); 0 when unknown.
            A seed sent before its crawl's stop but read after it is not queued (§3.9).
        trace: the frontier ``trace`` of its seed while tracing is on (§26.3): the context of the
            kafka-monitor's span of the record; None while off.
    """

    message: dict[str, Any]
    origin: str
    sent_ms: int = 0
    trace: str | None = None


class IncomingPlugin(MessageKind, ABC):
    """Base of kafka-monitor plugins.

    Subclasses set :attr:`kind`, :attr:`name` and :attr:`schema_file` (or inherit them from a
    kind of the contract), may override :meth:`semantic_check`, and implement
    :meth:`from_monitor` and :meth:`handle`.
    """

    @classmethod
    @abstractmethod
    def from_monitor(cls, monitor: KafkaMonitor) -> Self:
        """Build the plugin with what it needs from *monitor* (settings, keys, Redis)."""

    @abstractmethod
    def handle(self, requests: list[Incoming], pipe: RedisPipeline) -> None:
        """Queue the Redis writes of *requests* on *pipe*; the monitor executes it once per batch.

        Writes must be idempotent per ``Incoming.origin``: after a crash the same records are
        delivered again. Raising rejects the whole list to the dead-letter topic as an internal
        error; nothing of it may have been queued on *pipe* then.
        """


__all__ = ["BUILTIN", "BUILTIN_PLUGINS", "Cause", "Incoming", "IncomingPlugin"]
