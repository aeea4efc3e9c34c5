"""The sink as a process kind: its command-line options and its run (docs/contract.md §20.1).

The ``crawlhive`` command registers it with :func:`add_arguments` and :func:`run`; ``crawlhive up
--sink URL`` starts one ``crawlhive sink --to URL`` per URL (:func:`up_commands`).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crawlhive.utils.settings import Settings

HELP = "run one sink process: cleaned (or --from TOPIC) -> PostgreSQL, files or WARC"
EXAMPLES = """records of a topic -> a store, committed only once stored: contract §20

examples:
  crawlhive sink --to 'postgresql://postgres@127.0.0.1:5432/test?table=pages'
  crawlhive sink --to file:///var/lib/crawlhive/pages/ --from cleaned
  crawlhive up --sink 'postgresql://postgres@127.0.0.1:5432/test'   # one sink per --sink, with the rest"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``crawlhive sink`` (each also a setting)."""
    parser.add_argument("--to", metavar="URL", help="where to write: postgresql://…, file://…, warc://… (SINK_URL)")
    parser.add_argument(
        "--from",
        dest="source",
        metavar="TOPIC",
        help="cleaned (default), crawled_firehose, items or a full topic name (SINK_FROM)",
    )
    parser.add_argument("--group", metavar="NAME", help="consumer group (SINK_GROUP; default one per URL)")
    parser.set_defaults(setting_options={"to": "SINK_URL", "source": "SINK_FROM", "group": "SINK_GROUP"})


def run(settings: Settings, args: argparse.Namespace | None = None) -> int:
    """Run one sink until SIGINT/SIGTERM: 0 after a graceful stop, 1 when forced.

    Raises:
        SettingsError: no SINK_URL, or one no store handles.
    """
    from crawlhive.sink.worker import Sink
    from crawlhive.utils.loop import ForcedShutdown

    worker = Sink.from_settings(settings)
    worker.install_signal_handlers()
    try:
        worker.run()
    except ForcedShutdown as exc:
        print(f"crawlhive sink: {exc}", file=sys.stderr)
        return 1
    return 0


def up_commands(urls: list[str]) -> list[tuple[str, list[str], dict[str, str]]]:
    """(name, crawlhive arguments, environment) of the sink processes ``crawlhive up --sink URL…``
    runs: the URL goes in SINK_URL, not on a command line other users can read."""
    return [(f"sink-{i + 1}", ["sink"], {"SINK_URL": url}) for i, url in enumerate(urls)]
