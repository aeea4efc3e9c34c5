"""Frontier features (docs/contract.md §10.7, §14), seen from the site's side: a crawl's page budget
(``max_pages``, CRAWL_MAX_PAGES_DEFAULT) across crawler processes, and crawl-trap links never
requested."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from crawlerkit import Crawler, TestSite, crawler_env, crawler_module, html, isolated_settings, output_collector, seed

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def site() -> TestSite:
    site = TestSite()
    site.start()
    yield site  # type: ignore[misc]
    site.stop()


def _mesh(site: TestSite, prefix: str, n: int) -> None:
    """*n* pages under *prefix*, each linking to every other."""
    pages = [f"{prefix}{i}" for i in range(n)]
    for page in pages:
        site.page(page, html(*[p for p in pages if p != page]))


def test_trap_links_are_never_requested(site: TestSite, redis_url: str, kafka_bootstrap: str, tmp_path: Path) -> None:
    trap = "/t/cal/2026/11/2026/11/2026/11/2026/11/"
    long = "/t/" + "x" * 2100
    site.page("/t/0", html("/t/ok", trap, long, "/t/a/b/a/b/a/b/"))
    for page in ("/t/ok", trap, long, "/t/a/b/a/b/a/b/"):
        site.page(page, html())
    with crawler_module(redis_url, kafka_bootstrap, tmp_path, "t") as env:
        seed(env["settings"], env["redis"], appid="tapp", crawlid="t1", url=site.url("/t/0"), maxdepth=1)
        env["collector"].wait_for("t1", 3, timeout=30)
        env["collector"].settle("t1", quiet_s=1.0)
    assert sorted(s.path for s in site.hits("/t/")) == ["/t/0", "/t/a/b/a/b/a/b/", "/t/ok"]


def test_max_pages_bounds_a_crawl_across_two_crawlers(
    site: TestSite, redis_url: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """§10.7: at most max_pages requests of the crawl are fetched, seed included, whichever crawler
    admits them; CRAWL_MAX_PAGES_DEFAULT applies to a crawl without one, and the smaller wins."""
    _mesh(site, "/m/", 30)
    _mesh(site, "/d/", 30)
    _mesh(site, "/s/", 30)
    settings = isolated_settings(redis_url, kafka_bootstrap, tmp_path, "m")
    client = redis.Redis.from_url(redis_url)
    collector = output_collector(settings)
    env = crawler_env(settings, CONCURRENT_REQUESTS=16, CRAWL_MAX_PAGES_DEFAULT=9)
    crawlers = [Crawler(env, tmp_path, name=f"budget-{i}") for i in range(2)]
    try:
        for crawler in crawlers:
            crawler.wait_ready(client, settings["REDIS_KEY_PREFIX"], count=2)
        seed(settings, client, appid="mapp", crawlid="m1", url=site.url("/m/0"), maxdepth=3, max_pages=7)
        seed(settings, client, appid="mapp", crawlid="d1", url=site.url("/d/0"), maxdepth=3)  # the default: 9
        seed(settings, client, appid="mapp", crawlid="s1", url=site.url("/s/0"), maxdepth=3, max_pages=20)  # 9 wins
        for crawlid, expected in (("m1", 7), ("d1", 9), ("s1", 9)):
            collector.wait_for(crawlid, expected, timeout=30)
        for crawlid in ("m1", "d1", "s1"):
            collector.settle(crawlid, quiet_s=1.5)
    finally:
        codes = [crawler.terminate() for crawler in crawlers]
        collector.close()
        for key in client.scan_iter(match=f"{settings['REDIS_KEY_PREFIX']}*", count=1000):
            client.delete(key)
        client.close()
    assert codes == [0, 0], [c.output()[-2000:] for c in crawlers]
    assert len(site.hits("/m/")) == 7
    assert len(site.hits("/d/")) == 9
    assert len(site.hits("/s/")) == 9
    assert len(collector.of("m1")) == 7
