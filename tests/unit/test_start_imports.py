"""What a process loads before it can start working (issue 50: a cleaner cleans within a second
and a half of its start): modules it never uses stay unloaded."""

from __future__ import annotations

import json
import subprocess
import sys

import crawlhive.utils.frontier as frontier


def _loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after *statement*."""
    code = f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(json.loads(out))


def test_a_cleaner_starts_without_the_frontier_s_machinery() -> None:
    """The cleaner's modules (its stats read one constant of the frontier's model) load neither the
    frontier's writer and leaser, numpy (the Bloom sizing), the public suffix list nor jsonschema
    (the requests' schemas: its dead letters only parse JSON)."""
    loaded = _loaded_after("import crawlhive.app.cli, crawlhive.cleaner.cleaner")
    assert "crawlhive.cleaner.cleaner" in loaded and "crawlhive.utils.state.stats" in loaded
    unwanted = {
        "crawlhive.utils.frontier.writer",
        "crawlhive.utils.frontier.leasing",
        "numpy",
        "tldextract",
        "jsonschema",
    }
    assert not unwanted & loaded


def test_every_name_the_frontier_package_offers_is_loaded_on_first_use() -> None:
    """Each name of ``crawlhive.utils.frontier.__all__`` is found in its submodule when read, and
    ``from crawlhive.utils.frontier import X`` works for names and submodules alike."""
    assert set(frontier.__all__) == set(frontier._WHERE)
    for name in frontier.__all__:
        value = getattr(frontier, name)
        module = sys.modules[f"crawlhive.utils.frontier.{frontier._WHERE[name]}"]
        assert value is getattr(module, name)
    loaded = _loaded_after("from crawlhive.utils.frontier import Frontier, bloom, tails")
    assert {"crawlhive.utils.frontier.writer", "crawlhive.utils.frontier.bloom"} <= loaded
    try:
        frontier.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchName" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")


#: What each process kind runs (its ``kind.py``'s entry, and the CLI and the worker skeleton that
#: start it) and what ``crawlhive up`` and the embedded cluster load.
PROCESS_MODULES = (
    "crawlhive.app.cli",
    "crawlhive.app.up",
    "crawlhive.app.embedded",
    "crawlhive.utils.process.worker",
    "crawlhive.cleaner.cleaner",
    "crawlhive.kafka_monitor.monitor",
    "crawlhive.redis_monitor.monitor",
    "crawlhive.crawler.runner",
    "crawlhive.crawler.emitter",
    "crawlhive.rest.server",
    "crawlhive.rest.answers",
    "crawlhive.sink.worker",
    "crawlhive.utils.backends.kafka_clients",
)


def test_no_process_loads_kafka_python() -> None:
    """Every Kafka client is on librdkafka and raises crawlhive's own error classes
    (crawlhive.utils.contract.kafka_errors): importing kafka-python (``kafka``, the whole package
    with its protocol schemas, about 0.1 s) would only delay each process's start, the cleaner's
    subscription among them."""
    loaded = _loaded_after("\n".join(f"import {name}" for name in PROCESS_MODULES))
    assert set(PROCESS_MODULES) <= loaded
    assert sorted(name for name in loaded if name == "kafka" or name.startswith("kafka.")) == []
