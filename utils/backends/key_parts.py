"""The parts every Redis key and member of crawlhive is built from, and the machinery of the key
formats: escaping of client-chosen ids, lanes, shard heads, members naming a crawl, throttle keys,
and :class:`KeySpace`, the base of :class:`~crawlhive.utils.backends.keys.Keys`.

The key formats themselves, every one, are in :mod:`crawlhive.utils.backends.keys` (each a method
marked with :func:`key`); ``docs/redis-keys.md`` is generated from them by
:mod:`crawlhive.utils.backends.keys_doc`.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Self, TypeVar

from crawlhive.utils.config.errors import KeyFormatError, SettingsError

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

F = TypeVar("F", bound=Callable[..., str])


def escape(part: str) -> str:
    """*part* with ``%`` and ``:`` percent-encoded, so it never splits a key."""
    return part.replace("%", "%25").replace(":", "%3A")


def unescape(part: str) -> str:
    """The inverse of :func:`escape`."""
    return part.replace("%3A", ":").replace("%25", "%")


#: Suffix of the key kinds of the rendering lane of the frontier (§15).
RENDER_LANE = "-render"


def lane(kind: str, render: bool) -> str:
    """The key kind *kind* of the plain lane, or of the rendering lane when *render*."""
    return kind + RENDER_LANE if render else kind


def key(redis_type: str, ttl: str = "none") -> Callable[[F], F]:
    """Mark a :class:`Keys` method as a key format, for the generated documentation."""

    def mark(func: F) -> F:
        func._redis_type = redis_type  # type: ignore[attr-defined]
        func._ttl = ttl  # type: ignore[attr-defined]
        return func

    return mark


class KeySpace:
    """The prefix and frontier shards of one crawlhive cluster, and the parts its keys share: the
    shard heads (:meth:`head`), the shard of a domain (:meth:`shard_of`), the members naming a crawl
    (:meth:`crawl_member`, :meth:`crawl_ref`) and the throttle key (:meth:`throttle_key`). The
    key formats are :class:`~crawlhive.utils.backends.keys.Keys`'s.

    Raises:
        KeyFormatError: the prefix is empty or holds ``:``, ``{`` or ``}``; the shard count is
            outside 1-16384.
    """

    def __init__(self, prefix: str, shards: int = 1) -> None:
        if not prefix or any(ch in prefix for ch in ":{}"):
            raise KeyFormatError(f"REDIS_KEY_PREFIX: must be non-empty, without ':', '{{' or '}}', got {prefix!r}")
        if not 1 <= shards <= 16384:
            raise KeyFormatError(f"FRONTIER_SHARDS: must be 1-16384, got {shards}")
        self.prefix = prefix
        self.shards = shards
        self._heads = [f"{prefix}:"] if shards == 1 else [f"{prefix}:{{{prefix}.{k}}}:" for k in range(shards)]
        self._global = f"{prefix}:" if shards == 1 else f"{prefix}:{{{prefix}}}:"

    @classmethod
    def from_settings(cls, settings: Settings, shards: int | None = None) -> Self:
        """The keys of REDIS_KEY_PREFIX with *shards* shards, else FRONTIER_SHARDS. No I/O: when
        FRONTIER_SHARDS is 0 (automatic, which asks the server whether it is a Redis Cluster) use
        :func:`crawlhive.utils.backends.redis_clients.keys_from_settings`, or pass *shards*.

        Raises:
            SettingsError: the shard count is 0 (automatic) and no *shards* was given.
        """
        count = shards or settings.FRONTIER_SHARDS
        if not count:
            raise SettingsError(
                "FRONTIER_SHARDS is 0 (automatic): resolve it first "
                "(crawlhive.utils.backends.redis_clients.keys_from_settings)"
            )
        return cls(settings.REDIS_KEY_PREFIX, count)

    def shard_of(self, domain: str) -> int:
        """The shard of a queue's domain: CRC-32 of the domain modulo the shard count."""
        return zlib.crc32(domain.encode()) % self.shards if self.shards > 1 else 0

    def head(self, shard: int) -> str:
        """``<prefix>:`` and the hash tag of *shard* (nothing more with one shard)."""
        return self._heads[shard]

    def _parse(self, key_: str, kind: str, parts: int) -> list[str]:
        """Split *key_* into its *parts* variable parts after ``<prefix>:[<tag>:]<kind>:``."""
        head = f"{self.prefix}:"
        if not key_.startswith(head):
            raise KeyFormatError(f"not a {kind} key under prefix {self.prefix!r}: {key_!r}")
        rest = key_[len(head) :]
        if rest.startswith("{") and "}:" in rest:
            rest = rest[rest.index("}:") + 2 :]
        if not rest.startswith(kind + ":"):
            raise KeyFormatError(f"not a {kind} key under prefix {self.prefix!r}: {key_!r}")
        pieces = rest[len(kind) + 1 :].split(":", parts - 1)
        if len(pieces) != parts or not all(pieces):
            raise KeyFormatError(f"not a {kind} key: {key_!r}")
        return pieces

    @staticmethod
    def crawl_member(appid: str, crawlid: str) -> str:
        """Member naming a crawl within one spider type: ``<appid>:<crawlid>`` (escaped)."""
        return f"{escape(appid)}:{escape(crawlid)}"

    @staticmethod
    def parse_crawl_member(member: str) -> tuple[str, str]:
        appid, sep, crawlid = member.partition(":")
        if not sep or not appid or not crawlid:
            raise KeyFormatError(f"not a crawl member: {member!r}")
        return unescape(appid), unescape(crawlid)

    @staticmethod
    def crawl_ref(spider: str, appid: str, crawlid: str) -> str:
        """Member naming a crawl cluster-wide: ``<spider>:<appid>:<crawlid>`` (escaped)."""
        return f"{escape(spider)}:{escape(appid)}:{escape(crawlid)}"

    @staticmethod
    def parse_crawl_ref(ref: str) -> tuple[str, str, str]:
        pieces = ref.split(":")
        if len(pieces) != 3 or not all(pieces):
            raise KeyFormatError(f"not a crawl reference: {ref!r}")
        spider, appid, crawlid = pieces
        return unescape(spider), unescape(appid), unescape(crawlid)

    @staticmethod
    def throttle_key(domain: str, spider: str | None = None, egress_id: str | None = None) -> str:
        """The throttle key of docs/contract.md §3.11, the variable part of :meth:`throttle`.

        Format ``<spider>:<egress id>:<domain>``, a disabled part left empty: ``link::example.com``
        (per spider type and domain, the default), ``::example.com`` (per domain),
        ``link:203.0.113.7:example.com`` (plus egress). The domain comes last because it may contain
        ``:`` (``::1``); ``%`` and ``:`` in the egress id (an IPv6 address) are percent-encoded.

        Args:
            domain: the normalised domain (docs/contract.md §3.2).
            spider: the spiderid when ``SCHEDULER_TYPE_ENABLED``, else None.
            egress_id: ``CRAWLER_EGRESS_ID`` when ``SCHEDULER_IP_ENABLED``, else None.

        Raises:
            KeyFormatError: *domain* is empty or *spider* contains ``:``.
        """
        if not domain:
            raise KeyFormatError("throttle key: the domain must be non-empty")
        if spider and ":" in spider:
            raise KeyFormatError(f"throttle key: spider names never contain ':', got {spider!r}")
        egress = (egress_id or "").replace("%", "%25").replace(":", "%3A")
        return f"{spider or ''}:{egress}:{domain}"

    @staticmethod
    def parse_throttle_key(throttle_key: str) -> tuple[str, str | None, str | None]:
        """``link:203.0.113.7:example.com`` -> ``("example.com", "link", "203.0.113.7")``; a disabled
        part comes back as None."""
        pieces = throttle_key.split(":", 2)
        if len(pieces) != 3 or not pieces[2]:
            raise KeyFormatError(f"not a throttle key: {throttle_key!r}")
        spider, egress, domain = pieces
        egress = egress.replace("%3A", ":").replace("%25", "%")
        return domain, spider or None, egress or None
