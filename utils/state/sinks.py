"""What the cluster shows of its sinks (docs/contract.md §20.7): the ``sink`` stats type, the
``/metrics`` families and the dashboard's cards, declared here in one place.

Each sink process publishes, every HEARTBEAT_INTERVAL, one field of the hash ``Keys.sink_state``:
its node id -> ``{"sink", "kind", "topic", "group", "lag", "at"}``, where ``lag`` is the records of
its assigned partitions not committed yet, ``buffered`` the records a file sink gathered or is
writing (not in a complete file yet), and ``error`` while it fails (its store or Kafka
unreachable: the reason, naming the setting), published at once when it starts failing. Readers
add up the live entries (``at`` within HEARTBEAT_TIMEOUT; older ones are removed) per sink, and
the counters of the sink processes (written, duplicates, dead letters) from the stats.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

    from prometheus_client.metrics_core import Metric

    from crawlhive.utils.backends.keys import Keys
    from crawlhive.utils.backends.redis_types import RedisClient
    from crawlhive.utils.state.stats import Stats

#: The heartbeat/stats component of sinks.
COMPONENT = "sink"
#: The counters of one sink in the stats (``<sink name>:<counter>`` under ``sink``).
COUNTERS = ("written", "duplicates", "dead_letters")


def sink_counter_name(sink: str, counter: str) -> str:
    """The stats counter *counter* (one of COUNTERS) of the sink named *sink*."""
    return f"{sink}:{counter}"


def parse_sink_counter_name(name: str) -> tuple[str, str] | None:
    """``(sink, counter)`` of a name :func:`sink_counter_name` made, else None."""
    sink, sep, counter = name.rpartition(":")
    return (sink, counter) if sep and sink and counter in COUNTERS else None


#: The stats type of ``{"stats": "sink"}`` (contract §4.7, §20.7).
STATS_TYPE = "sink"
#: The metrics (contract §7.2, §20.7).
METRIC_RECORDS = "crawlhive_sink_records"  # exposed as crawlhive_sink_records_total{sink,kind}
METRIC_LAG = "crawlhive_sink_lag"
#: The dashboard's cards per sink: (field of ``sinks`` rows, label).
DASHBOARD_CARDS = (("written", "written"), ("lag", "lag"))


def publish(redis: RedisClient, keys: Keys, node_id: str, state: dict[str, Any], ttl_s: float) -> None:
    """This sink process's entry (see the module docstring); the hash expires when no sink
    refreshes it for *ttl_s*."""
    pipe = redis.pipeline(transaction=False)
    pipe.hset(keys.sink_state(), node_id, json.dumps({**state, "at": time.time()}))
    pipe.pexpire(keys.sink_state(), int(ttl_s * 1000))
    pipe.execute()


def withdraw(redis: RedisClient, keys: Keys, node_id: str) -> None:
    """Remove this process's entry (a graceful stop)."""
    redis.hdel(keys.sink_state(), node_id)


def live_sinks(redis: RedisClient, keys: Keys, timeout_s: float, now: float | None = None) -> dict[str, dict[str, Any]]:
    """Per sink name: ``kind``, ``topic``, ``group``, ``processes`` and summed ``lag`` of its live
    processes; stale entries are removed."""
    now = time.time() if now is None else now
    found: dict[str, dict[str, Any]] = {}
    stale = []
    for node, raw in (redis.hgetall(keys.sink_state()) or {}).items():
        try:
            entry = json.loads(raw)
            fresh = now - float(entry["at"]) <= timeout_s
        except (ValueError, KeyError, TypeError):
            fresh, entry = False, {}
        if not fresh:
            stale.append(node)
            continue
        sink = found.setdefault(
            str(entry.get("sink")),
            {"kind": entry.get("kind"), "topic": entry.get("topic"), "group": entry.get("group"), "processes": 0},
        )
        sink["processes"] += 1
        if entry.get("error"):
            sink["error"] = str(entry["error"])[:500]
        if isinstance(entry.get("lag"), int):
            sink["lag"] = sink.get("lag", 0) + entry["lag"]
        if isinstance(entry.get("buffered"), int):
            sink["buffered"] = sink.get("buffered", 0) + entry["buffered"]
    if stale:
        redis.hdel(keys.sink_state(), *stale)
    return found


def failing_sinks(redis: RedisClient, keys: Keys, timeout_s: float) -> dict[str, str]:
    """Per sink name whose live processes report a failure, the reason (REST's health, ``up``)."""
    return {name: str(info["error"]) for name, info in live_sinks(redis, keys, timeout_s).items() if "error" in info}


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
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

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
