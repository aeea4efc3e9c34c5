"""The ``crawlhive`` command: one entry point for every part of the cluster (docs/contract.md §8.2).

Each subcommand parses its options, resolves the settings (defaults < state file < ``--settings``
< environment < options), configures logging once, and runs its component. Components are imported
lazily, so ``crawlhive feed`` does not import Scrapy. Only :func:`main` chooses an exit code.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

from crawlhive.app.plan import add_up_options, up_arguments
from crawlhive.app.signals import EXIT_FORCED, FORCED, Shutdown, install_shutdown_handlers
from crawlhive.app.state import with_state
from crawlhive.utils import __version__
from crawlhive.utils.config.errors import BackendUnavailable, CrawlhiveError, SettingsError
from crawlhive.utils.config.log import configure_logging, redact
from crawlhive.utils.config.settings import Settings, load_settings
from crawlhive.utils.contract.encoding import encode
from crawlhive.utils.contract.topics import TOPICS, is_short_topic
from crawlhive.utils.process.kinds import ProcessKind, kinds

logger = logging.getLogger(__name__)

#: Short topic names ``dump`` accepts without the prefix (plus ``crawled_<appid>`` / ``outbound_<appid>``).
SHORT_TOPICS = TOPICS

#: Seconds between two checks by ``dump`` that the broker still accepts connections, while idle.
DUMP_PROBE_S = 2.0

#: Exit codes of ``feed`` (docs/contract.md §8.2).
EXIT_OK, EXIT_INVALID, EXIT_KAFKA, EXIT_NO_ANSWER = 0, 1, 2, 3


# --- settings from options ---------------------------------------------------------------------


def _settings_from_args(args: argparse.Namespace, use_state_file: bool = True) -> Settings:
    cli: dict[str, Any] = {}
    for pair in args.set or []:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SettingsError(f"--set: expected NAME=VALUE, got {pair!r}")
        cli[name.strip().upper()] = value
    if args.log_level:
        cli["LOG_LEVEL"] = args.log_level
    if args.log_json:
        cli["LOG_JSON"] = True
    if args.log_file:
        cli["LOG_FILE"] = args.log_file
    for option, name in getattr(args, "setting_options", {}).items():
        value = getattr(args, option, None)
        if value is not None:
            cli[name] = value
    settings = load_settings(settings_file=args.settings, cli=cli)
    return with_state(settings) if use_state_file else settings


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--settings", metavar="FILE", help="Python file of UPPER_CASE = value settings")
    parser.add_argument("--log-level", metavar="LEVEL", help="DEBUG, INFO, WARNING, ERROR (LOG_LEVEL)")
    parser.add_argument("--log-json", action="store_true", help="log one JSON object per line (LOG_JSON)")
    parser.add_argument("--log-file", metavar="PATH", help="log to PATH instead of stderr (LOG_FILE)")
    parser.add_argument("--set", action="append", metavar="NAME=VALUE", help="override any setting (repeatable)")


# --- subcommands -------------------------------------------------------------------------------


def cmd_up(args: argparse.Namespace) -> int:
    """Run the whole cluster in the foreground; embedded Redis / broker when none is configured."""
    from crawlhive.app.up import run_cluster

    settings = _settings_from_args(args, use_state_file=False)
    counts, forwarded, values = up_arguments(args)
    return run_cluster(settings, counts=counts, duration_s=args.duration, forwarded=forwarded, values=values)


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the demo: the whole cluster, a bundled site, one crawl followed to its completion."""
    from crawlhive.app.demo import run_demo

    return run_demo(_settings_from_args(args, use_state_file=False), keep_running=args.keep_running)


