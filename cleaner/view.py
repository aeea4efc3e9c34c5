"""What the cluster shows of its cleaners (:mod:`crawlhive.utils.process.views`): the ``cleaner``
stats type (docs/contract.md §13, §4.7). Read from Redis only; the redis-monitor and REST load it
by its dotted path (``cleaner/kind.py``), never importing the cleaner itself."""

from __future__ import annotations

from typing import Any

from crawlhive.utils.process.views import KindView
from crawlhive.utils.state.stats import CLEANER, CLEANER_COUNTERS, parse_cleaner_machine_counter_name


class CleanerView(KindView):
    """The cleaners' stats body."""

    def cleaner_body(self) -> dict[str, Any]:
        """The cleaners' counters (docs/contract.md §13), each a window map, the same per host
        (``machines``) and their live nodes."""
        per_host = [c for c in self.stats.counters(CLEANER) if parse_cleaner_machine_counter_name(c[1])]
        maps = self.stats.read_many([(CLEANER, name) for name in CLEANER_COUNTERS] + per_host)
        body: dict[str, Any] = {name: maps.get((CLEANER, name)) or {} for name in CLEANER_COUNTERS}
        machines: dict[str, dict[str, Any]] = {}
        for counter in per_host:
            parsed = parse_cleaner_machine_counter_name(counter[1])
            if parsed and maps.get(counter):
                machines.setdefault(parsed[0], {})[parsed[1]] = maps[counter]
        if machines:
            body["machines"] = dict(sorted(machines.items()))
        nodes = self.nodes()
        if nodes:
            body["nodes"] = nodes
        return body

    bodies = {CLEANER: cleaner_body}
