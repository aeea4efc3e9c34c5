"""The Bloom seen-set a crawl's dupefilter continues in (docs/contract.md §3.8, docs/operations.md).

A crawl's dupefilter (:meth:`~crawlhive.utils.backends.keys.Keys.dupefilter`) keeps about 70 bytes
of Redis memory per URL. Once it holds its shard's share of DUPEFILTER_BLOOM_ABOVE entries
(DUPEFILTER_BLOOM_ABOVE / FRONTIER_SHARDS, rounded up: the setting is cluster-wide) it is frozen (read
first, never written again) and the crawl's new fingerprints go to a Bloom filter in the same shard
(:meth:`~crawlhive.utils.backends.keys.Keys.dupefilter_bloom`), which ``crawler_admit.lua`` reads
and writes inside the admit it already runs (``lib/bloom.lua``): no round trip more per page, and
no script that converts a whole set at once (that would block Redis).

**Sizing.** A Bloom filter of *m* bits holding *n* fingerprints set with *k* hash positions each
answers a new fingerprint "seen" with probability ``(1 - e^(-kn/m))^k``; at ``m/n = k / ln 2``
(half the bits set, the optimum) that is ``2^-k``. How many URLs a crawl will see is not known in
advance, so the filter grows as a *scalable* Bloom filter (Almeida et al., 2007): layer *i* is made
when layer *i - 1* is full, with twice its bytes and one hash position more, ``k_i = 11 + i``. Full,
layer *i* errs with probability ``2^-(11 + i)``; a new URL is looked up in every layer, so the error
over all of them stays under ``sum 2^-(11 + i) = 2^-10 = 0.098 %``, however many layers there are.
Layer 0 costs ``11 / ln 2 = 15.9`` bits (1.98 bytes) per URL when full, layer *i*
``(11 + i) / ln 2``; each layer is a string of ``2^e - 16`` bytes (Redis allocates exactly ``2^e``
bytes for it), layer 0's sized to hold at least DUPEFILTER_BLOOM_ABOVE fingerprints, a layer at
most 64 MiB (``2^26`` bytes: making one blocks Redis for tens of milliseconds; after that each new
layer has the same size). After :data:`MAX_LAYERS` layers the last takes every new fingerprint and
its error grows. A layer is allocated whole when it is made, and each costs more bits per URL than
the last, so the filter's bytes per URL are about 2 only while layer 0 is the only one: measured
(bench/tails.py) 4.2 over 1 M URLs grown from 10,000 (7 layers), 3.3 over 10 M grown from 100,000;
up to twice a full filter's just after a layer was made.

**Compaction** (with FRONTIER_TAIL_URL set; utils/frontier/bloom_compactor.py). A filter of about 2
bytes per URL needs to know how many it will hold, so it is rebuilt, in small steps, from a log of
its fingerprints: every fingerprint the admit adds is also appended (12 bytes) to the filter's log
in Redis, which the redis-monitors seal into objects of the tail store. When the filter has grown by
half its headroom, a redis-monitor builds a **base** for all of them (:func:`build_base`): one Bloom
filter of ``BASE_BITS_PER_FP`` bits per fingerprint of a capacity ``GROWTH`` above its count, with
``BASE_K`` positions each, at most 0.0905 % false positives when full (``(1 - e^(-10/14.6))^10``),
1.83 bytes per URL then and 1.90 just after it is built. Its bits are a few strings of ``2^e - 16``
bytes (:func:`pieces`: exact allocations, the total within 3 % of what the capacity needs) read as
one bit array. New fingerprints go to the base until it is full; past that (a rebuild late, the
store down) to scalable layers as above but starting at ``OVERFLOW_K`` positions, which add at most
``2^-14`` (0.006 %) over all of them: 0.097 % in all.

**Hashing.** A stored fingerprint is 12 bytes of Scrapy's SHA1 fingerprint (crawler/admit.py), so
already uniform: its three 32-bit words *h1, h2, h3* give layer *i*'s positions
``(h1 + j*h2 + (j*j + i)*h3) mod m_i`` for ``j < k_i`` (double hashing, Kirsch and Mitzenmacher).

This module is the Python twin of ``lib/bloom.lua`` (the same layout and positions): the memory
benchmark fills a filter with it and the tests check one against the other.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

#: Hash positions of layer 0; layer i uses FIRST_K + i.
FIRST_K = 11
#: Bounds of log2 of a layer's allocation (64 B .. 64 MiB).
MIN_EXP, MAX_EXP = 6, 26
#: Layers a filter grows to; the last then takes every new fingerprint.
MAX_LAYERS = 32
#: Bytes a layer's string is short of its power of two (the Redis string header and terminator).
HEADROOM = 16
LN2 = 0.6931471805599453
#: The error bound over all layers: sum of 2^-(FIRST_K + i).
MAX_FALSE_POSITIVE_RATE = 2.0 ** -(FIRST_K - 1)

#: Hash positions of a compacted base, and its bits per fingerprint of its capacity.
BASE_K = 10
BASE_BITS_PER_FP = 14.6
#: The term that sets a base's positions apart from a layer's (``j*j + BASE_TERM``).
BASE_TERM = 64
#: A base's capacity above the fingerprints it is built for (a rebuild every 2 % of growth or so:
#: at half of it). 1/16 left a filter of 15,000 fingerprints at 2.01 bytes each with its state.
GROWTH = 1 / 24
#: Hash positions of the first layer that takes fingerprints past a full base.
OVERFLOW_K = 15
#: The false-positive rate of a full base (BASE_K positions, BASE_BITS_PER_FP bits a fingerprint).
BASE_FALSE_POSITIVE_RATE = (1 - math.exp(-BASE_K / BASE_BITS_PER_FP)) ** BASE_K
#: Most pieces a base's bits are split into (each a power of two less HEADROOM, at most 2^MAX_EXP).
MAX_PIECES = 6


def first_exp(threshold: int, first_k: int = FIRST_K) -> int:
    """log2 of the bytes of the first layer of a filter that continues a dupefilter of *threshold*
    entries (or that takes *threshold* fingerprints past a full base, at *first_k* positions): the
    smallest power of two holding at least that many (within the bounds)."""
    need = threshold * first_k / LN2 / 8 + HEADROOM
    exp = MIN_EXP
    while exp < MAX_EXP and 2.0**exp < need:
        exp += 1
    return exp


def layer_bits(exp: int, layer: int) -> int:
    """Bits of layer *layer* of a filter whose first layer is ``2^exp`` bytes."""
    return int((2 ** min(exp + layer, MAX_EXP) - HEADROOM) * 8)


def capacity(exp: int, layer: int, first_k: int = FIRST_K) -> int:
    """Fingerprints layer *layer* takes before the next is made (``m / n = k / ln 2``)."""
    return math.floor(layer_bits(exp, layer) * LN2 / (first_k + layer))


def positions(fingerprint: bytes, layer: int, bits: int, first_k: int = FIRST_K) -> list[int]:
    """The bit positions of a stored *fingerprint* (12 bytes) in layer *layer* of *bits* bits."""
    h1, h2, h3 = (int.from_bytes(fingerprint[i : i + 4], "big") for i in (0, 4, 8))
    return [(h1 + j * h2 + (j * j + layer) * h3) % bits for j in range(first_k + layer)]


def base_positions(fingerprint: bytes, bits: int) -> list[int]:
    """The bit positions of *fingerprint* in a compacted base of *bits* bits (over all its pieces)."""
    h1, h2, h3 = (int.from_bytes(fingerprint[i : i + 4], "big") for i in (0, 4, 8))
    return [(h1 + j * h2 + (j * j + BASE_TERM) * h3) % bits for j in range(BASE_K)]


def pieces(capacity_fps: int) -> list[int]:
    """The byte sizes of the strings a base of *capacity_fps* fingerprints is kept in, largest
    first: the top bits of the bytes it needs, each a power of two less HEADROOM (what Redis
    allocates exactly), the last rounded up, so the total is within ``2^-(MAX_PIECES - 1)`` of
    the need; as many 2^MAX_EXP pieces as a very large base needs before those."""
    need = math.ceil(capacity_fps * BASE_BITS_PER_FP / 8)  # payload bytes still to place
    sizes: list[int] = []
    while need > 0:
        exp = min(MAX_EXP, max(MIN_EXP, (need + HEADROOM).bit_length() - 1))
        if len(sizes) == MAX_PIECES - 1 and 2**MAX_EXP - HEADROOM >= need:  # the last: rounded up
            exp = max(MIN_EXP, (need + HEADROOM - 1).bit_length())
        sizes.append(2**exp - HEADROOM)
        need -= 2**exp - HEADROOM
    return sizes


def base_capacity(piece_bytes: list[int]) -> int:
    """Fingerprints a base of these pieces takes at BASE_BITS_PER_FP bits each."""
    return math.floor(sum(piece_bytes) * 8 / BASE_BITS_PER_FP)


def _words(fingerprints: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three big-endian 32-bit words of each row of *fingerprints* (n x 12 uint8), as uint64."""
    words = np.ascontiguousarray(fingerprints).view(">u4").reshape(-1, 3).astype(np.uint64)
    return words[:, 0], words[:, 1], words[:, 2]


