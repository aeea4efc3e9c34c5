"""Pieces every worker loop shares (STYLE.md §9): back-off, failure messages, stop signals.

Both monitors (and any other long-running component) loop on a stop flag, back off when Redis or
Kafka fails, log which setting to check, and stop gracefully on the first SIGINT/SIGTERM and at
once on the second. The loops differ; these pieces do not, so they live here once.
"""

from __future__ import annotations

import logging
import signal
import time
from types import FrameType
from typing import Protocol

from kafka.errors import KafkaError
from redis.exceptions import RedisError

from crawlhive.utils.errors import BackendUnavailable

logger = logging.getLogger(__name__)

#: Exceptions that mean "a backend is unreachable or failed": back off and retry, nothing is lost.
BACKEND_ERRORS: tuple[type[Exception], ...] = (RedisError, KafkaError, BackendUnavailable)


class ForcedShutdown(Exception):
    """Second SIGINT/SIGTERM: stop now, without finishing the current work (it is redelivered)."""


class Backoff:
    """Exponential back-off between failed iterations: *first_s* doubling to *max_s*, reset on success.

    Args:
        first_s: seconds of the first wait.
        max_s: longest wait.
    """

    def __init__(self, first_s: float = 0.5, max_s: float = 30.0) -> None:
        self.first_s, self.max_s = first_s, max_s
        self.current_s = 0.0

    def wait(self, reason: str) -> None:
        """Log *reason* with the coming delay (WARNING), then sleep it."""
        self.current_s = min(self.max_s, self.current_s * 2 or self.first_s)
        logger.warning("%s; retrying in %.1fs", reason, self.current_s)
        time.sleep(self.current_s)

    def reset(self) -> None:
        """The last iteration succeeded: the next failure waits *first_s* again."""
        self.current_s = 0.0


def describe_failure(exc: BaseException) -> str:
    """A one-line description of a backend failure that names the setting to check."""
    if isinstance(exc, RedisError):
        return f"Redis failed ({exc!r}); check REDIS_URL"
    if isinstance(exc, KafkaError):
        return f"Kafka failed ({exc!r}); check KAFKA_BOOTSTRAP_SERVERS"
    return str(exc) or repr(exc)


class Stoppable(Protocol):
    """A worker with a stop flag that its loop checks between iterations."""

    stopping: bool


def install_stop_handlers(worker: Stoppable, what: str = "the current work") -> None:
    """First SIGINT/SIGTERM sets ``worker.stopping`` (finish *what*, then stop); the second raises
    :class:`ForcedShutdown` in the main thread. Call from the main thread only."""

    def handler(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if worker.stopping:
            raise ForcedShutdown(name)
        logger.info("%s received: stopping after %s", name, what)
        worker.stopping = True

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


__all__ = ["BACKEND_ERRORS", "Backoff", "ForcedShutdown", "Stoppable", "describe_failure", "install_stop_handlers"]
