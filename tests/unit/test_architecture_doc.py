"""docs/architecture.md's process kinds and data-flow diagram are generated from the registry
(:mod:`crawlhive.app.architecture`): the committed doc must match what the kinds declare, so a kind
added or rewired cannot leave the picture behind (the doc once said "four kinds of process" and
drew neither the cleaner nor the sink)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from crawlhive.app import architecture
from crawlhive.utils.process.kinds import ProcessKind, kinds

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"


def test_docs_architecture_md_is_current() -> None:
    committed = DOC.read_text(encoding="utf-8")
    assert committed == architecture.updated(committed), "run: python -m crawlhive.app.architecture"


def test_the_generator_commands_the_docs_print_run() -> None:
    """The commands docs/architecture.md and docs/redis-keys.md print, run as printed: the
    architecture check passes on the committed doc, and the keys generator writes the committed
    table byte for byte."""
    check = subprocess.run(
        [sys.executable, "-m", "crawlhive.app.architecture", "--check"], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    keys = subprocess.run(
        [sys.executable, "-m", "crawlhive.utils.backends.keys_doc"], capture_output=True, text=True, timeout=60
    )
    assert keys.returncode == 0, keys.stderr
    assert keys.stdout == (ROOT / "docs" / "redis-keys.md").read_text(encoding="utf-8")


def test_every_kind_declares_known_places_and_appears_in_the_diagram() -> None:
    """Each kind consumes or produces something, every name is a topic or a known place (a typo
    raises), and each kind's box carries its first input and first output on its name's line."""
    diagram = architecture.diagram(kinds())
    for kind in kinds():
        assert kind.consumes or kind.produces, kind.name
        labels = [architecture.place_label(name) for name in (*kind.consumes, *kind.produces)]
        assert all(labels)
        (line,) = [ln for ln in diagram if ln.count("│") == 2 and ln.split("│")[1].strip() == kind.name]
        if kind.consumes:
            assert line.lstrip().startswith(architecture.place_label(kind.consumes[0]) + " ──►│"), line
        if kind.produces:
            assert line.endswith("│──► " + architecture.place_label(kind.produces[0])), line


def test_the_pipeline_reads_through_the_places_table() -> None:
    """Who writes and who reads each topic, as a reader follows a crawl: incoming to the
    kafka-monitor, the frontier to the crawlers, the firehose to the cleaners, cleaned to sinks."""
    rows = {row.split(" | ")[0].strip("| `"): row for row in architecture.places_table(kinds())[2:]}
    assert rows["<prefix>.incoming"] == "| `<prefix>.incoming` | rest | kafka-monitor |"
    assert rows["<prefix>.crawled_firehose"] == "| `<prefix>.crawled_firehose` | crawler | cleaner |"
    assert rows["<prefix>.cleaned"] == "| `<prefix>.cleaned` | cleaner | sink |"
    assert "crawler" in rows["Redis frontier"].split(" | ")[2]


def test_an_unknown_place_is_refused_with_the_names_it_may_use() -> None:
    with pytest.raises(ValueError, match="'cleand' is neither a topic's short name"):
        architecture.place_label("cleand")


def test_a_new_kind_gets_a_box_and_the_count_follows() -> None:
    """The section is drawn from whatever the registry holds: one more kind, one more box."""
    extra = ProcessKind(
        name="hello-sink",
        summary="say hello",
        epilog="",
        entry=lambda settings, args: 0,
        consumes=("cleaned",),
        produces=("store",),
    )
    section = architecture.render_section((*kinds(), extra))
    assert section.count("┌") == len(kinds()) + 1
    assert "<prefix>.cleaned ──►│ hello-sink    │──► a store (database, files)" in section
    assert "| `<prefix>.cleaned` | cleaner | sink, hello-sink |" in section
    assert section.splitlines()[2].startswith("Seven kinds of process")


def test_main_checks_and_rewrites_only_between_the_markers(tmp_path: Path) -> None:
    doc = tmp_path / "architecture.md"
    stale = f"# Title\n\nhand-written\n{architecture.BEGIN}\nfour kinds of process\n{architecture.END}\n\ntail\n"
    doc.write_text(stale, encoding="utf-8")
    assert architecture.main(["--check", str(doc)]) == 1
    assert doc.read_text(encoding="utf-8") == stale  # --check changes nothing
    assert architecture.main([str(doc)]) == 0
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("# Title\n\nhand-written\n" + architecture.BEGIN + "\n## Process kinds\n")
    assert text.endswith(f"\n{architecture.END}\n\ntail\n") and "four kinds" not in text
    assert architecture.main(["--check", str(doc)]) == 0
    doc.write_text("no markers\n", encoding="utf-8")
    assert architecture.main([str(doc)]) == 2
