"""Heartbeats of live processes, the node maps of docs/contract.md §4.1 and a health check.

Each process of a component (``kafka-monitor``, ``redis-monitor``, ``crawler``, ``rest``) owns
``keys.heartbeat(component, node_id)``: a JSON string that lives ``timeout_s`` seconds and is
renewed every ``HEARTBEAT_INTERVAL``. Its node id is also in ``keys.heartbeat_index(component)``,
a sorted set scored with the key's expiry on the Redis clock, so readers list a component's
processes without ``KEYS`` and drop the entries of processes that died without :meth:`stop`.

Liveness is the key's existence; the index only finds the keys. A process may also renew a local
file on every beat (``alive_file``, HEARTBEAT_FILE), before Redis is tried: a container's liveness
probe reads its age, so a process whose loop runs is never restarted for a Redis outage.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.backends.scripts import scripts

if TYPE_CHECKING:
    from crawlhive.utils.backends.keys import Keys

logger = logging.getLogger(__name__)


def new_node_id() -> str:
    """A fresh node id: 12 lowercase hex characters (docs/contract.md §4.1), new for every process start."""
    return secrets.token_hex(6)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Heartbeat:
    """The heartbeat of one process.

    Args:
        redis: the client (either response decoding works).
        keys: the cluster's key formats.
        component: e.g. ``kafka-monitor``.
        node_id: from :func:`new_node_id`.
        host: the host name shown in node maps (``CRAWLER_NODE_NAME`` or the machine's name).
        timeout_s: seconds the process counts as live after a beat (``HEARTBEAT_TIMEOUT``).
        extra: more fields for the payload; crawlers add ``{"spider": <spider type>}``, which the
            spider stats (docs/contract.md §4.7) count live processes by.

    Raises:
        ValueError: *timeout_s* is not positive.
    """

    def __init__(
        self,
        redis: RedisClient,
        keys: Keys,
        component: str,
        node_id: str,
        host: str,
        timeout_s: float,
        extra: Mapping[str, Any] | None = None,
        alive_file: str = "",
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"HEARTBEAT_TIMEOUT: must be > 0 seconds, got {timeout_s!r}")
        self.redis = redis
        self.keys = keys
        self.component = component
        self.node_id = node_id
        self.host = host
        self.timeout_s = timeout_s
        self.key = keys.heartbeat(component, node_id)
        self.index_key = keys.heartbeat_index(component)
        self.started = time.time()
        self.extra = dict(extra or {})
        self.alive_file = alive_file
        self.scripts = scripts(redis)

    def __repr__(self) -> str:
        return f"Heartbeat({self.key!r})"

    def payload(self) -> dict[str, Any]:
        """What the heartbeat key holds: host, pid, node_id, component and started (epoch s), plus
        the *extra* fields."""
        return {
            **self.extra,
            "host": self.host,
            "pid": os.getpid(),
            "node_id": self.node_id,
            "component": self.component,
            "started": self.started,
        }

    def touch(self) -> None:
        """Renew the modification time of the local *alive_file* (created if missing): the loop
        that calls this runs. Never raises (a failure is logged at debug level: the probe then
        reports the file's age, naming HEARTBEAT_FILE)."""
        if not self.alive_file:
            return
        try:
            with open(self.alive_file, "a"):
                pass
            os.utime(self.alive_file)
        except OSError:
            logger.debug("could not renew HEARTBEAT_FILE %s", self.alive_file, exc_info=True)

    def beat(self) -> None:
        """Renew this process's heartbeat, atomically and in one round trip (the local
        *alive_file* first, whether Redis answers or not).

        Sets ``keys.heartbeat(component, node_id)`` with a ``timeout_s`` expiry and indexes the
        node in ``keys.heartbeat_index(component)`` at that expiry (one script, Redis clock).

        Raises:
            redis.RedisError: Redis failed; the process may drop out of node maps until the next
                successful beat.
        """
        self.touch()
        ttl_ms = max(1, math.ceil(self.timeout_s * 1000))
        self.scripts["heartbeat_beat"](
            keys=[self.key, self.index_key], args=[json.dumps(self.payload()), ttl_ms, self.node_id]
        )

    def stop(self) -> None:
        """Remove the heartbeat key and its index entry in one ``MULTI`` (call on shutdown)."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(self.key)
        pipe.zrem(self.index_key, self.node_id)
        pipe.execute()


def live_heartbeats(redis: RedisClient, keys: Keys, component: str) -> list[dict[str, Any]]:
    """The heartbeat payloads (:meth:`Heartbeat.payload`) of *component*'s live processes, by node id.

    Prunes expired entries of ``keys.heartbeat_index(component)`` on the Redis clock, then reads
    the remaining heartbeat keys: two round trips, no ``KEYS``. A node whose key vanished in
    between is left out (and dropped from the index); an unreadable payload becomes
    ``{"node_id": <id>, "host": "unknown"}`` (written by something else; still a live node).
    """
    index_key = keys.heartbeat_index(component)
    members = sorted(_text(m) for m in scripts(redis)["heartbeat_prune"](keys=[index_key]))
    if not members:
        return []
    values = redis.mget([keys.heartbeat(component, node_id) for node_id in members])
    beats: list[dict[str, Any]] = []
    gone = []
    for node_id, raw in zip(members, values, strict=True):
        if raw is None:
            gone.append(node_id)
            continue
        try:
            payload = json.loads(raw)
            if not isinstance(payload, dict):
                raise TypeError
        except (ValueError, TypeError):
            payload = {}
        payload["node_id"] = node_id
        payload["host"] = str(payload.get("host", "unknown"))
        beats.append(payload)
    if gone:
        redis.zrem(index_key, *gone)
    return beats


def live_nodes(redis: RedisClient, keys: Keys, component: str) -> dict[str, list[str]]:
    """The node map of *component* (docs/contract.md §4.1): host -> sorted node ids of its live processes.

    Read through :func:`live_heartbeats` (two round trips, no ``KEYS``).

    Returns:
        ``{}`` when no process of *component* is live.
    """
    nodes: dict[str, list[str]] = {}
    for beat in live_heartbeats(redis, keys, component):
        nodes.setdefault(beat["host"], []).append(beat["node_id"])
    return {host: sorted(ids) for host, ids in sorted(nodes.items())}


def crawler_lanes(redis: RedisClient, keys: Keys) -> set[tuple[str, bool]]:
    """The frontier lanes live crawlers serve: ``(spider type, rendering)`` of each crawler's
    heartbeat (docs/contract.md §11, §15), read through :func:`live_heartbeats`."""
    return {(str(beat.get("spider")), bool(beat.get("render"))) for beat in live_heartbeats(redis, keys, "crawler")}


def unserved_reason(spiderid: str, lanes: Iterable[bool], serving: set[tuple[str, bool]]) -> str | None:
    """Why work of a crawl of *spiderid* queued in *lanes* (False plain, True rendering; none: the
    plain lane) waits for a crawler, given the lanes live crawlers serve (:func:`crawler_lanes`);
    None when every lane it needs is served. The text says what to start."""
    needed = set(lanes) or {False}
    if not any(spider == spiderid for spider, _ in serving):
        render = " --render" if needed == {True} else ""
        start = f"`crawlhive crawler --spider {spiderid}{render}`"
        return f"no live crawler serves spider type {spiderid!r}: start one with {start}"
    if True in needed and (spiderid, True) not in serving:
        return (
            f"no live rendering crawler serves spider type {spiderid!r} (the crawl was sent with render: true): "
            f"start one with `crawlhive crawler --spider {spiderid} --render`"
        )
    if False in needed and (spiderid, False) not in serving:
        return (
            f"no live crawler without rendering serves spider type {spiderid!r}: "
            f"start one with `crawlhive crawler --spider {spiderid}`"
        )
    return None


def check_health(redis: RedisClient, keys: Keys, component: str, node_id: str) -> bool:
    """True if the process ``(component, node_id)`` has a live heartbeat.

    A health probe exits 0 on True and 1 on False. A Redis failure raises ``redis.RedisError``,
    which the probe's ``main()`` also maps to 1.
    """
    return bool(redis.exists(keys.heartbeat(component, node_id)))


__all__ = [
    "Heartbeat",
    "check_health",
    "crawler_lanes",
    "live_heartbeats",
    "live_nodes",
    "new_node_id",
    "unserved_reason",
]