def cmd_feed(args: argparse.Namespace) -> int:
    """Produce one request to ``<prefix>.incoming``; with ``--wait``, print the answer to its uuid.
    With ``--file``, one crawl request per line (:func:`cmd_feed_file`)."""
    from crawlhive.utils.backends.kafka_clients import make_producer

    settings = _settings_from_args(args)
    if args.file is not None:
        return cmd_feed_file(args, settings)
    if args.json is None:
        print("feed: give a request as JSON, or --file PATH (see crawlhive feed --help)", file=sys.stderr)
        return EXIT_INVALID
    try:
        request = json.loads(args.json)
    except ValueError as exc:
        print(_not_json(args.json, exc), file=sys.stderr)
        return EXIT_INVALID
    if not args.no_validate:
        cause = _validate(settings, request)
        if cause is not None:
            print(cause + _validated_with(settings), file=sys.stderr)  # already "Invalid request: <cause>"
            return EXIT_INVALID
    uuid = request.get("uuid") if isinstance(request, dict) else None
    waiting = args.wait is not None and isinstance(uuid, str)
    if args.wait is not None and not waiting:
        print("--wait ignored: the request has no uuid, so nothing answers it", file=sys.stderr)
    try:
        # Positioned at the end of the outbound topic before sending, so the answer cannot be missed.
        answers = _AnswerWatch.open(settings) if waiting else None
    except BackendUnavailable as exc:
        print(_kafka_problem(settings, exc), file=sys.stderr)
        return EXIT_KAFKA
    try:
        try:
            producer = make_producer(settings)
        except BackendUnavailable as exc:
            print(_kafka_problem(settings, exc), file=sys.stderr)
            return EXIT_KAFKA
        try:
            future = producer.send(settings.topic("incoming"), encode(request))
            try:
                future.get(timeout=settings.KAFKA_FEED_TIMEOUT)
            except Exception as exc:  # a missing ack: a KafkaError of some class, or a timeout
                print(
                    f"no ack from Kafka within KAFKA_FEED_TIMEOUT={settings.KAFKA_FEED_TIMEOUT}s: {exc}",
                    file=sys.stderr,
                )
                return EXIT_KAFKA
        finally:
            producer.close(timeout=2)
        print(f"sent to {settings.topic('incoming')}", file=sys.stderr)
        if answers is None:
            return EXIT_OK
        try:
            answer = answers.wait_for(str(uuid), args.wait)
        except Shutdown:
            print(f"interrupted while waiting for the answer to uuid {uuid!r}", file=sys.stderr)
            return EXIT_FORCED  # the request was sent; a script must not take this for an answer
        if answer is None:
            print(f"no answer to uuid {uuid!r} on {answers.topic} within {args.wait:g}s", file=sys.stderr)
            return EXIT_NO_ANSWER
        print(answer, flush=True)
        return EXIT_OK
    finally:
        if answers is not None:
            answers.close()


def _not_json(text: str, exc: ValueError) -> str:
    """What ``feed`` says of an argument that is not JSON; a bare URL gets the two ways to send it
    (with the URL itself when it is short enough to quote)."""
    url = text.strip()
    if not url.lower().startswith(("http://", "https://", "www.")):
        return f'invalid JSON: {exc} (a request is a JSON object, e.g. {{"url": …, "appid": …, "crawlid": …}})'
    quotable = len(url) <= 200 and url.isprintable() and "'" not in url
    shown = json.dumps(url if quotable else "http://…", ensure_ascii=False)
    request = f'{{"url": {shown}, "appid": "myapp", "crawlid": "c1"}}'
    return (
        "feed: expected a JSON request, got a bare URL; send a crawl request as a JSON object:\n"
        f"  crawlhive feed '{request}'\n"
        "or URLs one per line from a file (- for stdin):\n"
        "  crawlhive feed --file urls.txt --appid myapp --crawlid c1"
    )


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _kafka_problem(settings: Settings, exc: BackendUnavailable) -> str:
    """What a client command says when Kafka cannot be reached: that no ``crawlhive up`` runs, when
    the user set no address and none is recorded; else the failure, naming the setting."""
    from crawlhive.app.state import no_cluster_message

    return no_cluster_message(settings) or str(exc)


def _validated_with(settings: Settings) -> str:
    """`` (validated with the settings of the running crawlhive up: A=1, B=2)`` when some came from it."""
    from crawlhive.app.state import from_state

    names = from_state(settings)
    if not names:
        return ""
    # a pool's proxies carry their credentials: named, never shown
    listed = ", ".join(n if "PROXY_POOLS" in n else f"{n}={str(settings[n])[:40]}" for n in names)
    return f" (validated with the settings of the running crawlhive up: {listed})"


