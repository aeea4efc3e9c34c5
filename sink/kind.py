"""The sink as a process kind (:mod:`crawlhive.utils.process.kinds`): ``crawlhive sink --to URL``, and
``crawlhive up --sink URL`` (one sink per URL, the URL in its SINK_URL: :attr:`UpGroup.each`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from crawlhive.utils.process.kinds import Option, ProcessKind, UpGroup

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Run one sink until SIGINT/SIGTERM (:func:`crawlhive.sink.main.run`, imported when it runs)."""
    from crawlhive.sink.main import run as run_sink

    return run_sink(settings, args)


KIND = ProcessKind(
    name="sink",
    summary="run one sink: cleaned (or another topic) -> PostgreSQL, files or WARC",
    epilog="""records of <prefix>.cleaned (or --from TOPIC) into a store, at least once: contract §20
examples:
  crawlhive sink --to 'postgresql://postgres@127.0.0.1:5432/test?table=pages'
  crawlhive sink --to file:///var/lib/crawlhive/pages/ --from cleaned
  crawlhive sink --to warc:///var/lib/crawlhive/warc/
  crawlhive up --sink 'postgresql://postgres@127.0.0.1:5432/test'   # one sink per --sink, with the rest""",
    entry=run,
    options=(
        Option(
            ("--to",),
            setting="SINK_URL",
            help="where to write: postgresql://…, file://…, warc://… (SINK_URL)",
            arguments={"metavar": "URL"},
        ),
        Option(
            ("--from",),
            setting="SINK_FROM",
            help="cleaned (default), crawled_firehose, items or a full topic name (SINK_FROM)",
            arguments={"dest": "source", "metavar": "TOPIC"},
        ),
        Option(
            ("--group",),
            setting="SINK_GROUP",
            help="consumer group (SINK_GROUP; default one per URL)",
            arguments={"metavar": "NAME"},
        ),
    ),
    order=60,
    up=(
        UpGroup(
            option="sink",
            default=0,
            each="SINK_URL",
            metavar="URL",
            help="also run a sink to URL (repeatable: one sink per URL; §20)",
        ),
    ),
    card="sinks",
    compose=("sink",),
    view="crawlhive.sink.view.SinkView",
)
