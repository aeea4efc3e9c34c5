"""Compaction of Bloom seen-sets (docs/contract.md §3.8, §23.6), run by the redis-monitors.

A scalable Bloom filter (utils/frontier/bloom.py) costs 3-4 bytes per URL because each layer is
made before its fingerprints arrive. With FRONTIER_TAIL_URL set, every fingerprint an admit adds
to a filter is also appended to the filter's log in Redis (``lib/bloom.lua``), and this module
keeps the filter at about 1.9 bytes per URL by rebuilding it from that log:

**Seal** (:meth:`BloomCompactor.seal`). Once a filter's log holds 1,024 fingerprints or a 256th of
its count, the admit flags it in the shard's ``bloom_wanted``. A redis-monitor writes the log's
first bytes to the store as chunk *n* of the filter (``<root>/<shard>/bloom/<logid>/<n>.fps``:
durable before anything leaves Redis), then ``bloom_seal.lua`` drops those bytes from the log if
nothing sealed chunk *n* meanwhile. A kill between the two leaves the bytes in the log and an
object the next seal of chunk *n* overwrites: nothing is lost.

**Compact** (:meth:`BloomCompactor.compact`). When the filter's count reaches its ``next`` (half
way through its base's headroom, or its first layer half full), a redis-monitor reads every chunk
and the log's unsealed rest in one transaction's view, builds a base for all of them sized
``GROWTH`` above the count (numpy: :func:`~crawlhive.utils.frontier.bloom.build_base`), writes it
as a new generation of pieces (10 minutes to live), sets in them the bits of what the log gained
since (while that is more than a few thousand), and ``bloom_swap.lua`` adds the last few and makes
the new generation the filter's in one step, dropping the old one and every layer. Admits go on
throughout, against the old filter, which holds everything the new one is built from: no
fingerprint is ever missing from the filter an admit reads. A kill before the swap leaves the old
filter and pieces that expire; after it, chunks that the next sweep deletes.

Every 32 chunks, a compaction also writes them as one consolidated object (``c<n>.fps``) so that a
filter's log stays a few objects. A filter whose log is incomplete (a crawler without
FRONTIER_TAIL_URL added to it, or more than 16 MiB waited for a store that did not answer) is no
longer compacted: it goes on as a scalable filter, correct, at its 3-4 bytes per URL.

**Garbage** (:meth:`BloomCompactor.sweep`): every ten minutes, the log folders whose filter is gone
(expired with its crawl, or restarted afresh) and the chunks a consolidation replaced, older than
an hour, are deleted.
"""

from __future__ import annotations

import logging
import math
import secrets
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.backends.replication import ReplicaWait
from crawlhive.utils.backends.scripts import scripts
from crawlhive.utils.frontier import bloom
from crawlhive.utils.frontier.tails import (
    Schedule,
    StoreHealth,
    TailError,
    TailStore,
    is_redis_error,
    object_mtime,
)

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

MAGIC = b"CHBL1\n"
_HEADER = struct.Struct("<II")  # fingerprints, CRC-32 of them
#: Most bytes one seal takes from a log (a million fingerprints).
SEAL_MAX_BYTES = 12 * (1 << 20)
#: A log asks to be sealed from this many bytes, or a 256th of its filter's count (lib/bloom.lua).
SEAL_MIN_BYTES = 12 * 1024
#: Unconsolidated chunks from which a compaction writes them as one object.
CONSOLIDATE_AFTER = 32
#: A compaction catches up with the log in Python while it grew more than this since its read.
CATCHUP_BYTES = 12 * 2000
#: Milliseconds a new generation's pieces live until the swap gives them the filter's expiry.
PIECE_TTL_MS = 600_000
#: Milliseconds a redis-monitor holds a filter's lock (renewed while it compacts).
LOCK_MS = 120_000
#: Filters one pass takes from each shard's wanted set.
FLAGS_PER_PASS = 16
#: Seconds before a filter whose work failed with the store is looked at again.
STORE_RETRY_S = 2.0
SWEEP_EVERY_S = 600.0
SWEEP_AGE_S = 3600.0