def base_bit_positions(fingerprints: np.ndarray, bits: int) -> Iterator[np.ndarray]:
    """The bit positions (uint64) of every row of *fingerprints* (n x 12 uint8) in a base of *bits*
    bits, one array per hash position: :func:`base_positions` vectorised (every value stays
    below 2^42, so uint64 arithmetic is exact)."""
    h1, h2, h3 = _words(fingerprints)
    m = np.uint64(bits)
    for j in range(BASE_K):
        yield (h1 + np.uint64(j) * h2 + np.uint64(j * j + BASE_TERM) * h3) % m


def build_base(chunks: Iterator[np.ndarray], piece_bytes: list[int]) -> list[bytes]:
    """The pieces of a base holding every fingerprint of *chunks* (arrays of n x 12 uint8).

    Why numpy and not a library: the bits must be exactly those ``lib/bloom.lua`` reads (its
    positions, Redis's bit order: the byte's top bit first), which no Bloom package lays out; one
    byte per bit, packed at the end, sets 10 positions a fingerprint at numpy speed."""
    bits = sum(piece_bytes) * 8
    flags = np.zeros(bits, dtype=np.bool_)
    for chunk in chunks:
        for step in range(0, len(chunk), 1 << 20):
            for where in base_bit_positions(chunk[step : step + (1 << 20)], bits):
                flags[where] = True
    packed = np.packbits(flags)  # big-endian bit order: SETBIT / BITFIELD's
    out, at = [], 0
    for size in piece_bytes:
        out.append(packed[at : at + size].tobytes())
        at += size
    return out


