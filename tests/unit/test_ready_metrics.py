"""``crawlhive_queue_ready_domains`` and ``crawlhive_queue_ready_backlog`` (crawler/view.py): the work
ready to fetch now, what the crawler autoscalers read (deploy/kubernetes/), on a real Redis: a domain
parked by a ``Retry-After`` (its ready time pushed later) or by its throttle counts in the backlog but
not as ready; each lane (plain, rendering) apart. The ``FRONTIER_SHARDS=4`` pass of `make test` runs
it on a sharded frontier too."""

from __future__ import annotations

from typing import Any

import redis
from prometheus_client.core import Metric
from support.crawler import seed

from crawlhive.crawler.view import CrawlerView, ready_metrics
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import FrontierReader, defer_domain
from crawlhive.utils.process.views import ViewContext
from crawlhive.utils.state.stats import Stats


def samples(metrics: list[Metric]) -> dict[tuple[str, str, str], float]:
    return {(m.name, s.labels["spiderid"], s.labels["lane"]): s.value for m in metrics for s in m.samples}


def test_only_domains_that_may_be_fetched_now_are_ready(redis_settings: Settings, redis_client: redis.Redis) -> None:
    keys = keys_from_settings(redis_settings)
    view = CrawlerView.from_context(
        "crawler",
        ViewContext(
            redis_client,
            keys,
            Stats(redis_client, keys, [60]),
            FrontierReader(redis_client, keys, 3600),
            frozenset({200}),
        ),
    )
    assert list(ready_metrics(view.ready())) and samples(list(ready_metrics(view.ready()))) == {}  # nothing queued
    base: dict[str, Any] = {"appid": "app", "crawlid": "ready"}
    for url in ("http://example.com/1", "http://example.com/2", "http://example.org/1", "http://example.org/2"):
        seed(redis_settings, redis_client, url=url, **base)
    seed(redis_settings, redis_client, url="http://example.net/1", appid="app", crawlid="drawn", render=True)
    got = samples(list(ready_metrics(view.ready())))
    assert got[("crawlhive_queue_ready_domains", "link", "plain")] == 2
    assert got[("crawlhive_queue_ready_backlog", "link", "plain")] == 4
    assert got[("crawlhive_queue_ready_domains", "link", "render")] == 1
    assert got[("crawlhive_queue_ready_backlog", "link", "render")] == 1

    defer_domain(redis_client, keys, "link", "example.org", 60)  # a Retry-After: parked a minute
    defer_domain(redis_client, keys, "link", "example.net", 60)
    got = samples(list(ready_metrics(view.ready())))
    assert got[("crawlhive_queue_ready_domains", "link", "plain")] == 1
    assert got[("crawlhive_queue_ready_backlog", "link", "plain")] == 2  # example.org's 2 wait
    assert got[("crawlhive_queue_ready_domains", "link", "render")] == 0
    assert got[("crawlhive_queue_ready_backlog", "link", "render")] == 0
