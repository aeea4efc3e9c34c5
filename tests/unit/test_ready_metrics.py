"""``crawlhive_queue_ready_domains`` and ``crawlhive_queue_ready_backlog`` (crawler/view.py): the work
ready to fetch now, what the crawler autoscalers read (deploy/kubernetes/), on a real Redis: a domain
parked by a ``Retry-After`` (its ready time pushed later) or by its throttle counts in the backlog but
not as ready; each lane (plain, rendering) apart. The ``FRONTIER_SHARDS=4`` pass of `make test` runs
it on a sharded frontier too."""

from __future__ import annotations

import time
from typing import Any

import redis
from prometheus_client.core import Metric
from support.crawler import seed

from crawlhive.crawler.view import CrawlerView, ready_metrics
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import FrontierLeaser, FrontierReader, defer_domain
from crawlhive.utils.process.views import ViewContext
from crawlhive.utils.state.stats import Stats


def samples(metrics: list[Metric]) -> dict[tuple[str, str, str], float]:
    return {(m.name, s.labels["spiderid"], s.labels["lane"]): s.value for m in metrics for s in m.samples}


def _view(redis_client: redis.Redis, keys: Keys) -> CrawlerView:
    """The crawler view /metrics reads the ready gauges from."""
    return CrawlerView.from_context(
        "crawler",
        ViewContext(
            redis_client,
            keys,
            Stats(redis_client, keys, [60]),
            FrontierReader(redis_client, keys, 3600),
            frozenset({200}),
        ),
    )


def test_only_domains_that_may_be_fetched_now_are_ready(redis_settings: Settings, redis_client: redis.Redis) -> None:
    keys = keys_from_settings(redis_settings)
    view = _view(redis_client, keys)
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


def test_a_link_found_on_a_throttled_domain_is_not_ready(redis_settings: Settings, redis_client: redis.Redis) -> None:
    """The moderated throttle (default) parks a domain at each pop until its next fetch may start,
    its last request's pop too: a link its page adds (queued after that pop) counts in the backlog
    but not as ready work. Before, the last pop dropped the domain, the link made it ready at once,
    and the ready count rose by one until a crawler's next pop parked it again."""
    settings = redis_settings.copy_with(QUEUE_HITS=1, QUEUE_WINDOW=60)
    keys = keys_from_settings(settings)
    view = _view(redis_client, keys)
    leaser = FrontierLeaser.from_settings(redis_client, settings)
    seed(settings, redis_client, url="http://example.com/", appid="app", crawlid="parked")
    got = samples(list(ready_metrics(view.ready())))
    assert got[("crawlhive_queue_ready_domains", "link", "plain")] == 1
    lease = leaser.pop("link").lease
    assert lease is not None
    assert leaser.ack(lease)
    seed(settings, redis_client, url="http://example.com/a", appid="app", crawlid="parked")  # the page's link
    got = samples(list(ready_metrics(view.ready())))
    assert got[("crawlhive_queue_ready_backlog", "link", "plain")] == 0
    assert got[("crawlhive_queue_ready_domains", "link", "plain")] == 0
    outcome = leaser.pop("link")  # not before the window allows it
    assert outcome.lease is None and outcome.wait_s is not None and outcome.wait_s > 50


def test_a_domain_parked_with_nothing_queued_leaves_the_ready_set(
    redis_settings: Settings, redis_client: redis.Redis
) -> None:
    """A domain its last pop parked, when its time comes with nothing queued, is dropped by the
    next pop (which then finds nothing queued), not parked again and again."""
    settings = redis_settings.copy_with(QUEUE_HITS=1, QUEUE_WINDOW=1)
    keys = keys_from_settings(settings)
    leaser = FrontierLeaser.from_settings(redis_client, settings)
    seed(settings, redis_client, url="http://example.com/", appid="app", crawlid="drop")
    lease = leaser.pop("link").lease
    assert lease is not None and leaser.ack(lease)
    shard = keys.shard_of("example.com")
    assert redis_client.zscore(keys.domains("link", shard=shard), "example.com") is not None  # parked
    outcome = leaser.pop("link")
    assert outcome.lease is None and outcome.wait_s is not None and outcome.wait_s <= 1.5
    time.sleep(outcome.wait_s + 0.1)
    outcome = leaser.pop("link")
    assert outcome.lease is None and outcome.wait_s is None  # nothing queued
    assert redis_client.zscore(keys.domains("link", shard=shard), "example.com") is None