def encode_chunk(fingerprints: bytes) -> bytes:
    """A chunk object of *fingerprints* (12 bytes each, back to back)."""
    return MAGIC + _HEADER.pack(len(fingerprints) // 12, zlib.crc32(fingerprints)) + fingerprints


def decode_chunk(data: bytes) -> bytes:
    """The fingerprints of chunk object *data*.

    Raises:
        TailError: not a chunk, or damaged.
    """
    head = len(MAGIC) + _HEADER.size
    if not data.startswith(MAGIC) or len(data) < head:
        raise TailError("not a Bloom log chunk")
    count, crc = _HEADER.unpack_from(data, len(MAGIC))
    body = data[head:]
    if len(body) != count * 12 or zlib.crc32(body) != crc:
        raise TailError("Bloom log chunk fails its check")
    return body


@dataclass
class CompactionCounts:
    """What one :class:`BloomCompactor` did (tests, the bench, the log)."""

    sealed: int = 0
    compacted: int = 0
    aborted: int = 0
    lost: int = 0
    store_errors: int = 0


class BloomCompactor:
    """Seals Bloom filters' logs into the tail store and rebuilds the filters from them.

    Args:
        redis: a client of the frontier's Redis (bytes replies; thread-safe).
        keys: the key formats.
        store: the tail store (FRONTIER_TAIL_URL).
        replicas: REDIS_WAIT_REPLICAS (a swap is replicated before the chunks it replaced go).
    """

    def __init__(self, redis: RedisClient, keys: Keys, store: TailStore, replicas: ReplicaWait | None = None) -> None:
        self.redis = redis
        self.keys = keys
        self.store = store
        self.replicas = replicas
        self.scripts = scripts(redis)
        self.counts = CompactionCounts()
        self.health = StoreHealth(store, "Bloom filters keep their logs in Redis")
        self._warned_lost: set[str] = set()
        self._sweeps = Schedule(SWEEP_EVERY_S)

    @classmethod
    def from_settings(cls, redis: RedisClient, settings: Settings) -> Self | None:
        """The compactor of FRONTIER_TAIL_URL's store, or None without one or without Bloom filters
        (DUPEFILTER_BLOOM_ABOVE 0)."""
        if settings.DUPEFILTER_BLOOM_ABOVE <= 0:
            return None
        store = TailStore.from_settings(settings)
        if store is None:
            return None
        return cls(redis, keys_from_settings(settings), store, ReplicaWait.from_settings(redis, settings))

    # --- the loop --------------------------------------------------------------------------------

    def run(self, stop: threading.Event, idle_s: float = 0.2, max_idle_s: float = 2.0) -> None:
        """Work every shard's wanted filters until *stop* is set, sleeping (up to *max_idle_s*)
        while idle; errors are logged and retried."""
        sleep = idle_s
        while not stop.is_set():
            try:
                work = sum(self.run_once(shard) for shard in range(self.keys.shards))
                if not work:
                    self._sweep_due()
            except Exception as exc:
                if not is_redis_error(exc):
                    logger.error("Bloom filter compaction failed; retrying", exc_info=True)
                work = 0
                sleep = max_idle_s
            if work:
                sleep = idle_s
                continue
            stop.wait(sleep)
            sleep = min(max_idle_s, sleep * 2)

    def run_once(self, shard: int = 0) -> int:
        """Work the filters of *shard* that asked (up to FLAGS_PER_PASS); returns how many."""
        wanted = self.keys.bloom_wanted(shard)
        flags = self.redis.zrangebyscore(wanted, "-inf", time.time(), start=0, num=FLAGS_PER_PASS)
        for raw in flags:
            key = raw.decode() if isinstance(raw, bytes) else str(raw)
            retry = self.work(shard, key)
            if retry is None:  # the flag goes, unless an admit made the filter due meanwhile
                self.scripts["bloom_done"](keys=[wanted, key])
            else:
                self.redis.zadd(wanted, {key: time.time() + retry})
        return len(flags)

    def work(self, shard: int, key: str) -> float | None:
        """Seal the log of the filter whose state is *key* and compact it if due. Returns None when
        done (the flag may go), else seconds after which to look again (another redis-monitor holds
        the filter, or the store failed)."""
        token = secrets.token_hex(8)
        lock = self.keys.bloom_lock_of(key)
        if not self.redis.set(lock, token, nx=True, px=LOCK_MS):
            return 1.0
        try:
            state = self._state(key)
            if not state:
                return None
            if state.get("log") != "1":
                self.redis.delete(self.keys.bloom_log_of(key))
                if key not in self._warned_lost:
                    self._warned_lost.add(key)
                    logger.info("Bloom filter %s has an incomplete log: it stays a scalable filter", key)
                return None
            if not state.get("logid"):
                self.redis.hsetnx(key, "logid", secrets.token_hex(8))
                state = self._state(key)
            due = int(state.get("count", 0)) >= int(state.get("next", 0) or 0)
            self.seal(shard, key, state, everything=due)
            if due:
                self.compact(shard, key, lock)
            self.health.up()
            return None
        except OSError as exc:
            self._down(exc)
            return STORE_RETRY_S
        finally:
            self.scripts["lock_release"](keys=[lock], args=[token])

    def _state(self, key: str) -> dict[str, str]:
        return _decoded(self.redis.hgetall(key))

    # --- seal ----------------------------------------------------------------------------------

    def chunk_path(self, shard: int, logid: str, name: str) -> str:
        """Where object *name* (``<n>.fps``, ``c<n>.fps``, ``key``) of log *logid* of *shard* is."""
        return f"{self.store.root}/{shard}/bloom/{logid}/{name}"

    def seal(self, shard: int, key: str, state: dict[str, str], *, everything: bool = False) -> int:
        """Write the log of the filter whose state is *key* to the store as chunks while it holds
        at least its seal size (with *everything*: while it holds any), dropping each from Redis
        after it is durable. Returns the fingerprints sealed.

        Raises:
            OSError: the store refused a write (the log keeps them).
        """
        log = self.keys.bloom_log_of(key)
        sealed_fps = 0
        least = max(SEAL_MIN_BYTES, 12 * (int(state.get("count", 0)) // 256))
        while True:
            length = int(self.redis.strlen(log))
            take = min(length - length % 12, SEAL_MAX_BYTES)
            if take == 0 or (not everything and length < least):
                return sealed_fps
            data = _raw(self.redis.getrange(log, 0, take - 1))
            number = int(state.get("sealed", 0) or 0)
            logid = state["logid"]
            objects = [(self.chunk_path(shard, logid, f"{number}.fps"), encode_chunk(data))]
            if number == 0:  # the folder's owner, for the sweep
                objects.append((self.chunk_path(shard, logid, "key"), key.encode()))
            self.store.write_many(objects)
            if not self.scripts["bloom_seal"](keys=[key, log], args=[number, take]):
                self.counts.aborted += 1
                return sealed_fps
            self.counts.sealed += take // 12
            sealed_fps += take // 12
            state["sealed"] = str(number + 1)

    # --- compact -------------------------------------------------------------------------------

    def compact(self, shard: int, key: str, lock: str = "") -> bool:
        """Rebuild the filter whose state is *key* as one base of its count plus GROWTH from its
        log; True if the swap took it. A filter that outgrew the base while it was built is built
        again for its new count (up to three times; then the next flag does it). *lock*, the
        filter's lock this monitor holds, is renewed before the catch-up.

        Raises:
            OSError: the store could not be read or written.
        """
        for _attempt in range(3):
            swapped = self._compact_once(shard, key, lock)
            if swapped is not None:
                return swapped
        return False

    def _compact_once(self, shard: int, key: str, lock: str) -> bool | None:
        """One rebuild (:meth:`compact`); None if the filter outgrew it before its swap."""
        log = self.keys.bloom_log_of(key)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hgetall(key)
        pipe.get(log)
        raw_state, raw_log = pipe.execute()
        state = _decoded(raw_state)
        if state.get("log") != "1" or not state.get("logid"):
            return False
        unsealed = bytes(raw_log or b"")
        unsealed = unsealed[: len(unsealed) - len(unsealed) % 12]
        count = int(state["count"])
        sealed, cons = int(state.get("sealed", 0) or 0), int(state.get("cons", 0) or 0)
        sealed_fps = int(state.get("sealedfps", 0) or 0)
        if count != sealed_fps + len(unsealed) // 12:
            return self._lose(key, f"its log holds {sealed_fps + len(unsealed) // 12} of its {count} fingerprints")
        logid = state["logid"]
        names = ([f"c{cons}.fps"] if cons else []) + [f"{n}.fps" for n in range(cons, sealed)]
        blobs = self.store.read_many([self.chunk_path(shard, logid, name) for name in names])
        chunks: list[bytes] = []
        for name, blob in zip(names, blobs, strict=True):
            if blob is None:
                return self._lose(key, f"its log chunk {name} is missing from FRONTIER_TAIL_URL")
            try:
                chunks.append(decode_chunk(blob))
            except TailError as exc:
                return self._lose(key, f"its log chunk {name}: {exc}")
        if sum(len(c) for c in chunks) // 12 < sealed_fps:
            return self._lose(key, "its log chunks hold fewer fingerprints than were sealed")
        arrays = [np.frombuffer(c, dtype=np.uint8).reshape(-1, 12) for c in (*chunks, unsealed) if c]
        sizes = bloom.pieces(math.ceil(max(count, 1) * (1 + bloom.GROWTH)))
        capacity = bloom.base_capacity(sizes)
        built = bloom.build_base(iter(arrays), sizes)
        old = int(state.get("gen", 0) or 0)
        new = old + 1
        pieces = [self.keys.bloom_piece_of(key, new, i) for i in range(len(sizes))]
        pipe = self.redis.pipeline(transaction=False)
        for name, data in zip(pieces, built, strict=True):
            pipe.set(name, data, px=PIECE_TTL_MS)
        pipe.execute()
        del built
        consolidated = ""
        if sealed - cons >= CONSOLIDATE_AFTER:
            self.store.write(self.chunk_path(shard, logid, f"c{sealed}.fps"), encode_chunk(b"".join(chunks)))
            consolidated = str(sealed)
        if lock:
            self.redis.pexpire(lock, LOCK_MS)
        at = self._catch_up(log, len(unsealed), pieces, sizes, capacity - sealed_fps)
        overflow = max(1, capacity // 16)
        reply = self.scripts["bloom_swap"](
            keys=[key, log],
            args=[
                old,
                new,
                sealed,
                at,
                ",".join(map(str, sizes)),
                capacity,
                bloom.first_exp(overflow, bloom.OVERFLOW_K),
                bloom.OVERFLOW_K,
                count + max(1, (capacity - count) // 2),
                consolidated,
            ],
        )
        if int(reply[0]) != 1:
            self.counts.aborted += 1
            for name in pieces:
                self.redis.delete(name)
            if consolidated:
                self.store.delete([self.chunk_path(shard, logid, f"c{sealed}.fps")])
            logger.debug("compaction of %s gave way (%s)", key, _text(reply[1]))
            return None if _text(reply[1]) == "grown" else False
        self.counts.compacted += 1
        if consolidated:
            if self.replicas is not None:
                self.replicas.wait([shard], cluster_wide=False)
            self.store.delete([self.chunk_path(shard, logid, name) for name in names])  # what c<sealed> replaced
        return True

    def _catch_up(self, log: str, at: int, pieces: list[str], sizes: list[int], room: int) -> int:
        """Set in the new *pieces* the bits of what *log* gained past byte *at* while that is more
        than CATCHUP_BYTES, up to byte 12 x *room* (the base's capacity: what comes after goes to
        layers in the swap); returns the byte up to which they hold the log."""
        bits = sum(sizes) * 8
        firsts = np.cumsum([0] + [size * 8 for size in sizes[:-1]], dtype=np.uint64)
        while True:
            length = min(int(self.redis.strlen(log)), 12 * room)
            if length - at <= CATCHUP_BYTES:
                return at
            end = length - length % 12
            data = _raw(self.redis.getrange(log, at, end - 1))
            rows = np.frombuffer(data, dtype=np.uint8).reshape(-1, 12)
            pipe = self.redis.pipeline(transaction=False)
            for where in bloom.base_bit_positions(rows, bits):
                piece = np.searchsorted(firsts, where, side="right") - 1
                for index in np.unique(piece):
                    offsets = (where[piece == index] - firsts[index]).tolist()
                    for first in range(0, len(offsets), 10_000):  # commands of 40,000 arguments at most
                        args: list[Any] = []
                        for offset in offsets[first : first + 10_000]:
                            args += ["SET", "u1", offset, 1]
                        pipe.execute_command("BITFIELD", pieces[int(index)], *args)
            pipe.execute()
            at = end

    def _lose(self, key: str, why: str) -> bool:
        """Stop compacting the filter *key* (its log cannot rebuild it): it goes on as a scalable filter."""
        self.counts.lost += 1
        logger.warning(
            "Bloom filter %s is no longer compacted: %s (FRONTIER_TAIL_URL %s)", key, why, self.store.public_url
        )
        self.redis.hset(key, "log", "lost")
        self.redis.delete(self.keys.bloom_log_of(key))
        return False

    # --- garbage -----------------------------------------------------------------------------

    def sweep(self, shard: int, older_than_s: float = SWEEP_AGE_S) -> int:
        """Delete the log objects of *shard* older than *older_than_s* whose filter is gone or that
        a consolidation replaced; returns how many.

        Raises:
            OSError: the store could not be listed.
        """
        folder = f"{self.store.root}/{shard}/bloom"
        try:
            entries = self.store.fs.find(folder, detail=True)
        except FileNotFoundError:
            return 0
        now = time.time()
        by_log: dict[str, list[tuple[str, str, float]]] = {}
        for path, info in entries.items():
            parts = str(path).rsplit("/", 2)
            if len(parts) != 3:
                continue
            by_log.setdefault(parts[1], []).append((str(path), parts[2], now - object_mtime(info)))
        dead: list[str] = []
        for logid, files in by_log.items():
            owner = next((path for path, name, _age in files if name == "key"), None)
            key = ""
            if owner is not None:
                data = self.store.read_many([owner])[0]
                key = data.decode() if data else ""
            state = self._state(key) if key else {}
            old = [(path, name) for path, name, age in files if age >= older_than_s]
            if state.get("logid") != logid:
                if len(old) == len(files):  # the filter is gone: the whole folder
                    dead += [path for path, _name in old]
                continue
            cons = int(state.get("cons", 0) or 0)
            for path, name in old:
                if name.endswith(".fps") and name[0] == "c" and name != f"c{cons}.fps":
                    dead.append(path)
                elif name.endswith(".fps") and name[:-4].isdigit() and int(name[:-4]) < cons:
                    dead.append(path)
        self.store.delete(dead)
        if dead:
            logger.info("deleted %d Bloom log objects of shard %d that no filter needs", len(dead), shard)
        return len(dead)

    def _sweep_due(self) -> None:
        self._sweeps.sweep_shards(self.keys.shards, self.sweep, self._down)

    def _down(self, exc: BaseException) -> None:
        self.counts.store_errors += 1
        self.health.down(exc)


def _raw(value: Any) -> bytes:
    """A bytes client's reply as bytes (the compactor's client answers bytes; a str is encoded)."""
    return value.encode("latin-1") if isinstance(value, str) else bytes(value or b"")


def _decoded(raw: dict[Any, Any]) -> dict[str, str]:
    """A filter's state hash as text."""
    return {_text(k): _text(v) for k, v in raw.items()}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
