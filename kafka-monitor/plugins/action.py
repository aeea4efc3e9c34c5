"""Action requests (docs/contract.md §2.3): info and stop, handed to the redis-monitor."""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from crawlhive.kafka_monitor.plugins import Incoming, IncomingPlugin
from crawlhive.utils.contract.messages import ActionRequest
from crawlhive.utils.state.control import ControlQueue

if TYPE_CHECKING:
    from crawlhive.kafka_monitor.monitor import KafkaMonitor
    from crawlhive.utils.backends.redis_types import RedisPipeline


class ControlHandler(IncomingPlugin):
    """Base of the plugins whose requests the redis-monitor answers: each request becomes one entry
    of the control stream, so two concurrent requests (even for the same crawl) are both answered."""

    def __init__(self, control: ControlQueue) -> None:
        self.control = control

    @classmethod
    def from_monitor(cls, monitor: KafkaMonitor) -> Self:
        return cls(ControlQueue.from_settings(monitor.redis, monitor.settings))

    def handle(self, requests: list[Incoming], pipe: RedisPipeline) -> None:
        for request in requests:
            self.control.submit(pipe, self.kind, request.message, request.origin)


class ActionHandler(ActionRequest, ControlHandler):
    """info and stop."""
