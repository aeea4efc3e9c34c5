"""kafka-monitor plugins: one per kind of incoming request (docs/contract.md §2.1).

A plugin class names its JSON Schema (a file beside its module), its kind and stats name, adds the
semantic checks of docs/contract.md §2.6, and, once built through ``from_monitor``, turns each accepted
request into Redis writes queued on the batch's pipeline. Validation uses only the class, so REST
and ``crawlhive feed`` validate without Redis.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar, Self

if TYPE_CHECKING:
    from redis.client import Pipeline

    from crawlhive.kafka_monitor.monitor import KafkaMonitor
    from crawlhive.utils.settings import Settings

#: Built-in plugins and their ranks (docs/contract.md §2.1); PLUGINS / KAFKA_MONITOR_PLUGINS merge over this.
BUILTIN_PLUGINS: dict[str, int] = {
    "crawlhive.kafka_monitor.plugins.crawl.ScraperHandler": 100,
    "crawlhive.kafka_monitor.plugins.action.ActionHandler": 200,
    "crawlhive.kafka_monitor.plugins.stats.StatsHandler": 300,
    "crawlhive.kafka_monitor.plugins.domain_config.DomainConfigHandler": 400,
}

#: (cause message, JSON pointer) of a failed semantic check; pointer '' means the root.
Cause = tuple[str, str]


@dataclass(frozen=True)
class Incoming:
    """One accepted request and where it came from.

    Attributes:
        message: the request with its schema defaults filled in.
        origin: ``"<topic>/<partition>/<offset>"``, unique per Kafka record; plugins derive
            idempotency ids from it so a redelivered record writes nothing twice.
    """

    message: dict[str, Any]
    origin: str


class IncomingPlugin(ABC):
    """Base of kafka-monitor plugins.

    Subclasses set :attr:`kind`, :attr:`name` and :attr:`schema_file`, may override
    :meth:`semantic_check`, and implement :meth:`from_monitor` and :meth:`handle`.
    """

    kind: ClassVar[str]
    """Kind used in rejection causes: ``crawl``, ``action``, ``stats`` or ``domain-config``."""
    name: ClassVar[str]
    """Name under which stats count the requests it handled (``ScraperHandler``)."""
    schema_file: ClassVar[str]
    """File name of its JSON Schema, in the package of the plugin's module."""

    @classmethod
    def load_schema(cls) -> dict[str, Any]:
        """The plugin's schema as written (limits still as ``"$SETTING"`` placeholders)."""
        return _read_schema(cls.__module__.rpartition(".")[0], cls.schema_file)

    @classmethod
    def semantic_check(cls, message: dict[str, Any]) -> tuple[dict[str, Any], Cause | None]:
        """Checks the schema cannot express (docs/contract.md §2.6), run on a schema-valid message.

        Returns:
            The message, possibly normalised (e.g. ``http://`` prepended), and None; or the
            message and the cause that rejects it.
        """
        return message, None

    @classmethod
    def limits_check(cls, message: dict[str, Any], settings: Settings) -> Cause | None:
        """Checks bounded by settings, run after :meth:`semantic_check` passed (the cause, or None).

        For checks that cost CPU or memory in proportion to the request (compiling its patterns), so
        the limit is the operator's (docs/contract.md §2.7).
        """
        return None

    @classmethod
    @abstractmethod
    def from_monitor(cls, monitor: KafkaMonitor) -> Self:
        """Build the plugin with what it needs from *monitor* (settings, keys, Redis)."""

    @abstractmethod
    def handle(self, requests: list[Incoming], pipe: Pipeline) -> None:
        """Queue the Redis writes of *requests* on *pipe*; the monitor executes it once per batch.

        Writes must be idempotent per ``Incoming.origin``: after a crash the same records are
        delivered again. Raising rejects the whole list to the dead-letter topic as an internal
        error; nothing of it may have been queued on *pipe* then.
        """


@cache
def _read_schema(package: str, file_name: str) -> dict[str, Any]:
    text = resources.files(package).joinpath(file_name).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
