"""docs/architecture.md's process kinds and data-flow diagram, generated from the registry of kinds.

Each kind declares what it consumes and produces once, in its :class:`~crawlhive.utils.process.kinds.ProcessKind`
(``consumes``, ``produces``); this module draws the picture from those declarations, so a kind added,
removed or rewired shows up in the doc without anyone redrawing it by hand::

    python -m crawlhive.app.architecture                 # rewrite docs/architecture.md's section
    python -m crawlhive.app.architecture --check PATH    # exit 1 if PATH's section is stale

Only the text between :data:`BEGIN` and :data:`END` is generated; the rest of the doc is written by
hand. ``tests/unit/test_architecture_doc.py`` fails when the committed doc is stale, as
``tests/unit/test_keys.py`` does for docs/redis-keys.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path

from crawlhive.utils.contract.topics import is_short_topic
from crawlhive.utils.process.kinds import ENTRY_POINT_GROUP, ProcessKind, UpGroup, kinds

#: The line that opens the generated section (the text after it, up to :data:`END`, is replaced).
BEGIN = "<!-- BEGIN process kinds: generated from the registry by `python -m crawlhive.app.architecture` -->"
#: The line that closes it.
END = "<!-- END process kinds -->"

#: What a kind may name besides a topic: the Redis side of the picture, and what leaves the cluster.
PLACES = {
    "frontier": "Redis frontier",
    "control": "Redis control stream",
    "store": "a store (database, files)",
    "tails": "queue tail store (FRONTIER_TAIL_URL)",
}

_NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")


def place_label(name: str) -> str:
    """How the doc names *name*, a topic's short name (``cleaned`` -> ``<prefix>.cleaned``) or one of
    :data:`PLACES`.

    Raises:
        ValueError: *name* is neither (a kind's declaration has a typo).
    """
    if name in PLACES:
        return PLACES[name]
    if is_short_topic(name):
        return f"<prefix>.{name}"
    raise ValueError(f"{name!r} is neither a topic's short name (docs/contract.md §1) nor one of {sorted(PLACES)}")


def _code(label: str) -> str:
    """A label as Markdown: topics in code spans, the rest as text."""
    return f"`{label}`" if label.startswith("<prefix>.") else label


def _declared_in() -> dict[str, str]:
    """The module each kind's entry point names (``crawlhive.cleaner.kind``), by entry-point name."""
    return {point.name: point.value.partition(":")[0] for point in entry_points(group=ENTRY_POINT_GROUP)}


def _up_text(kind: ProcessKind) -> str:
    """What ``crawlhive up`` runs of *kind*: ``1``, ``--crawlers N (default 1)``, ``one per --sink URL``."""
    parts = [_up_group_text(group) for group in kind.up]
    return "; ".join(parts) if parts else "none"


def _up_group_text(group: UpGroup) -> str:
    if group.option is None:
        return str(group.default)
    flag = "--" + group.option.replace("_", "-")
    if group.each is not None:
        return f"one per `{flag} {group.metavar or 'VALUE'}`"
    return f"`{flag} N` (default {group.default})"


def _places(kind: ProcessKind) -> list[str]:
    return [*kind.consumes, *kind.produces]


def places_in_order(all_kinds: Sequence[ProcessKind]) -> list[str]:
    """Every place any kind consumes or produces, in the order the kinds first name them."""
    seen: dict[str, None] = {}
    for kind in all_kinds:
        for name in _places(kind):
            seen.setdefault(name, None)
    return list(seen)


def kinds_table(all_kinds: Sequence[ProcessKind]) -> list[str]:
    """The Markdown table of the kinds: what each runs, how many ``up`` starts, its flows."""
    declared = _declared_in()
    rows = [
        "| Kind | `crawlhive --help` says | `crawlhive up` runs | Consumes | Produces | Declared in |",
        "|---|---|---|---|---|---|",
    ]
    for kind in all_kinds:
        consumes = ", ".join(_code(place_label(n)) for n in kind.consumes) or "nothing"
        produces = ", ".join(_code(place_label(n)) for n in kind.produces) or "nothing"
        module = declared.get(kind.name, "")
        rows.append(f"| `{kind.name}` | {kind.summary} | {_up_text(kind)} | {consumes} | {produces} | `{module}` |")
    return rows


def places_table(all_kinds: Sequence[ProcessKind]) -> list[str]:
    """The Markdown table of every topic and Redis structure: which kinds write it, which read it."""
    rows = ["| Topic or structure | Written by | Read by |", "|---|---|---|"]
    for name in places_in_order(all_kinds):
        writers = ", ".join(k.name for k in all_kinds if name in k.produces) or "—"
        readers = ", ".join(k.name for k in all_kinds if name in k.consumes) or "—"
        rows.append(f"| {_code(place_label(name))} | {writers} | {readers} |")
    return rows


def diagram(all_kinds: Sequence[ProcessKind]) -> list[str]:
    """The data-flow diagram: one box per kind, in registry order, what it consumes on its left and
    what it produces on its right; the boxes line up in one column."""
    left_width = max((len(place_label(n)) for k in all_kinds for n in k.consumes), default=0)
    inner = max((len(k.name) for k in all_kinds), default=0) + 2
    arrow_in, arrow_out = " ──►", "──► "
    pad = " " * (left_width + len(arrow_in))
    lines: list[str] = []
    for kind in all_kinds:
        left = [place_label(n) for n in kind.consumes]
        right = [place_label(n) for n in kind.produces]
        rows = max(len(left), len(right), 1)
        lines.append(f"{pad}┌{'─' * inner}┐")
        for i in range(rows):
            name = f" {kind.name}" if i == 0 else ""
            into = f"{left[i].rjust(left_width)}{arrow_in}" if i < len(left) else pad
            out = f"{arrow_out}{right[i]}" if i < len(right) else ""
            lines.append(f"{into}│{name.ljust(inner)}│{out}".rstrip())
        lines.append(f"{pad}└{'─' * inner}┘")
    return lines


def render_section(all_kinds: Sequence[ProcessKind] | None = None) -> str:
    """The generated section of docs/architecture.md (without its markers)."""
    all_kinds = tuple(kinds() if all_kinds is None else all_kinds)
    count = _NUMBERS[len(all_kinds)] if len(all_kinds) < len(_NUMBERS) else str(len(all_kinds))
    lines = [
        "## Process kinds",
        "",
        f"{count.capitalize()} kinds of process, each declared once in its own package (`<package>/kind.py`, a",
        "`ProcessKind`) and registered as a `crawlhive.kinds` entry point ([`extending.md`](extending.md)).",
        "The `crawlhive` subcommands, `up`, the demo, `stats`, `/metrics`, the dashboard and this section",
        "derive from that registry. Every process also writes its heartbeat and stats counters to Redis,",
        "which are not drawn.",
        "",
        *kinds_table(all_kinds),
        "",
        "Data flow: what each kind consumes (left) and produces (right). Clients write",
        "`<prefix>.incoming` too (`crawlhive feed`), and read the answers and results.",
        "",
        "```",
        *diagram(all_kinds),
        "```",
        "",
        *places_table(all_kinds),
    ]
    return "\n".join(lines)


def updated(text: str, section: str | None = None) -> str:
    """*text* (docs/architecture.md) with its generated section replaced by *section* (default:
    :func:`render_section`).

    Raises:
        ValueError: *text* lacks the :data:`BEGIN` or :data:`END` line.
    """
    start, end = text.find(BEGIN + "\n"), text.find("\n" + END)
    if start < 0 or end < start:
        raise ValueError(f"no generated section: expected a line {BEGIN!r}, then a line {END!r}")
    body = render_section() if section is None else section
    return f"{text[: start + len(BEGIN) + 1]}{body}{text[end:]}"


def main(argv: list[str] | None = None) -> int:
    """Rewrite the generated section of the doc (or, with ``--check``, only say whether it is stale)."""
    parser = argparse.ArgumentParser(
        prog="python -m crawlhive.app.architecture",
        description="Regenerate docs/architecture.md's process kinds and data flow from the registry.",
    )
    parser.add_argument("path", nargs="?", default="docs/architecture.md", help="the doc (default %(default)s)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if the doc is stale")
    args = parser.parse_args(argv)
    path = Path(args.path)
    try:
        text = path.read_text(encoding="utf-8")
        new = updated(text)
    except (OSError, ValueError) as exc:
        print(f"{parser.prog}: {path}: {exc}", file=sys.stderr)
        return 2
    if new == text:
        return 0
    if args.check:
        print(f"{path} is stale: run {parser.prog}", file=sys.stderr)
        return 1
    path.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
