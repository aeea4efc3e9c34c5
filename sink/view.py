"""What the cluster shows of its sinks (docs/contract.md §20.7; :mod:`crawlhive.utils.process.views`):
the ``sink`` stats type, the ``/metrics`` families and the dashboard's cards, declared here in one place.

Read from Redis only: each sink process's published state (:mod:`crawlhive.utils.state.sinks`,
what the sink worker writes and REST's health reads) and the sink counters (written, duplicates,
dead letters) in the stats. The redis-monitor and REST load this module by its dotted path
(``sink/kind.py``), never importing the sink itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from crawlhive.utils.process.views import KindView
from crawlhive.utils.state.sinks import COMPONENT, COUNTERS, live_sinks, parse_sink_counter_name, sink_counter_name

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from crawlhive.utils.backends.keys import Keys
    from crawlhive.utils.backends.redis_types import RedisClient
    from crawlhive.utils.state.stats import Stats

#: The stats type of ``{"stats": "sink"}`` (contract §4.7, §20.7).
STATS_TYPE = COMPONENT
#: The metrics (contract §7.2, §20.7).
METRIC_RECORDS = "crawlhive_sink_records"  # exposed as crawlhive_sink_records_total{sink,kind}
METRIC_LAG = "crawlhive_sink_lag"
#: The dashboard's cards per sink: (field of ``sinks`` rows, label).
DASHBOARD_CARDS = (("written", "written"), ("lag", "lag"))


class SinkView(KindView):
    """The sinks' stats body, metric families and cards (see the module docstring)."""

    def sink_body(self) -> dict[str, Any]:
        """``stats: sink``: per sink, its counters (window maps) and its live state."""
        return stats_body(self.redis, self.keys, self.stats, self.context.heartbeat_timeout_s)

    bodies = {STATS_TYPE: sink_body}

    def rows(self) -> list[dict[str, Any]]:
        """One row per sink: name, kind, lifetime counters, live processes and lag."""
        return rows(self.redis, self.keys, self.stats, self.context.heartbeat_timeout_s)

    def metrics(self) -> Iterator[Metric]:
        return metrics(self.rows())

    def cards(self) -> dict[str, Any]:
        """``sinks``: one row per sink; the page shows its written and lag cards (and ``failing``)."""
        return {"sinks": self.rows()}


def stats_body(redis: RedisClient, keys: Keys, stats: Stats, timeout_s: float) -> dict[str, Any]:
    """The ``sink`` stats answer: per sink, its counters (window maps) and its live state."""
    names = {parsed[0] for c in stats.counters(COMPONENT) if (parsed := parse_sink_counter_name(c[1]))}
    live = live_sinks(redis, keys, timeout_s)
    names |= set(live)
    wanted = [(COMPONENT, sink_counter_name(name, counter)) for name in sorted(names) for counter in COUNTERS]
    maps = stats.read_many(wanted) if wanted else {}
    body: dict[str, Any] = {}
    for name in sorted(names):
        body[name] = {counter: maps.get((COMPONENT, sink_counter_name(name, counter))) or {} for counter in COUNTERS}
        body[name].update(live.get(name, {"processes": 0}))
    return {"sinks": body}


def rows(redis: RedisClient, keys: Keys, stats: Stats, timeout_s: float) -> list[dict[str, Any]]:
    """One row per sink for ``/metrics`` and the dashboard: name, kind, lifetime counters, lag."""
    sinks = stats_body(redis, keys, stats, timeout_s)["sinks"]
    return [
        {
            "name": name,
            "kind": info.get("kind") or name.split("-", 1)[0],
            "processes": info.get("processes", 0),
            "lag": info.get("lag"),
            "error": info.get("error"),
            **{counter: int((info.get(counter) or {}).get("lifetime", 0)) for counter in COUNTERS},
        }
        for name, info in sinks.items()
    ]


def metrics(sink_rows: list[dict[str, Any]]) -> Iterator[Metric]:
    """``crawlhive_sink_records_total{sink,kind}`` (kind: written, duplicates, dead_letters) and
    ``crawlhive_sink_lag{sink}``."""
    records = CounterMetricFamily(
        METRIC_RECORDS,
        "Records the sinks handled, by outcome: written, duplicates, dead_letters (§20).",
        labels=["sink", "kind"],
    )
    lag = GaugeMetricFamily(METRIC_LAG, "Records of its topic a sink has not committed yet (§20).", labels=["sink"])
    for row in sink_rows:
        for counter in COUNTERS:
            records.add_metric([row["name"], counter], row[counter])
        if row["lag"] is not None:
            lag.add_metric([row["name"]], row["lag"])
    yield records
    yield lag
