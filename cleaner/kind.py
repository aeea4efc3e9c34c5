"""The cleaner as a process kind (:mod:`crawlhive.utils.kinds`): ``crawlhive cleaner``, ``up --cleaners``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from crawlhive.utils.kinds import ProcessKind, UpGroup

if TYPE_CHECKING:
    from crawlhive.utils.settings import Settings


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Run one cleaner until SIGINT/SIGTERM (0 after a graceful stop, 1 when forced)."""
    from crawlhive.cleaner.cleaner import Cleaner
    from crawlhive.utils.worker import run_until_stopped

    return run_until_stopped(Cleaner.from_settings(settings), "cleaner")


KIND = ProcessKind(
    name="cleaner",
    summary="run one cleaner process: crawled_firehose -> cleaned",
    epilog="""crawled pages (<prefix>.crawled_firehose) -> clean records (<prefix>.cleaned): contract §13
examples:
  crawlhive cleaner                 # one more cleaner beside `crawlhive up` (they share the partitions)
  CLEANER_MASK_PII=false crawlhive cleaner""",
    entry=run,
    order=40,
    up=(UpGroup(option="cleaners", default=1, help="cleaner processes (default 1; docs/contract.md §13)"),),
    compose=("cleaner",),
)
