"""The control stream: action, stats and domain-config requests waiting for a redis-monitor.

The kafka-monitor appends each accepted request as one entry of a Redis stream; redis-monitors read
it through one consumer group (``XREADGROUP ... BLOCK``), so every request reaches exactly one
monitor without ``KEYS`` and without polling an idle Redis, and a request whose monitor died stays
pending until another claims it. Two requests with the same target are two entries: both are
answered (Scrapy Cluster kept one key per target and answered only the last).

A Kafka record re-processed after a crash is not appended twice: the append is a Lua script that
first claims a marker key derived from the record's origin (``SET NX EX``).

Besides the kafka-monitor's kinds (``action``, ``stats``, ``domain-config``) the redis-monitor
appends its own notifications here, each from the Lua script that makes the state change, so that
emitting them is as reliable as answering a request and happens exactly once across monitors:
``expire`` (a crawl's expiry timer fired), ``complete`` (a crawl has nothing queued or in flight)
and ``dead-letter`` (a reclaimed lease used up its retries). Their ``request`` is JSON too.

Consumer side (:class:`ControlConsumer`): an entry is delivered to one consumer of the group and
stays in the group's pending list until :meth:`ControlConsumer.ack` (``XACK`` + ``XDEL``), which
the redis-monitor calls only after Kafka acknowledged the answer. Entries of a monitor that died
are claimed by another after ``min_idle_ms`` (``XAUTOCLAIM``); a live monitor keeps its entries
with :meth:`ControlConsumer.renew`. Redis counts each delivery (``times_delivered``), which bounds
retries of a request that keeps failing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self, cast

import ujson
from redis.exceptions import ResponseError

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.backends.scripts import scripts

if TYPE_CHECKING:
    from crawlhive.utils.backends.redis_types import RedisPipeline
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

#: How long an origin marker blocks a second append of the same Kafka record.
ORIGIN_MARKER_TTL_S = 86400


#: Stream entries as redis-py returns them: ``(id, fields)``, fields None for a deleted entry.
_Entries = list[tuple[Any, "dict[Any, Any] | None"]]


class ControlQueue:
    """Producer side of the control stream (the consumer side is :class:`ControlConsumer`)."""

    def __init__(self, redis: RedisClient, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self.scripts = scripts(redis)

    @classmethod
    def from_settings(cls, redis: RedisClient, settings: Settings) -> Self:
        return cls(redis, keys_from_settings(settings))

    def submit(self, pipe: RedisPipeline, kind: str, message: dict[str, Any], origin: str) -> None:
        """Queue on *pipe* the append of *message* (of *kind*), at most once per *origin* (run *pipe*
        with ``scripts(redis).execute``, which handles a ``NOSCRIPT`` reply)."""
        keys = [self.keys.control_origin(origin), self.keys.control_stream()]
        args: list[str | int] = [ORIGIN_MARKER_TTL_S, kind, ujson.dumps(message, ensure_ascii=False)]
        self.scripts.queue(pipe, "control_submit", keys, args)

    def pending(self) -> list[tuple[str, dict[str, Any]]]:
        """Every entry in the stream as ``(kind, request)``, oldest first (for tests and tools)."""
        entries = cast("_Entries", self.redis.xrange(self.keys.control_stream()))
        return [(_text(fields[b"kind"]), ujson.loads(fields[b"request"])) for _, fields in entries if fields]


#: Consumer group of the redis-monitors on the control stream.
CONTROL_GROUP = "redis-monitor"


@dataclass(frozen=True, slots=True)
class ControlEntry:
    """One control-stream entry as a consumer sees it.

    Attributes:
        id: the stream entry id (``"1714563600000-0"``).
        kind: the ``kind`` field; ``""`` if missing.
        raw: the ``request`` field as stored (JSON text; ``""`` if missing).
        deliveries: how many times Redis has delivered it to a consumer of the group (1 on the
            first read; claims and re-reads add one each).
    """

    id: str
    kind: str
    raw: str
    deliveries: int

    def request(self) -> dict[str, Any]:
        """The decoded request.

        Raises:
            ValueError: ``request`` is not a JSON object.
        """
        value = ujson.loads(self.raw)
        if not isinstance(value, dict):
            raise ValueError(f"control entry {self.id}: request is not a JSON object")
        return value


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


class ControlConsumer:
    """Consumer side of the control stream, for one consumer (a redis-monitor process).

    Args:
        redis: the client; its socket timeout (redis-py: 5 s) must exceed every ``block_ms``.
        keys: the cluster's key formats.
        consumer: this process's consumer name (its node id); new per start, so a restarted
            monitor never inherits entries it cannot remember: others claim them.
        group: the consumer group.

    Every method is one or two round trips and raises ``redis.RedisError`` when Redis fails. A
    group that vanished (the stream was deleted, or Redis restarted without persistence) is created
    again by whichever method meets its absence (``NOGROUP``); that method then acts as if the
    group held nothing: no entries to read or claim, none owned, nothing left to acknowledge.
    """

    def __init__(self, redis: RedisClient, keys: Keys, consumer: str, group: str = CONTROL_GROUP) -> None:
        self.redis = redis
        self.stream = keys.control_stream()
        self.consumer = consumer
        self.group = group

    def ensure_group(self) -> None:
        """Create the stream and the group if missing (idempotent; safe from several processes).

        A new group starts at the stream's beginning, so requests appended before any monitor ran
        are answered too (answered entries are deleted, so nothing is read twice).
        """
        try:
            self.redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def read(self, count: int, block_ms: int) -> list[ControlEntry]:
        """New entries for this consumer, waiting up to *block_ms* (0 = do not wait) for the first.

        If the group vanished, it is created again and ``[]`` returned.
        """
        reply = self._in_group(
            lambda: self.redis.xreadgroup(
                self.group, self.consumer, {self.stream: ">"}, count=count, block=block_ms or None
            ),
            None,
        )
        entries = []
        for _stream, messages in cast("list[tuple[Any, _Entries]]", reply or []):
            for entry_id, fields in messages:
                if fields:
                    entries.append(self._entry(entry_id, fields, 1))
        return entries

    def claim_stale(self, min_idle_ms: int, count: int) -> list[ControlEntry]:
        """Take over up to *count* entries that another consumer has held for *min_idle_ms* without
        acknowledging them (it died, or keeps failing on them). Each claim counts as a delivery."""
        reply: list[Any] = self._in_group(
            lambda: self.redis.xautoclaim(self.stream, self.group, self.consumer, min_idle_ms, "0-0", count=count),
            ["0-0", []],
        )
        # Redis >= 7 answers [cursor, entries, deleted ids] and drops deleted entries from the pending
        # list itself; Redis 6.2 answers [cursor, entries] with a nil for each deleted entry, which
        # stays pending until acknowledged.
        messages: _Entries = reply[1]
        if len(reply) < 3 and any(entry_id is None for entry_id, _ in messages):
            self._ack_deleted(count)
        return self._with_deliveries([(entry_id, fields) for entry_id, fields in messages if fields])

    def _ack_deleted(self, count: int) -> None:
        """Acknowledge entries this consumer holds that no longer exist in the stream (Redis 6.2
        leaves them pending, and ``XAUTOCLAIM`` would hand them out as nils forever)."""
        pending = self.redis.xpending_range(self.stream, self.group, "-", "+", count, consumername=self.consumer)
        ids = [p["message_id"] for p in pending]
        pipe = self.redis.pipeline(transaction=False)
        for entry_id in ids:
            pipe.xrange(self.stream, entry_id, entry_id, count=1)
        gone = [entry_id for entry_id, found in zip(ids, pipe.execute(), strict=True) if not found]
        if gone:
            self.redis.xack(self.stream, self.group, *gone)

    def reclaim(self, ids: list[str]) -> list[ControlEntry]:
        """Deliver the pending entries *ids* of this consumer to it again, for a retry: each counts
        as one more delivery. Entries deleted in the meantime are left out."""
        if not ids:
            return []
        messages = cast(
            "_Entries",
            self._in_group(lambda: self.redis.xclaim(self.stream, self.group, self.consumer, 0, list[Any](ids)), []),
        )
        return self._with_deliveries([(entry_id, fields) for entry_id, fields in messages if fields])

    def renew(self, ids: list[str]) -> None:
        """Reset the idle time of entries this consumer still works on, so no other consumer claims
        them; their delivery count is unchanged."""
        if ids:
            self._in_group(
                lambda: self.redis.xclaim(self.stream, self.group, self.consumer, 0, list[Any](ids), justid=True), []
            )

    def owned(self, ids: list[str]) -> set[str]:
        """Those of *ids* still pending with this consumer (not acknowledged, not claimed by
        another consumer), in one round trip."""
        if not ids:
            return set()
        pipe = self.redis.pipeline(transaction=False)
        for entry_id in ids:
            pipe.xpending_range(self.stream, self.group, entry_id, entry_id, 1, consumername=self.consumer)
        replies: list[Any] = self._in_group(pipe.execute, [])
        return {_text(p["message_id"]) for reply in replies for p in reply}

    def ack(self, ids: list[str]) -> None:
        """Finish entries: ``XACK`` and ``XDEL`` in one ``MULTI`` (call after their answers are
        acknowledged by Kafka)."""
        if not ids:
            return
        pipe = self.redis.pipeline(transaction=True)
        pipe.xack(self.stream, self.group, *ids)
        pipe.xdel(self.stream, *ids)
        self._in_group(pipe.execute, None)

    def _with_deliveries(self, messages: list[tuple[Any, dict[Any, Any]]]) -> list[ControlEntry]:
        if not messages:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for entry_id, _ in messages:
            pipe.xpending_range(self.stream, self.group, entry_id, entry_id, 1, consumername=self.consumer)
        replies: list[Any] = self._in_group(pipe.execute, [])
        counts = {_text(p["message_id"]): int(p["times_delivered"]) for reply in replies for p in reply}
        return [self._entry(entry_id, fields, counts.get(_text(entry_id), 1)) for entry_id, fields in messages]

    def _in_group(self, call: Callable[[], Any], absent: Any) -> Any:
        """*call*'s reply, or *absent* when the group does not exist (``NOGROUP``): the group is
        then created again, with a warning, since what it held was lost with it."""
        try:
            return call()
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
        logger.warning(
            "the control stream %s had no consumer group %r (deleted, or Redis restarted without "
            "persistence): created again; requests it held are gone",
            self.stream,
            self.group,
        )
        self.ensure_group()
        return absent

    @staticmethod
    def _entry(entry_id: Any, fields: dict[Any, Any], deliveries: int) -> ControlEntry:
        decoded = {_text(k): _text(v) for k, v in fields.items()}
        return ControlEntry(_text(entry_id), decoded.get("kind", ""), decoded.get("request", ""), deliveries)