def cmd_feed_file(args: argparse.Namespace, settings: Settings) -> int:
    """``feed --file``: exit 0 when every line was sent, 1 when some were rejected (the rest were
    sent), 2 when Kafka did not acknowledge them all, 130 after Ctrl-C (docs/contract.md §14)."""
    from crawlhive.app.bulkfeed import feed_file, parse_fields

    if args.json is not None:
        print("feed: give either a request as JSON or --file, not both", file=sys.stderr)
        return EXIT_INVALID
    if not args.appid or not args.crawlid:
        print("feed --file: --appid and --crawlid are required (lines that set them win)", file=sys.stderr)
        return EXIT_INVALID
    defaults = {"appid": args.appid, "crawlid": args.crawlid, **parse_fields(args.set_field or [])}
    try:
        result = feed_file(settings, args.file, defaults, validate=not args.no_validate)
    except BackendUnavailable as exc:
        print(_kafka_problem(settings, exc), file=sys.stderr)
        return EXIT_KAFKA
    topic = settings.topic("incoming")
    summary = f"feed: {_count(result.sent, 'crawl request')} sent to {topic}"
    if result.rejected_count:
        summary += f"; {_count(result.rejected_count, 'line')} rejected (listed above)"
    if result.failed:
        error = result.first_error or "no answer"
        summary += f"; {result.failed:,} not acknowledged by Kafka ({error}; check KAFKA_BOOTSTRAP_SERVERS)"
    if result.interrupted:
        summary += "; interrupted: the rest of the file was not read"
    print(summary, file=sys.stderr, flush=True)
    if result.interrupted:
        return EXIT_FORCED
    if result.failed:
        return EXIT_KAFKA
    return EXIT_INVALID if result.rejected_count else EXIT_OK


class _AnswerWatch:
    """Reads ``<prefix>.outbound_firehose`` from its current end, looking for one uuid's answer."""

    def __init__(self, consumer: Any, topic: str) -> None:
        self.consumer = consumer
        self.topic = topic

    @classmethod
    def open(cls, settings: Settings) -> _AnswerWatch:
        """Assign every partition of the outbound topic (creating it if missing) at its end offset.

        Raises:
            BackendUnavailable: the broker cannot be reached; names KAFKA_BOOTSTRAP_SERVERS.
        """
        from crawlhive.utils.backends.kafka_clients import ensure_topics, make_consumer
        from crawlhive.utils.contract.kafka_errors import KafkaError, TopicPartition

        topic = settings.topic("outbound_firehose")
        ensure_topics(settings, [topic])
        consumer = make_consumer(settings, group_id=None)
        try:
            partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
            consumer.assign(partitions)
            consumer.seek_to_end(*partitions)
            for partition in partitions:  # resolve the end offsets now, not lazily after sending
                consumer.position(partition, timeout_ms=int(settings.KAFKA_FEED_TIMEOUT * 1000))
        except (KafkaError, ValueError) as exc:
            consumer.close()
            raise BackendUnavailable(f"cannot read {topic} ({exc!r}); check KAFKA_BOOTSTRAP_SERVERS") from exc
        return cls(consumer, topic)

    def wait_for(self, uuid: str, timeout_s: float) -> str | None:
        """The text of the first message whose ``uuid`` is *uuid*, or None after *timeout_s*."""
        deadline = time.monotonic() + timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            polled = self.consumer.poll(timeout_ms=max(1, int(min(remaining, 0.5) * 1000)))
            for records in polled.values():
                for record in records:
                    text = record.value.decode("utf-8", errors="replace")
                    try:
                        message = json.loads(text)
                    except ValueError:
                        continue
                    if isinstance(message, dict) and message.get("uuid") == uuid:
                        return str(text)
        return None

    def close(self) -> None:
        self.consumer.close()


def _validate(settings: Settings, request: Any) -> str | None:
    """Why the kafka-monitor would reject *request* (same schemas, checks and limits), or None."""
    from crawlhive.utils.contract.validation import Rejected
    from crawlhive.utils.process.intake import request_validator

    outcome = request_validator(settings).validate(request)
    return outcome.reason if isinstance(outcome, Rejected) else None


def resolve_topic(settings: Settings, name: str) -> str:
    """``incoming`` -> ``<prefix>.incoming``; a full name is kept."""
    if is_short_topic(name):
        return settings.topic(name)
    return name


