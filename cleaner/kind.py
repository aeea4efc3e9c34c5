"""The cleaner as a process kind (:mod:`crawlhive.utils.process.kinds`): ``crawlhive cleaner``, ``up --cleaners``."""

from __future__ import annotations

from crawlhive.utils.process.kinds import ProcessKind, UpGroup, worker_entry

KIND = ProcessKind(
    name="cleaner",
    summary="run one cleaner process: crawled_firehose -> cleaned",
    epilog="""crawled pages (<prefix>.crawled_firehose) -> clean records (<prefix>.cleaned): contract §13
examples:
  crawlhive cleaner                 # one more cleaner beside `crawlhive up` (they share the partitions)
  CLEANER_MASK_PII=false crawlhive cleaner""",
    entry=worker_entry("crawlhive.cleaner.cleaner.Cleaner", "cleaner"),
    order=40,
    up=(UpGroup(option="cleaners", default=1, help="cleaner processes (default 1; docs/contract.md §13)"),),
    compose=("cleaner",),
    consumes=("crawled_firehose",),
    produces=("cleaned", "dead_letter"),
    view="crawlhive.cleaner.view.CleanerView",
)
