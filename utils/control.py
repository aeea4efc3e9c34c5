"""The control stream: action, stats and domain-config requests waiting for a redis-monitor.

The kafka-monitor appends each accepted request as one entry of a Redis stream; redis-monitors read
it through one consumer group (``XREADGROUP ... BLOCK``), so every request reaches exactly one
monitor without ``KEYS`` and without polling an idle Redis, and a request whose monitor died stays
pending until another claims it. Two requests with the same target are two entries: both are
answered (Scrapy Cluster kept one key per target and answered only the last).

A Kafka record re-processed after a crash is not appended twice: the append is a Lua script that
first claims a marker key derived from the record's origin (``SET NX EX``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

import ujson

from crawlhive.utils.keys import Keys

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import Pipeline

    from crawlhive.utils.settings import Settings

#: How long an origin marker blocks a second append of the same Kafka record.
ORIGIN_MARKER_TTL_S = 86400

_SUBMIT = """
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then
  return redis.call('XADD', KEYS[2], '*', 'kind', ARGV[2], 'request', ARGV[3])
end
return false
"""


class ControlQueue:
    """Producer side of the control stream (the redis-monitor issue adds the consumer side)."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._submit = redis.register_script(_SUBMIT)

    @classmethod
    def from_settings(cls, redis: Redis, settings: Settings) -> Self:
        return cls(redis, Keys(settings["REDIS_KEY_PREFIX"]))

    def submit(self, pipe: Pipeline, kind: str, message: dict[str, Any], origin: str) -> None:
        """Queue on *pipe* the append of *message* (of *kind*), at most once per *origin*."""
        keys = [self.keys.control_origin(origin), self.keys.control_stream()]
        args = [ORIGIN_MARKER_TTL_S, kind, ujson.dumps(message, ensure_ascii=False)]
        self._submit(keys=keys, args=args, client=pipe)

    def pending(self) -> list[tuple[str, dict[str, Any]]]:
        """Every entry in the stream as ``(kind, request)``, oldest first (for tests and tools)."""
        entries = self.redis.xrange(self.keys.control_stream())
        return [(fields[b"kind"].decode(), ujson.loads(fields[b"request"])) for _, fields in entries]
