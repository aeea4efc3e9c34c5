"""The sink as a process kind (:mod:`crawlhive.utils.process.kinds`): ``crawlhive sink --to URL``, and
``crawlhive up --sink URL`` (one sink per URL, the URL in its SINK_URL: :attr:`UpGroup.each`)."""

from __future__ import annotations

from crawlhive.utils.process.kinds import Option, ProcessKind, UpGroup, worker_entry

KIND = ProcessKind(
    name="sink",
    summary="run one sink: cleaned (or another topic) -> PostgreSQL, files or WARC",
    epilog="""records of <prefix>.cleaned (or --from TOPIC) into a store, at least once: contract §20
examples:
  crawlhive sink --to 'postgresql://postgres@127.0.0.1:5432/test?table=pages'
  crawlhive sink --to file:///var/lib/crawlhive/pages/ --from cleaned
  crawlhive sink --to warc:///var/lib/crawlhive/warc/
  crawlhive up --sink 'postgresql://postgres@127.0.0.1:5432/test'   # one sink per --sink, with the rest""",
    entry=worker_entry("crawlhive.sink.worker.Sink", "sink"),
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
    consumes=("cleaned",),
    produces=("store", "dead_letter"),
    view="crawlhive.sink.view.SinkView",
)
