"""Ctrl-C and SIGTERM for the ``crawlhive`` commands (docs/contract.md §17.1).

The first SIGINT or SIGTERM raises :class:`Shutdown` in the main thread, so ``with`` blocks unwind
and stop what they started, in order (components first, embedded services last). A second one
during that shutdown forces it: :data:`FORCED` is set, the hooks registered with
:func:`on_forced_stop` run (``up`` kills its children at once), and the command exits with
:data:`EXIT_FORCED`.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

from crawlhive.utils.process.loop import Shutdown

__all__ = ["EXIT_FORCED", "FORCED", "Shutdown", "install_shutdown_handlers", "on_forced_stop"]


#: Exit code after a forced stop (a second Ctrl-C), as a shell reports a SIGINT death.
EXIT_FORCED = 130
#: Set by a second SIGINT/SIGTERM during the graceful shutdown.
FORCED = threading.Event()
#: Called (in the signal handler) on a second SIGINT/SIGTERM: stop everything now.
_force_hooks: list[Callable[[], None]] = []


def on_forced_stop(hook: Callable[[], None]) -> Callable[[], None]:
    """Run *hook* if a second Ctrl-C forces the stop; returns the function that unregisters it."""
    _force_hooks.append(hook)
    return lambda: _force_hooks.remove(hook) if hook in _force_hooks else None


def install_shutdown_handlers() -> None:
    """First SIGINT/SIGTERM raises :class:`Shutdown` (``with`` blocks unwind: a graceful stop); a
    second one sets :data:`FORCED` and runs the :func:`on_forced_stop` hooks (children killed at
    once), and the command then exits with EXIT_FORCED (docs/contract.md §17.1)."""

    def force(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        FORCED.set()
        print(f"crawlhive: second {signal.Signals(signum).name}: stopping now", file=sys.stderr, flush=True)
        for hook in reversed(_force_hooks):  # the last started first: components before their services
            hook()

    def graceful(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGINT, force)
        signal.signal(signal.SIGTERM, force)
        raise Shutdown(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, graceful)
    signal.signal(signal.SIGTERM, graceful)
