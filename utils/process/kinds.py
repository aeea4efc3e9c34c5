"""The registry of process kinds: kafka-monitor, redis-monitor, crawler, cleaner, rest, and any added.

A kind declares itself ONCE, in its own package (``<package>/kind.py``: a :class:`ProcessKind`),
and is registered by one line in ``pyproject.toml``::

    [project.entry-points."crawlhive.kinds"]
    cleaner = "crawlhive.cleaner.kind:KIND"

Everything that lists processes derives from the registry: the ``crawlhive <kind>`` subcommands
and their help, ``crawlhive up``'s plan (how many of each, with what arguments) and its readiness
wait, the demo, the ``stats`` types (and the stats request schema), the heartbeat components that
``/metrics`` and the dashboard's node cards count, the container health check, and what the
cluster shows of each kind (its view, :mod:`crawlhive.utils.process.views`: stats answers,
``/metrics`` families, dashboard cards).

Python's entry points (:mod:`importlib.metadata`), not a list in this module: the library never
names a service, and a package of the user's (or a test's) registers a kind the same way, without
editing crawlhive. A kind's module must be cheap to import (no Scrapy, no Kafka client): the
registry loads every kind for ``crawlhive --help``; its :attr:`ProcessKind.entry` imports the rest
when the process runs.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from crawlhive.utils.config.errors import PluginLoadError

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

#: The entry-point group kinds register in.
ENTRY_POINT_GROUP = "crawlhive.kinds"

#: What runs a process of a kind: its settings (resolved by the ``crawlhive`` command) and its parsed
#: options; returns the exit code (0 after a graceful stop).
Entry = Callable[["Settings", argparse.Namespace], int]


@dataclass(frozen=True)
class Option:
    """One command-line option of a kind (``argparse`` arguments).

    Attributes:
        flags: ``("--spider",)``.
        setting: the setting the option sets when given (``--render`` -> ``RENDER``), or None when
            only the entry reads it (``args.spider``).
        help: the help text.
        arguments: further keyword arguments of ``add_argument`` (``type``, ``default``, ``action``…).
    """

    flags: tuple[str, ...]
    setting: str | None = None
    help: str = ""
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def add_to(self, parser: argparse.ArgumentParser) -> str:
        """Add the option to *parser*; returns its ``dest``."""
        action = parser.add_argument(*self.flags, help=self.help, **dict(self.arguments))
        return action.dest


@dataclass(frozen=True)
class UpGroup:
    """Processes of a kind that ``crawlhive up`` (and the demo) starts (:mod:`crawlhive.app.plan`).

    Attributes:
        option: ``up --<option> N`` sets how many (``cleaners``); the processes are then numbered
            (``cleaner-1``). None: exactly *default* processes, named after the kind (``rest``).
        default: how many when the option is not given (0: none unless asked for).
        help: the help text of ``up --<option>``.
        metavar: its metavar in that help.
        args: the kind's arguments of each process (``("--spider", "link", "--render")``).
        label: the process name prefix, if not the kind's name (``crawler-render``).
        forward: options ``up`` accepts and passes on to each process of the group (a repeatable
            option is passed as often as given).
        each: the setting each process gets one value of ``up --<option> VALUE`` in: the option is
            then repeatable, and starts one process per value given (``up --sink URL`` -> a sink
            with SINK_URL=URL). The value goes in the process's environment, not on a command line
            other users of the machine can read. None: the option is a count.
    """

    option: str | None = None
    default: int = 1
    help: str = ""
    metavar: str | None = None
    args: tuple[str, ...] = ()
    label: str = ""
    forward: tuple[Option, ...] = ()
    each: str | None = None


@dataclass(frozen=True)
class ProcessKind:
    """A kind of process of the cluster, as every part of the application sees it.

    Attributes:
        name: the subcommand (``crawlhive <name>``), the heartbeat component and stats component.
        summary: one line for ``crawlhive --help``.
        epilog: the examples ending ``crawlhive <name> --help`` (docs/contract.md §17.8).
        entry: runs one process (:data:`Entry`).
        options: the subcommand's options.
        order: where it stands in help, ``up``'s start order and stats (lower first).
        up: the processes ``crawlhive up`` starts (none: ``up`` does not run this kind).
        heartbeat: its processes send heartbeats as component *name* (counted by ``up``'s
            readiness wait, ``/metrics``'s ``crawlhive_nodes`` and the dashboard's node cards).
        stats: ``stats: <name>`` is a stats type (and part of ``stats: all``), answered by the
            kind's view (its counters and live nodes unless the view knows the kind better).
        card: the label of the dashboard's node card (default: *name*).
        compose: the docker-compose service(s) that run it (``tests/unit/test_compose.py``).
        consumes: where its processes take their work from: topics by short name (docs/contract.md
            §1: ``incoming``, ``crawled_firehose``; a per-appid topic as ``outbound_<appid>``) and
            the Redis side, ``frontier`` (the crawl queues) or ``control`` (the control stream), or
            ``tails`` (the queue tail store, FRONTIER_TAIL_URL, docs/contract.md §23).
            Documentation only (nothing subscribes by it): docs/architecture.md's kinds section
            and data-flow diagram are generated from it (``python -m crawlhive.app.architecture``).
        produces: where their output goes, in the same names, plus ``store`` (outside the cluster:
            a database or files).
        view: what the kind shows of itself (``package.module.ViewClass``, a
            :class:`~crawlhive.utils.process.views.KindView`, imported only when the cluster is
            observed): its stats bodies (and further stats types), ``/metrics`` families and
            dashboard cards. Empty: the default view (counters and live nodes).
    """

    name: str
    summary: str
    epilog: str
    entry: Entry
    options: tuple[Option, ...] = ()
    order: int = 100
    up: tuple[UpGroup, ...] = ()
    heartbeat: bool = True
    stats: bool = True
    card: str = ""
    compose: tuple[str, ...] = ()
    consumes: tuple[str, ...] = ()
    produces: tuple[str, ...] = ()
    view: str = ""

    @property
    def card_label(self) -> str:
        return self.card or self.name


def worker_entry(path: str, command: str) -> Entry:
    """The entry of a kind whose process is a :class:`~crawlhive.utils.process.worker.Worker`: the class at
    *path* (``package.module.Class``, imported only when the process runs) built ``from_settings``
    and run until SIGINT/SIGTERM (:func:`~crawlhive.utils.process.worker.run_until_stopped`)."""

    def run(settings: Settings, args: argparse.Namespace) -> int:
        from crawlhive.utils.process.plugins import load_object
        from crawlhive.utils.process.worker import run_until_stopped

        return run_until_stopped(load_object(path).from_settings(settings), command)

    run.__doc__ = f"Run one {command} until SIGINT/SIGTERM (0 after a graceful stop, 1 when forced)."
    return run


@functools.cache
def kinds() -> tuple[ProcessKind, ...]:
    """Every registered kind, in :attr:`ProcessKind.order` (then name).

    Raises:
        PluginLoadError: an entry point does not load, is not a ProcessKind, or reuses a name.
    """
    found: dict[str, ProcessKind] = {}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            kind = point.load()
        except Exception as exc:
            raise PluginLoadError(f"process kind {point.name!r} ({point.value}) failed to load: {exc!r}") from exc
        if not isinstance(kind, ProcessKind):
            raise PluginLoadError(f"process kind {point.name!r} ({point.value}) is not a ProcessKind")
        other = found.get(kind.name)
        if other is not None and other is not kind:
            raise PluginLoadError(f"two process kinds are named {kind.name!r} ({point.value})")
        found[kind.name] = kind
    return tuple(sorted(found.values(), key=lambda k: (k.order, k.name)))


def kind_named(name: str) -> ProcessKind:
    """The registered kind *name*. Raises KeyError when there is none."""
    for kind in kinds():
        if kind.name == name:
            return kind
    raise KeyError(name)


def heartbeat_components() -> tuple[str, ...]:
    """The heartbeat components of every kind, in order (``/metrics``, the dashboard, ``up``)."""
    return tuple(k.name for k in kinds() if k.heartbeat)


def stats_kinds() -> tuple[str, ...]:
    """The kinds that are ``stats`` types, in order."""
    return tuple(k.name for k in kinds() if k.stats)


def stats_types() -> tuple[str, ...]:
    """Every ``stats`` type (docs/contract.md §4.7): ``all``, each kind that is one, then the further
    types of each kind's view (the crawler's ``spider``…; imports the views, not the services).

    Raises:
        PluginLoadError: a kind's view does not load.
    """
    from crawlhive.utils.process.views import extra_stats_types

    return ("all", *stats_kinds(), *(name for k in kinds() for name in extra_stats_types(k)))
