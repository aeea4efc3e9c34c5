"""``crawlhive_response_seconds`` and the per-domain counters of ``/metrics`` (docs/contract.md §22.3):
a real crawler fetches pages of a loopback site, fast and slow, found and missing, and the REST
registry (what ``GET /metrics`` writes) exposes their histogram and each domain's successes and
failures; the domain label is bounded to the METRICS_TOP_DOMAINS busiest."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from support.crawler import TestSite, crawler_module, html, seed

from crawlhive.rest.cluster import ClusterView
from crawlhive.rest.metrics import RestMetrics
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.state.response_metrics import BUCKETS, ResponseMetrics

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    served = TestSite()
    served.page("/robots.txt", b"User-agent: *\n", content_type="text/plain")
    served.page("/", html("/fast", "/slow", "/missing", title="home"))
    served.page("/fast", html(title="fast"))
    served.page("/missing", b"gone", status=404)

    def slow(_seen: Any) -> tuple[int, dict[str, str], bytes]:
        time.sleep(0.3)
        return 200, {"Content-Type": "text/html"}, html(title="slow")

    served.handler("/slow", slow)
    served.start()
    yield served
    served.stop()


def samples(metrics: RestMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for sample in family.samples
    }


def registry(client: redis.Redis, settings: Settings) -> RestMetrics:
    return RestMetrics(ClusterView(client, settings, {}), waiting=lambda: 0, stored=lambda: 0)


def test_a_crawl_shows_its_response_times_and_each_domains_outcomes(
    redis_url: str, kafka_bootstrap: str, tmp_path: Path, site: TestSite
) -> None:
    with crawler_module(redis_url, kafka_bootstrap, tmp_path, "rm", CRAWLER_STATS_FLUSH_S=0.2) as crawl:
        settings, client = crawl["settings"], crawl["redis"]

        seed(settings, client, url=site.url("/"), appid="app", crawlid="c1", spiderid="link", maxdepth=1)
        seed(settings, client, url="http://127.0.0.1:9/refused", appid="app", crawlid="c2", spiderid="link")
        metrics = registry(client, settings)
        deadline = time.monotonic() + 60
        want = ("crawlhive_response_seconds_count", (("spiderid", "link"),))
        while samples(metrics).get(want, 0) < 5:  # robots.txt, /, /fast, /slow, /missing
            assert time.monotonic() < deadline, (samples(metrics), crawl["crawler"].output()[-3000:])
            time.sleep(0.2)
        time.sleep(1.0)  # the refused connection's retries end
        got = samples(metrics)
        count = got[want]
        assert got[("crawlhive_response_seconds_bucket", (("le", "+Inf"), ("spiderid", "link")))] == count
        slow = got[("crawlhive_response_seconds_bucket", (("le", "0.25"), ("spiderid", "link")))]
        assert slow <= count - 1, "the 0.3 s page is above the 0.25 s bucket"
        assert got[("crawlhive_response_seconds_sum", (("spiderid", "link"),))] >= 0.3
        ok = got[("crawlhive_domain_responses_total", (("domain", "127.0.0.1"), ("outcome", "success")))]
        bad = got[("crawlhive_domain_responses_total", (("domain", "127.0.0.1"), ("outcome", "failure")))]
        assert ok >= 4, got  # robots.txt, /, /fast, /slow
        assert bad >= 2, got  # /missing (404) and the refused connection on port 9


def test_only_the_busiest_domains_get_a_label(redis_client: redis.Redis, redis_settings: Settings) -> None:
    settings = Settings.from_overrides(**{**dict(redis_settings.items()), "METRICS_TOP_DOMAINS": 3})
    keys = keys_from_settings(settings)
    buffer = ResponseMetrics("link", keys, 3)
    for i in range(8):
        for _ in range(i + 1):
            buffer.observe(f"d{i}.example", 0.01, 200 if i % 2 else 500)
    buffer.observe("d7.example", None, None)  # a network failure: counted, not timed
    buffer.flush(redis_client)
    got = samples(registry(redis_client, settings))
    domains = {dict(labels)["domain"] for name, labels in got if name == "crawlhive_domain_responses_total"}
    assert domains == {"d7.example", "d6.example", "d5.example"}
    assert got[("crawlhive_domain_responses_total", (("domain", "d7.example"), ("outcome", "success")))] == 8
    assert got[("crawlhive_domain_responses_total", (("domain", "d7.example"), ("outcome", "failure")))] == 1
    assert got[("crawlhive_domain_responses_total", (("domain", "d6.example"), ("outcome", "failure")))] == 7
    assert got[("crawlhive_response_seconds_count", (("spiderid", "link"),))] == 36
    assert got[("crawlhive_response_seconds_bucket", (("le", format(BUCKETS[0], "g")), ("spiderid", "link")))] == 36


def test_redis_keeps_a_bounded_number_of_domains(redis_client: redis.Redis, redis_settings: Settings) -> None:
    keys = keys_from_settings(redis_settings)
    buffer = ResponseMetrics("link", keys, 1)  # keeps 20 domains (+100 slack before a trim)
    for i in range(150):
        buffer.observe(f"d{i}.example", None, 200 if i < 149 else 404)
    buffer.observe("d149.example", None, 404)
    buffer.flush(redis_client)
    assert redis_client.zcard(keys.metrics_domains()) == 20
    assert redis_client.zscore(keys.metrics_domains(), "d149.example") == 2
    assert redis_client.hlen(keys.metrics_domain_failures()) == 1