def format_record(value: bytes, args: argparse.Namespace, blobs: Any = None) -> str:
    """One dumped record as ``dump`` prints it (JSON per line, or the raw text if not JSON); a
    body by reference (§20.5) is read from *blobs* (a BlobStore) unless bodies are left out; a
    spider item by reference (``item_ref``) always."""
    text = value.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        return text
    by_reference = isinstance(data, dict) and (
        (not args.no_body and data.get("body_ref") is not None) or data.get("item_ref") is not None
    )
    if by_reference and blobs is not None:
        from crawlhive.utils.backends.blobs import BlobError

        try:
            data = blobs.resolve(data)
        except BlobError as exc:
            print(f"dump: {exc}", file=sys.stderr)
    if isinstance(data, dict):
        if args.decode_base64 and isinstance(data.get("body"), str):
            raw = base64.b64decode(data["body"])
            data["body"] = raw.decode(data.get("encoding") or "utf-8", errors="replace")
        if args.no_body:
            data.pop("body", None)
        if args.just_body:
            body = data.get("body")
            return body if isinstance(body, str) else json.dumps(body)
    return json.dumps(data, indent=2 if args.pretty else None, ensure_ascii=False)


def cmd_dump(args: argparse.Namespace) -> int:
    """Print the messages of a topic, one JSON per line, until interrupted or ``-n`` reached.

    Raises:
        ClusterGone: the ``crawlhive up`` whose broker it read has exited (exit 1, one line).
    """
    from crawlhive.utils.backends.blobs import BlobStore
    from crawlhive.utils.backends.kafka_clients import make_consumer, probe_kafka
    from crawlhive.utils.process.loop import Outage

    settings = _settings_from_args(args)
    blobs = BlobStore.from_settings(settings)  # bodies of large pages (§20.5)
    topic = resolve_topic(settings, args.topic)
    try:
        consumer = make_consumer(
            settings, group_id=args.group, auto_offset_reset="earliest" if args.from_beginning else "latest"
        )
    except BackendUnavailable as exc:
        print(_kafka_problem(settings, exc), file=sys.stderr)
        return EXIT_KAFKA
    try:
        missing = _missing_topic(settings, consumer, topic)  # before subscribing: no auto-creation
        if missing is None:
            consumer.subscribe([topic])
    except BaseException:
        consumer.close()
        raise
    if missing is not None:
        consumer.close()
        print(missing, file=sys.stderr)
        return EXIT_INVALID
    if sys.stderr.isatty():  # a person waiting at a terminal; a script reads stdout only
        print(f"dump: waiting for records on {topic} (Ctrl-C to quit)", file=sys.stderr, flush=True)
    printed = 0
    # librdkafka retries a lost broker by itself and says nothing we show; a TCP probe while no
    # record comes tells a passing outage (one WARNING) from a cluster gone for good (exit 1).
    outage = Outage(settings, logger)
    next_probe = time.monotonic() + DUMP_PROBE_S
    try:
        while args.max_messages is None or printed < args.max_messages:
            polled = consumer.poll(timeout_ms=500)
            if polled or time.monotonic() >= next_probe:
                try:
                    if not polled:
                        probe_kafka(settings)
                    outage.recovered()
                except BackendUnavailable as exc:
                    outage.failed(str(exc))  # raises ClusterGone when the `up` it used has exited
                next_probe = time.monotonic() + DUMP_PROBE_S
            for records in polled.values():
                for record in records:
                    print(format_record(record.value, args, blobs), flush=True)
                    printed += 1
                    if args.max_messages is not None and printed >= args.max_messages:
                        break
                if args.max_messages is not None and printed >= args.max_messages:
                    break
            if args.group:
                consumer.commit()
    finally:
        consumer.close(autocommit=False, timeout_ms=2000)
    return EXIT_OK


