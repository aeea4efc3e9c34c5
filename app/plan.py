"""``crawlhive up``'s plan: which processes of which kind it runs, with what arguments, and the
``up`` options that choose them.

Each kind declares its part once, as :class:`~crawlhive.utils.process.kinds.UpGroup` values in its
:class:`~crawlhive.utils.process.kinds.ProcessKind` (how many by default, the ``up`` option that
sets how many, the options ``up`` forwards); this module turns the registry into ``up``'s
command-line options (:func:`add_up_options`), reads them back (:func:`up_arguments`) and makes the
plan (:func:`up_plan`) that :class:`~crawlhive.app.up.LocalCluster` runs. The plan is pure: no
process is started and nothing is connected, so tests check it directly.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from crawlhive.utils.process.kinds import Option, kinds


class UpProcess(NamedTuple):
    """One process of ``crawlhive up``'s plan (:func:`up_plan`)."""

    name: str
    """``crawler-1``, ``rest``, ``sink-2``."""
    kind: str
    argv: list[str]
    """The ``crawlhive`` arguments that run it (``["crawler", "--spider", "link"]``)."""
    env: dict[str, str]
    """Settings of this process alone, for its environment (an ``UpGroup.each`` value)."""


def up_plan(
    counts: Mapping[str, int] | None = None,
    forwarded: Mapping[str, Sequence[str]] | None = None,
    values: Mapping[str, Sequence[str]] | None = None,
) -> list[UpProcess]:
    """Each process ``crawlhive up`` runs.

    Args:
        counts: ``up``'s counts by option (``{"crawlers": 4}``); an option not given has its default.
        forwarded: the arguments of each kind's forwarded options, by kind name.
        values: the values of each :attr:`UpGroup.each` option, by option (``{"sink": [url, …]}``).
    """
    counts = counts or {}
    plan: list[UpProcess] = []
    for kind in kinds():
        extra = list((forwarded or {}).get(kind.name, ()))
        for group in kind.up:
            label = group.label or kind.name
            argv = [kind.name, *group.args, *extra]
            if group.each is not None and group.option is not None:
                given = list((values or {}).get(group.option, ()))
                setting = group.each
                plan += [UpProcess(f"{label}-{i + 1}", kind.name, argv, {setting: v}) for i, v in enumerate(given)]
                continue
            n = group.default if group.option is None else counts.get(group.option, group.default)
            if group.option is None:
                plan += [UpProcess(label if n == 1 else f"{label}-{i + 1}", kind.name, argv, {}) for i in range(n)]
            else:
                plan += [UpProcess(f"{label}-{i + 1}", kind.name, argv, {}) for i in range(n)]
    return plan


def add_up_options(parser: argparse.ArgumentParser) -> None:
    """Add every kind's ``up`` options to *parser* (counts, repeatable :attr:`UpGroup.each` values,
    forwarded options)."""
    for kind in kinds():
        for group in kind.up:
            if group.option is not None:
                flag = "--" + group.option.replace("_", "-")
                if group.each is not None:
                    parser.add_argument(flag, action="append", default=[], metavar=group.metavar, help=group.help)
                else:
                    parser.add_argument(flag, type=int, default=group.default, metavar=group.metavar, help=group.help)
            for option in group.forward:
                option.add_to(parser)


def up_arguments(args: argparse.Namespace) -> tuple[dict[str, int], dict[str, list[str]], dict[str, list[str]]]:
    """``(counts, forwarded, values)`` for :func:`up_plan` from ``up``'s parsed *args*."""
    counts: dict[str, int] = {}
    values: dict[str, list[str]] = {}
    forwarded: dict[str, list[str]] = {}
    for kind in kinds():
        for group in kind.up:
            if group.option is not None and group.each is not None:
                values[group.option] = list(getattr(args, group.option))
            elif group.option is not None:
                counts[group.option] = getattr(args, group.option)
            forwarded.setdefault(kind.name, [])
            for option in group.forward:
                forwarded[kind.name] += forwarded_arguments(option, args)
    return counts, forwarded, values


def forwarded_arguments(option: Option, args: argparse.Namespace) -> list[str]:
    """The arguments that pass *option*, as given to ``up``, on to a process (a list: repeated)."""
    value = getattr(args, option.arguments.get("dest") or option.flags[-1].lstrip("-").replace("-", "_"), None)
    flag = option.flags[-1]
    if value is None or value is False:
        return []
    if value is True:
        return [flag]
    values = value if isinstance(value, list) else [value]
    return [part for item in values for part in (flag, str(item))]
