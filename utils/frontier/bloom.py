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
up to twice a full filter's just after a layer was made. A filter of about 2 bytes per URL needs
its final count in advance, or rebuilding in small steps from a log of the fingerprints: not done.

**Hashing.** A stored fingerprint is 12 bytes of Scrapy's SHA1 fingerprint (crawler/admit.py), so
already uniform: its three 32-bit words *h1, h2, h3* give layer *i*'s positions
``(h1 + j*h2 + (j*j + i)*h3) mod m_i`` for ``j < k_i`` (double hashing, Kirsch and Mitzenmacher).

This module is the Python twin of ``lib/bloom.lua`` (the same layout and positions): the memory
benchmark fills a filter with it and the tests check one against the other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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


def first_exp(threshold: int) -> int:
    """log2 of the bytes of the first layer of a filter that continues a dupefilter of *threshold*
    entries: the smallest power of two holding at least that many (within the bounds)."""
    need = threshold * FIRST_K / LN2 / 8 + HEADROOM
    exp = MIN_EXP
    while exp < MAX_EXP and 2.0**exp < need:
        exp += 1
    return exp


def layer_bits(exp: int, layer: int) -> int:
    """Bits of layer *layer* of a filter whose first layer is ``2^exp`` bytes."""
    return int((2 ** min(exp + layer, MAX_EXP) - HEADROOM) * 8)


def capacity(exp: int, layer: int) -> int:
    """Fingerprints layer *layer* takes before the next is made (``m / n = k / ln 2``)."""
    return math.floor(layer_bits(exp, layer) * LN2 / (FIRST_K + layer))


def positions(fingerprint: bytes, layer: int, bits: int) -> list[int]:
    """The bit positions of a stored *fingerprint* (12 bytes) in layer *layer* of *bits* bits."""
    h1, h2, h3 = (int.from_bytes(fingerprint[i : i + 4], "big") for i in (0, 4, 8))
    return [(h1 + j * h2 + (j * j + layer) * h3) % bits for j in range(FIRST_K + layer)]


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