def _missing_topic(settings: Settings, consumer: Any, topic: str) -> str | None:
    """Why ``dump`` cannot read *topic* (it does not exist on the broker), or None.

    Per-appid topics (``crawled_<appid>``, ``items_<appid>``, ``outbound_<appid>``) are created with
    their first record, so the message says so; the others are created by ``crawlhive up`` and the
    components at start-up.
    """
    from crawlhive.utils.contract.kafka_errors import KafkaError

    try:
        existing = consumer.topics()
    except KafkaError as exc:
        raise BackendUnavailable(f"cannot list the topics ({exc!r}); check KAFKA_BOOTSTRAP_SERVERS") from exc
    if topic in existing:
        return None
    prefix = f"{settings.KAFKA_TOPIC_PREFIX}."
    ours = sorted(t.removeprefix(prefix) for t in existing if t.startswith(prefix))
    known = f"; topics of prefix {prefix[:-1]!r}: {', '.join(ours)}" if ours else f"; no topic has prefix {prefix!r}"
    later = ""
    if topic.startswith(tuple(f"{prefix}{kind}_" for kind in ("crawled", "items", "outbound"))):
        later = " (a per-appid topic exists once its first record was sent; KAFKA_APPID_TOPICS)"
    servers = ",".join(settings.KAFKA_BOOTSTRAP_SERVERS)
    return f"dump: no topic {topic} on {servers}{later}{known}"


def cmd_kind(args: argparse.Namespace) -> int:
    """Run one process of a registered kind (:mod:`crawlhive.utils.process.kinds`) with its settings."""
    kind: ProcessKind = args.kind
    settings = _settings_from_args(args)
    from crawlhive.utils.backends import tracing

    tracing.configure(kind.name)  # the standard OTEL_* variables: off unless they ask (§26.3)
    try:
        return kind.entry(settings, args)
    finally:
        tracing.shutdown()  # the spans still batched are exported before the process exits


# --- parser and main ---------------------------------------------------------------------------


