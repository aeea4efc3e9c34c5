"""The sink as a process kind: its command-line options and its run (docs/contract.md §20.1).

Its kind (``sink/kind.py``) names :func:`run` as the entry; ``crawlhive up --sink URL`` starts one
sink per URL, with SINK_URL set to it.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings


def run(settings: Settings, args: argparse.Namespace | None = None) -> int:
    """Run one sink until SIGINT/SIGTERM: 0 after a graceful stop, 1 when forced.

    Raises:
        SettingsError: no SINK_URL, or one no store handles.
    """
    from crawlhive.sink.worker import Sink
    from crawlhive.utils.process.loop import ForcedShutdown

    worker = Sink.from_settings(settings)
    worker.install_signal_handlers()
    try:
        worker.run()
    except ForcedShutdown as exc:
        print(f"crawlhive sink: {exc}", file=sys.stderr)
        return 1
    return 0
