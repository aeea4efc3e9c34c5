"""The Redis frontier: one module per role (docs/architecture.md has the map).

* :mod:`.model`: the queued request (:class:`FrontierRequest`), its score, retries, dead letters;
* :mod:`.writer`: :class:`Frontier`, how requests are stored, indexed and counted (the layout);
* :mod:`.leasing`: :class:`FrontierLeaser`, the crawler's side (pop and lease, renew, ack, requeue);
* :mod:`.reader`: :class:`FrontierReader`, the redis-monitor's side (info, stop, complete, expiry);
* :mod:`.reclaim`: the reaper's reclaim of expired leases;
* :mod:`.domains`: a domain's next fetch time (``Retry-After``, domain-config changes).

Every Lua script these run is a file in ``utils/backends/lua/``, registered by :mod:`crawlhive.utils.backends.scripts`.

The names below are loaded on first use (PEP 562 ``__getattr__``), so that a process importing one
submodule (the cleaner's stats read ``model.FETCH_COUNTS``) does not load every other with its
dependencies (numpy for the Bloom sizing, the public-suffix list): a quarter of a second of every
process's start. The standard library's hook suffices; a lazy-loading package would add a
dependency and a stub file for these few lines.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crawlhive.utils.frontier.leasing import (
        POP_SCAN_DOMAINS,
        RECHECK_S,
        FrontierLeaser,
        Lease,
        PopOutcome,
        ThrottleConfig,
        TouchStatus,
    )
    from crawlhive.utils.frontier.model import (
        LEASE_EXPIRED,
        OPTION_FIELDS,
        OPTIONS_LOST,
        PRIORITY_MAX,
        PRIORITY_MIN,
        SEQ_SPAN,
        FrontierRequest,
        OptionSet,
        clamp_priority,
        decode_priority,
        encode_score,
        lease_member,
        parse_lease_member,
        retried,
        retry_backoff,
        seed_from_request,
    )
    from crawlhive.utils.frontier.pacing import (
        RETRY_AFTER_MAX_S,
        defer_domain,
        defer_site,
        parse_retry_after,
        recheck_domain,
        site_gate,
    )
    from crawlhive.utils.frontier.reader import CrawlState, DomainBacklog, FrontierReader
    from crawlhive.utils.frontier.reclaim import ReclaimResult, reclaim_expired_leases
    from crawlhive.utils.frontier.writer import WAKE_ANY, Frontier, wake_message, woken_shards

#: Where each name is: the submodule loaded the first time the name is read.
_SOURCES: dict[str, tuple[str, ...]] = {
    "leasing": (
        "POP_SCAN_DOMAINS",
        "RECHECK_S",
        "FrontierLeaser",
        "Lease",
        "PopOutcome",
        "ThrottleConfig",
        "TouchStatus",
    ),
    "model": (
        "LEASE_EXPIRED",
        "OPTION_FIELDS",
        "OPTIONS_LOST",
        "PRIORITY_MAX",
        "PRIORITY_MIN",
        "SEQ_SPAN",
        "FrontierRequest",
        "OptionSet",
        "clamp_priority",
        "decode_priority",
        "encode_score",
        "lease_member",
        "parse_lease_member",
        "retried",
        "retry_backoff",
        "seed_from_request",
    ),
    "pacing": (
        "RETRY_AFTER_MAX_S",
        "defer_domain",
        "defer_site",
        "parse_retry_after",
        "recheck_domain",
        "site_gate",
    ),
    "reader": (
        "CrawlState",
        "DomainBacklog",
        "FrontierReader",
    ),
    "reclaim": (
        "ReclaimResult",
        "reclaim_expired_leases",
    ),
    "writer": (
        "WAKE_ANY",
        "Frontier",
        "wake_message",
        "woken_shards",
    ),
}
_WHERE = {name: module for module, names in _SOURCES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "WAKE_ANY",
    "wake_message",
    "woken_shards",
    "LEASE_EXPIRED",
    "OPTIONS_LOST",
    "OPTION_FIELDS",
    "POP_SCAN_DOMAINS",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "RECHECK_S",
    "RETRY_AFTER_MAX_S",
    "SEQ_SPAN",
    "CrawlState",
    "DomainBacklog",
    "Frontier",
    "FrontierReader",
    "FrontierRequest",
    "FrontierLeaser",
    "OptionSet",
    "Lease",
    "PopOutcome",
    "ReclaimResult",
    "ThrottleConfig",
    "TouchStatus",
    "clamp_priority",
    "decode_priority",
    "defer_domain",
    "defer_site",
    "encode_score",
    "lease_member",
    "parse_lease_member",
    "parse_retry_after",
    "recheck_domain",
    "site_gate",
    "reclaim_expired_leases",
    "retried",
    "retry_backoff",
    "seed_from_request",
]