@dataclass
class BloomLayers:
    """A filter built in memory, laid out as ``lib/bloom.lua`` keeps it in Redis (the memory
    benchmark writes one whole instead of through a million admits).

    Attributes:
        exp: log2 of the first layer's bytes.
        layers: each layer's bits.
        count: fingerprints added.
    """

    exp: int
    layers: list[bytearray]
    count: int = 0

    @classmethod
    def for_threshold(cls, threshold: int) -> BloomLayers:
        exp = first_exp(threshold)
        return cls(exp, [bytearray(layer_bits(exp, 0) // 8)])

    def add(self, fingerprint: bytes) -> None:
        """Add *fingerprint* (not yet in the filter) to the last layer, growing as the Lua does."""
        first = sum(capacity(self.exp, i) for i in range(len(self.layers) - 1))
        last = len(self.layers) - 1
        if self.count - first >= capacity(self.exp, last) and len(self.layers) < MAX_LAYERS:
            self.layers.append(bytearray(layer_bits(self.exp, len(self.layers)) // 8))
            last += 1
        bits = self.layers[last]
        for p in positions(fingerprint, last, len(bits) * 8):
            bits[p >> 3] |= 0x80 >> (p & 7)  # BITFIELD/SETBIT number bits from the byte's top
        self.count += 1

    def __contains__(self, fingerprint: object) -> bool:
        assert isinstance(fingerprint, bytes)
        return any(
            all(bits[p >> 3] & (0x80 >> (p & 7)) for p in positions(fingerprint, i, len(bits) * 8))
            for i, bits in enumerate(self.layers)
        )