#: ``--help`` examples (docs/contract.md §17.8) of the subcommands that are not process kinds (each
#: kind brings its own: :attr:`~crawlhive.utils.process.kinds.ProcessKind.epilog`).
EXAMPLES = {
    "up": """examples:
  crawlhive up                      # everything on this machine, private Redis and broker
  crawlhive up --crawlers 4         # four link crawlers
  crawlhive up --cleaners 2         # two cleaners (docs/contract.md §13)
  crawlhive up --render-crawlers 1  # one rendering crawler (headless Chromium, §15)
  REDIS_URL=redis://db:6379/0 KAFKA_BOOTSTRAP_SERVERS=kafka:9092 crawlhive up""",
    "demo": """examples:
  crawlhive demo                    # crawl a bundled site, print a summary, stop
  crawlhive demo --keep-running     # then keep the cluster up to explore the dashboard""",
    "feed": """request kinds (the required fields; docs/contract.md §2):
  crawl          url, appid, crawlid
  action         action ("info" or "stop"), appid, uuid, spiderid (+ crawlid for one crawl)
  stats          stats ("kafka-monitor", "redis-monitor", "crawler", "spider", "machine",
                 "queue", "rest", "proxies", "sink" or "all"), appid, uuid
  domain-config  action ("domain-update", "domain-remove", "blacklist-update",
                 "blacklist-remove"), domain, appid, uuid (+ hits, window for domain-update)

examples:
  crawlhive feed '{"url": "http://127.0.0.1:8000/", "appid": "tour", "crawlid": "c1", "maxdepth": 2}'
  crawlhive feed '{"action": "info", "appid": "tour", "crawlid": "c1", "spiderid": "link", "uuid": "i1"}' --wait 10
  crawlhive feed '{"stats": "queue", "appid": "tour", "uuid": "s1"}' --wait 10
  # one URL (or JSON crawl request) per line; exit 1 if a line was rejected:
  crawlhive feed --file urls.txt --appid tour --crawlid big1 --set-field maxdepth=1""",
    "dump": """order: each partition's records print in the order they were written, but a topic has several
partitions (KAFKA_TOPIC_PARTITIONS, 4 by default) and their records interleave as they arrive, so
an older record can print after a newer one (on outbound_firehose, a crawl's complete before
its last info answer, say). Sort by server_time (answers, notifications) or timestamp (pages)
when the order matters.

examples:
  crawlhive dump crawled_firehose -nb         # new crawled pages, without bodies
  crawlhive dump outbound_firehose -b -p      # every answer so far, indented
  crawlhive dump dead_letter -b -n 10""",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crawlhive",
        description="Distributed on-demand web crawling: Kafka in, Scrapy on Redis, Kafka out.",
        epilog="examples:\n  crawlhive demo\n  crawlhive up\n  crawlhive feed --help",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"crawlhive {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")

    def command(name: str, help_text: str, epilog: str | None = None) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=help_text,
            epilog=EXAMPLES[name] if epilog is None else epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    up = command("up", "run every component (embedded Redis and broker if none configured)")
    add_up_options(up)
    up.add_argument("--duration", type=float, default=None, metavar="SECONDS", help="stop after SECONDS")
    up.set_defaults(func=cmd_up)

    demo = command("demo", "run the cluster on a bundled demo site and show a crawl")
    demo.add_argument("--keep-running", action="store_true", help="stay up after the demo crawl")
    demo.set_defaults(func=cmd_demo)

    for kind in kinds():  # crawlhive kafka-monitor, crawler, cleaner, rest, …: one subcommand a kind
        runner = command(kind.name, kind.summary, kind.epilog)
        settings_of = {}
        for option in kind.options:
            dest = option.add_to(runner)
            if option.setting is not None:
                settings_of[dest] = option.setting
        runner.set_defaults(func=cmd_kind, kind=kind, setting_options=settings_of)

    feed = command("feed", "send one JSON request, or a file of crawl requests, to <prefix>.incoming")
    feed.add_argument("json", nargs="?", help="the request, as JSON (kinds below)")
    feed.add_argument(
        "--file", metavar="PATH", help="one crawl request per line: a URL or a JSON crawl request (- for stdin)"
    )
    feed.add_argument("--appid", help="with --file: the appid of every request")
    feed.add_argument("--crawlid", help="with --file: the crawlid of every request")
    feed.add_argument(
        "--set-field",
        action="append",
        metavar="NAME=JSON",
        help='with --file: a crawl field for every request, e.g. maxdepth=1 or allowed_domains=["a.com"]',
    )
    feed.add_argument(
        "--wait", type=float, metavar="SECONDS", help="print the outbound answer to the request's uuid (exit 3 if none)"
    )
    feed.add_argument("--no-validate", action="store_true", help="send without validating")
    feed.set_defaults(func=cmd_feed)

    dump = command("dump", "print the messages of a topic")
    dump.add_argument(
        "topic", help="full topic name, or incoming / crawled_firehose / items / outbound_firehose / dead_letter / …"
    )
    dump.add_argument("-b", "--from-beginning", action="store_true", help="start at the oldest message")
    dump.add_argument("-c", "--group", default=None, help="consumer group (commits its offsets)")
    dump.add_argument("-nb", "--no-body", action="store_true", help="leave out item bodies")
    dump.add_argument("-jb", "--just-body", action="store_true", help="print only item bodies")
    dump.add_argument("-p", "--pretty", action="store_true", help="indent the JSON")
    dump.add_argument("-d", "--decode-base64", action="store_true", help="decode base64 bodies")
    dump.add_argument("-n", "--max-messages", type=int, default=None, help="stop after N messages")
    dump.set_defaults(func=cmd_dump)

    for subparser in sub.choices.values():
        _common(subparser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; returns its exit code (0 after a graceful shutdown on SIGINT/SIGTERM)."""
    args = build_parser().parse_args(argv)
    secrets: list[str] = []
    try:
        # `up` and `demo` record a cluster; they never use another's (a second one refuses to start).
        settings = _settings_from_args(args, use_state_file=args.command not in ("up", "demo"))
        secrets = settings.secrets()
        configure_logging(
            settings.LOG_LEVEL,
            settings.LOG_JSON,
            settings.LOG_FILE,
            secrets=secrets,
            stop_signals=settings.LOG_STOP_SIGNALS,
        )
        install_shutdown_handlers()
        code = int(args.func(args))
        return EXIT_FORCED if FORCED.is_set() else code
    except Shutdown:
        return EXIT_FORCED if FORCED.is_set() else 0
    except (SettingsError, BackendUnavailable, CrawlhiveError) as exc:
        print(f"crawlhive {args.command}: {redact(str(exc), secrets)}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 1))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
