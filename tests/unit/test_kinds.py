"""The registry of process kinds (crawlhive.utils.process.kinds): a kind declared once in a package of its own
and registered as an entry point shows up everywhere the application lists processes.

The kind is the example of docs/extending.md, installed as Python installs any distribution: a
package and a ``.dist-info`` with its ``entry_points.txt`` on the path (no crawlhive file edited;
``support.kinds``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from support.kinds import install_example

from crawlhive.app.plan import up_arguments, up_plan
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.process import kinds as registry

BUILTIN = ["kafka-monitor", "redis-monitor", "crawler", "cleaner", "sink", "rest"]


@pytest.fixture
def hello_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The docs' example kind installed on the path (and on PYTHONPATH for child processes)."""
    install_example(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.kinds.cache_clear()
    yield tmp_path
    registry.kinds.cache_clear()


def test_the_built_in_kinds_are_registered_in_order() -> None:
    assert [k.name for k in registry.kinds()] == BUILTIN
    assert registry.heartbeat_components() == tuple(BUILTIN)
    assert registry.stats_types() == (
        "all",
        *BUILTIN,
        "spider",
        "machine",
        "queue",
        "proxies",
        "fetch",
    )  # the crawler's view
    plan = up_plan()
    assert [(p.name, p.argv) for p in plan] == [
        ("kafka-monitor", ["kafka-monitor"]),
        ("redis-monitor", ["redis-monitor"]),
        ("crawler-1", ["crawler", "--spider", "link"]),
        ("cleaner-1", ["cleaner"]),
        ("rest", ["rest"]),
    ]
    plan = up_plan({"crawlers": 2, "render_crawlers": 1, "cleaners": 0})
    assert [p.name for p in plan] == [
        "kafka-monitor",
        "redis-monitor",
        "crawler-1",
        "crawler-2",
        "crawler-render-1",
        "rest",
    ]
    assert plan[4].argv == ["crawler", "--spider", "link", "--render"]


def test_up_starts_one_process_per_value_of_an_each_option_with_the_value_in_its_environment() -> None:
    """``up --sink URL`` (an :attr:`UpGroup.each` option): one sink per URL, SINK_URL in its
    environment, nothing on its command line (other users can read command lines)."""
    from crawlhive.app.cli import build_parser

    args = build_parser().parse_args(["up", "--sink", "postgresql://u:pw@db/x", "--sink", "file:///tmp/p/"])
    counts, forwarded, values = up_arguments(args)
    assert values == {"sink": ["postgresql://u:pw@db/x", "file:///tmp/p/"]}
    sinks = [p for p in up_plan(counts, forwarded, values) if p.kind == "sink"]
    assert [(p.name, p.argv, p.env) for p in sinks] == [
        ("sink-1", ["sink"], {"SINK_URL": "postgresql://u:pw@db/x"}),
        ("sink-2", ["sink"], {"SINK_URL": "file:///tmp/p/"}),
    ]
    assert not [p for p in up_plan() if p.kind == "sink"]  # none unless asked for


def test_a_kind_of_a_package_of_its_own_shows_up_in_help_up_stats_and_the_dashboard(
    hello_kind: Path, redis_client: redis.Redis, redis_settings: Settings
) -> None:
    assert registry.kind_named("hello-sink").up
    assert [k.name for k in registry.kinds()] == [*BUILTIN[:4], "hello-sink", "sink", "rest"]  # order 50

    # crawlhive --help, and the subcommand itself, in a process of its own
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hello_kind), os.environ.get("PYTHONPATH", "")])}
    cli = [sys.executable, "-m", "crawlhive.app.cli"]
    shown = subprocess.run([*cli, "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"^\s+hello-sink\s+run one hello sink", shown.stdout, re.M), shown.stdout
    ran = subprocess.run(
        [*cli, "hello-sink", "--to", "http://a/", "--to", "http://b/", "--set", "KAFKA_TOPIC_PREFIX=hi"],
        env={**env, "CRAWLHIVE_HOME": str(hello_kind / "home")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "hello from ['http://a/', 'http://b/'] via hi\n"

    # up's options and plan: none by default, N when asked, the forwarded options on each
    from crawlhive.app.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["up", "--hello-sinks", "2", "--to", "http://a/", "--to", "http://b/"])
    assert args.hello_sinks == 2
    assert "hello-sink" not in [p.kind for p in up_plan()]
    counts, forwarded, _ = up_arguments(args)
    plan = up_plan(counts, forwarded)
    sinks = [(p.name, p.argv) for p in plan if p.kind == "hello-sink"]
    argv = ["hello-sink", "--to", "http://a/", "--to", "http://b/"]
    assert sinks == [("hello-sink-1", argv), ("hello-sink-2", argv)]
    assert isinstance(parser.parse_args(argv), argparse.Namespace)

    # stats: a type of its own (the schema accepts it) and part of `all`
    from crawlhive.redis_monitor.plugins.stats import StatsMonitor
    from crawlhive.utils.contract.validation import Accepted
    from crawlhive.utils.frontier import FrontierReader
    from crawlhive.utils.process.intake import request_validator
    from crawlhive.utils.process.views import ViewContext
    from crawlhive.utils.state.heartbeat import Heartbeat, new_node_id
    from crawlhive.utils.state.stats import Stats

    assert "hello-sink" in registry.stats_types()
    assert registry.stats_types()[-1] == "greetings"  # its view's further type, after the built-in ones
    validator = request_validator(redis_settings)
    assert isinstance(validator.validate({"stats": "hello-sink", "appid": "app", "uuid": "u1"}), Accepted)
    keys = keys_from_settings(redis_settings)
    stats = Stats(redis_client, keys, [60])
    stats.incr_many([("hello-sink", "total", 3)])
    beat = Heartbeat(redis_client, keys, "hello-sink", new_node_id(), "host-1", timeout_s=30)
    beat.beat()
    context = ViewContext(redis_client, keys, stats, FrontierReader(redis_client, keys, 3600), frozenset({200}))
    monitor = StatsMonitor(context)
    body = monitor.body("all")
    assert list(body) == [*BUILTIN[:4], "hello-sink", "sink", "rest"]
    assert body["hello-sink"]["total"] == {"60": 3, "lifetime": 3}
    assert sum(len(ids) for ids in body["hello-sink"]["nodes"].values()) == 1
    (answer,) = monitor.handle("stats", {"stats": "hello-sink", "appid": "app", "uuid": "u1"})
    assert answer.message["total"] == {"60": 3, "lifetime": 3}
    stats.incr("hello-sink", "greetings", 2)
    assert monitor.body("greetings") == {"greetings": {"60": 2, "lifetime": 2}}  # its view's own type

    # the dashboard's node cards and /metrics' crawlhive_nodes
    from crawlhive.rest.cluster import ClusterView
    from crawlhive.rest.dashboard import card_label
    from crawlhive.rest.metrics import ClusterCollector

    nodes = ClusterView(redis_client, redis_settings, {}).nodes()
    assert list(nodes) == [*BUILTIN[:4], "hello-sink", "sink", "rest"]
    assert sum(len(ids) for ids in nodes["hello-sink"].values()) == 1
    assert card_label("hello-sink") == "hello-sink"
    metrics = {
        sample.labels["component"]: sample.value
        for family in ClusterCollector(ClusterView(redis_client, redis_settings, {})).collect()
        if family.name == "crawlhive_nodes"
        for sample in family.samples
    }
    assert metrics["hello-sink"] == 1
    json.dumps(body)  # the answer is JSON as it is


def test_views_load_by_their_dotted_paths_without_the_services_heavy_imports() -> None:
    """The redis-monitor and REST load every kind's view (a stats request, a scrape): a view reads
    Redis only, so loading them all imports no Scrapy, Kafka client or browser; and listing the
    kinds (``crawlhive --help``) loads no view at all."""
    probe = """
import sys
from crawlhive.utils.process import kinds, views
kinds.kinds()
assert "crawlhive.utils.process.views" in sys.modules  # imported above, by this probe
assert not [m for m in sys.modules if m.endswith(".view") and m.startswith("crawlhive.")], "a view loaded early"
loaded = {k.name: views.view_class(k.name).__name__ for k in kinds.kinds()}
print(loaded)
roots = ("scrapy", "twisted", "kafka", "confluent_kafka", "playwright")
heavy = sorted(m for m in sys.modules if m.split(".")[0] in roots)
print(heavy)
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded, heavy = done.stdout.splitlines()
    assert loaded == str(
        {
            "kafka-monitor": "KindView",  # names no view: the default
            "redis-monitor": "KindView",
            "crawler": "CrawlerView",
            "cleaner": "CleanerView",
            "sink": "SinkView",
            "rest": "RestView",
        }
    )
    assert heavy == "[]"


def test_a_view_that_does_not_load_names_its_kind_and_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind whose view path is wrong fails where the view is needed, saying which kind and path."""
    from dataclasses import replace

    from crawlhive.utils.config.errors import PluginLoadError
    from crawlhive.utils.process import views

    broken = replace(registry.kind_named("cleaner"), view="crawlhive.cleaner.view.NoSuchView")
    monkeypatch.setattr(registry, "kind_named", lambda name: broken)
    monkeypatch.setattr(views, "kind_named", lambda name: broken)
    with pytest.raises(PluginLoadError, match=r"process kind 'cleaner' \(crawlhive\.cleaner\.view\.NoSuchView\)"):
        views.view_class("cleaner")
