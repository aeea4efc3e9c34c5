"""What each sink process publishes of itself (docs/contract.md §20.7), and its reading for
REST's health and ``crawlhive up``. What the cluster SHOWS of its sinks (the ``sink`` stats type,
the ``/metrics`` families, the dashboard's cards) is the sink's view, ``sink/view.py``.

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
    from crawlhive.utils.backends.keys import Keys
    from crawlhive.utils.backends.redis_types import RedisClient

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
