"""Outbound messages that always fit in one Kafka record (docs/contract.md §10.5).

An ``info`` answer about an appid with thousands of crawls, or a ``queue`` stats answer with
thousands of domains, can be larger than the producer accepts (KAFKA_PRODUCER_MAX_REQUEST_SIZE).
Such a send can never succeed, so retrying it wedged the redis-monitor that held it, and every
monitor after it. :func:`fit_message` cuts the message instead: the largest map or list in it (by
encoded size: ``crawls``, ``domains``, ``queues``, …) keeps as many of its first entries as fit,
again for the next largest if that is not enough, and the message says ``"truncated": true``.

Written here, not taken from a library: it needs our encoding
(:func:`~crawlhive.utils.contract.encoding.encode`) and our rule for which part gives way.
"""

from __future__ import annotations

import copy
from typing import Any

from crawlhive.utils.contract.encoding import encode

#: Bytes a Kafka record adds around its value (batch and record headers), kept free when fitting.
RECORD_OVERHEAD_BYTES = 512


def value_limit(max_request_size: int) -> int:
    """The largest record value a producer with *max_request_size* accepts."""
    return max(1024, max_request_size - RECORD_OVERHEAD_BYTES)


def _entries(value: Any) -> list[Any]:
    return list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else []


def _containers(value: Any, found: list[tuple[int, bool, Any]]) -> None:
    """Append ``(encoded size, is a collection, container)`` for every non-empty dict or list below
    *value*. A collection is a container whose size is spread over its entries (none holds half of
    it): ``domains``, ``crawlids``. A wrapper such as ``{"link": {...}}`` or
    ``{"domains": {...}, "total": 3}`` is not: cutting it would drop everything at once."""
    for child in _entries(value):
        if isinstance(child, dict | list) and child:
            size = len(encode(child))
            largest_entry = max(len(encode(entry)) for entry in _entries(child))
            found.append((size, len(child) > 1 and 2 * largest_entry <= size, child))
            _containers(child, found)


def _keep_first(container: Any, count: int, original: Any) -> None:
    """Make *container* hold the first *count* entries of *original* (a copy of its former self)."""
    if isinstance(container, dict):
        container.clear()
        container.update(list(original.items())[:count])
    else:
        container[:] = original[:count]


def fit_message(message: dict[str, Any], limit: int) -> bytes | None:
    """*message* encoded in at most *limit* bytes: as it is when it fits, else cut as described in
    the module docstring, with ``"truncated": true``. None when even cutting every map and list
    leaves it too large (one huge string): such a message cannot be sent at all."""
    data = encode(message)
    if len(data) <= limit:
        return data
    cut = copy.deepcopy(message)
    cut["truncated"] = True
    while True:
        data = encode(cut)
        if len(data) <= limit:
            return data
        found: list[tuple[int, bool, Any]] = []
        _containers(cut, found)
        if not found:
            return None
        collections = [entry for entry in found if entry[1]] or found
        _, _, largest = max(collections, key=lambda entry: entry[0])
        original = copy.copy(largest)
        low, high = 0, len(original) - 1  # the most entries that may fit; all of them do not
        while low < high:
            middle = (low + high + 1) // 2
            _keep_first(largest, middle, original)
            if len(encode(cut)) <= limit:
                low = middle
            else:
                high = middle - 1
        _keep_first(largest, low, original)
