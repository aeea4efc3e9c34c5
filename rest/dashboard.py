"""The data behind ``GET /dashboard`` (served as ``GET /dashboard/data``; not part of the contract).

One blocking call, :func:`dashboard_data`, reads a :class:`~crawlhive.rest.cluster.Snapshot` (with
per-domain rows) and the last dead letters this instance consumed, and shapes them for the page;
each kind's view adds its cards (:meth:`~crawlhive.utils.process.views.KindView.cards`: the
crawler's ``proxies``, the sinks' ``sinks``), in the registry's order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawlhive.rest.cluster import waiting_reason
from crawlhive.rest.recrawl_view import mark_recurring
from crawlhive.utils.process.kinds import kind_named

if TYPE_CHECKING:
    from crawlhive.rest.service import RestService
    from crawlhive.utils.frontier import CrawlState


#: Recently finished crawls the page lists (GET /crawls lists more).
FINISHED_SHOWN = 20


def crawl_row(state: CrawlState, stopped: bool = False, unserved: str | None = None) -> dict[str, Any]:
    """One line of the crawls table: counts, progress (0-100) and a one-word state (``waiting``:
    work is queued for a spider type no live crawler serves; *unserved* says why, shown as its
    ``reason``)."""
    done = state.crawled + state.failed
    total = done + state.pending + state.inflight
    if stopped:
        phase = "stopped"
    elif state.pending and not state.inflight and unserved:
        phase = "waiting"
    elif state.pending or state.inflight:
        phase = "running"
    elif done:
        phase = "complete"
    else:
        phase = "idle"
    return {
        "spiderid": state.spiderid,
        "appid": state.appid,
        "crawlid": state.crawlid,
        "queued": state.pending,
        "inflight": state.inflight,
        "crawled": state.crawled,
        "failed": state.failed,
        "domains": len(state.domains),
        "progress": round(100.0 * done / total, 1) if total else 0.0,
        "state": phase,
        "reason": unserved if phase == "waiting" else None,
        "expires": state.expires or None,
    }


def card_label(component: str) -> str:
    """The label of *component*'s node card (its kind's ``card``: :mod:`crawlhive.utils.process.kinds`)."""
    try:
        return kind_named(component).card_label
    except KeyError:
        return component


def _number(value: float) -> float | None:
    """*value*, or None for NaN (JSON has no NaN)."""
    return None if value != value else value


def dashboard_data(rest: RestService) -> dict[str, Any]:
    """Everything the page shows, as one JSON-able dict (blocking; raises ``redis.RedisError``)."""
    snap = rest.view.snapshot(with_domains=True)
    counters = snap.counters
    assert counters is not None
    flags = rest.view.stopped(snap.crawls)
    # Which lanes of each spider type a live crawler serves: plain, and rendering (§15).
    serving = {(name, False) for name, s in snap.spiders.items() if s.crawlers > s.render_crawlers}
    serving |= {(name, True) for name, s in snap.spiders.items() if s.render_crawlers}
    rows = (crawl_row(s, stopped, waiting_reason(s, serving)) for s, stopped in zip(snap.crawls, flags, strict=True))
    crawls = sorted(rows, key=lambda r: (r["state"] != "running", r["appid"], r["crawlid"]))
    mark_recurring(rest.view.redis, rest.view.keys, crawls)  # §19.6: next due time, changed ratio
    return {
        "server_time": snap.server_time,
        "node_id": rest.node_id,
        "kafka_connected": rest.kafka.connected(),
        "nodes": {
            component: {
                "count": sum(len(ids) for ids in hosts.values()),
                "hosts": hosts,
                "label": card_label(component),
            }
            for component, hosts in snap.nodes.items()
        },
        "spiders": [
            {
                "spiderid": s.spiderid,
                "backlog": s.backlog,
                "domains": s.domains,
                "inflight": s.inflight,
                "active_crawls": s.active_crawls,
                "crawlers": s.crawlers,
                "render_crawlers": s.render_crawlers,
            }
            for _, s in sorted(snap.spiders.items())
        ],
        "crawls": crawls,
        "domains": snap.domains,
        "totals": {
            "pages_crawled": sum(counters.pages_crawled.values()),
            "requests_failed": sum(counters.requests_failed.values()),
            "incoming": counters.incoming,
            "dead_letters": counters.dead_letters,
            "cleaner": {**counters.cleaner, "lag": _number(rest.cleaner_lag())},
        },
        "dead_letters": list(reversed(rest.kafka.dead_letters.copy())),  # copy(): atomic vs the listener
        "finished": rest.view.crawl_list("finished", FINISHED_SHOWN),
        "domain_config": rest.view.domain_config(),
        **{key: card for view in rest.view.views() for key, card in view.cards().items()},
    }
