"""The ``auto`` ladder's render rung end to end (docs/contract.md §25.5): a plain crawler
(FETCH=auto) and a rendering crawler (``crawlhive crawler --render``, Debian's
chromium-headless-shell) on one key prefix, against a local wall that no client without
JavaScript gets past, whatever its TLS fingerprint: its pages answer a challenge whose script sets
a cookie and loads the page's content, which the site gives only with that cookie.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from support.crawler import (
    Collector,
    Crawler,
    Seen,
    TestSite,
    crawler_env,
    html,
    isolated_settings,
    output_collector,
    redis_for,
    seed,
)

from crawlhive.utils.config.settings import Settings

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(not Path("/usr/bin/chromium-headless-shell").exists(), reason="no chromium-headless-shell"),
]

#: The wall's challenge: a bot-wall interstitial (FETCH_WALL_PATTERNS knows its title) whose
#: script sets the cookie the site wants and replaces the document with the page's content.
CHALLENGE = b"""<!doctype html><html><head><title>Just a moment...</title></head>
<body>checking your browser
<script>
document.cookie = "passed=1; path=/";
fetch("/content" + location.pathname).then(r => r.text()).then(t => {
  document.open(); document.write(t); document.close();
});
</script></body></html>"""


def js_wall(site: TestSite, path: str, children: int = 3) -> None:
    """*path* (and its *children* ``path/1`` …) behind the wall; the content of each is at
    ``/content<path>``, given only with the cookie the challenge's script sets."""
    pages = [path, *(f"{path}/{i}" for i in range(1, children + 1))]
    for page in pages:
        links = [f"{path}/{i}" for i in range(1, children + 1)] if page == path else []

        def content(seen: Seen, links: list[str] = links, page: str = page) -> tuple[int, dict[str, str], bytes]:
            cookie = next((v for k, v in seen.headers.items() if k.lower() == "cookie"), "")
            if "passed=1" not in cookie:
                return 403, {"Content-Type": "text/html"}, b"<html><body>no</body></html>"
            return 200, {"Content-Type": "text/html; charset=utf-8"}, html(*links, title=f"behind {page}")

        site.handler(page, lambda _seen: (200, {"Content-Type": "text/html; charset=utf-8"}, CHALLENGE))
        site.handler(f"/content{page}", content)


def rung_of(seen: Seen) -> str:
    """Which rung a request of the site came from: Chromium sends ``Sec-Fetch-*`` with crawlhive's
    User-Agent, the impersonated fetch a Chrome User-Agent, the plain fetch crawlhive's alone."""
    agent = next((v for k, v in seen.headers.items() if k.lower() == "user-agent"), "")
    if "Chrome/" in agent and "crawlhive" not in agent:
        return "impersonate"
    return "render" if any(k.lower().startswith("sec-fetch") for k in seen.headers) else "plain"


@pytest.fixture
def isolated(
    redis_url: str, kafka_bootstrap: str, tmp_path: Path
) -> Iterator[tuple[Settings, str, redis.Redis, Collector]]:
    settings = isolated_settings(redis_url, kafka_bootstrap, tmp_path, "fr")
    prefix = settings["REDIS_KEY_PREFIX"]
    client = redis_for(redis_url)
    collector = output_collector(settings)
    yield settings, prefix, client, collector
    collector.close()
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        client.delete(key)
    client.close()


def test_auto_climbs_to_the_rendering_crawlers_and_the_site_starts_rendered(
    site: TestSite, isolated: Any, tmp_path: Path
) -> None:
    from support.proxies import LoopProxy

    settings, prefix, client, collector = isolated
    js_wall(site, "/rw/0")
    proxy = LoopProxy("P").start()  # for crawls that name its pool only
    plain = Crawler(
        crawler_env(settings, FETCH="auto", RETRY_TIMES=0, PROXY_POOLS={"p": [proxy.url]}), tmp_path, name="plain"
    )
    renderer = Crawler(
        crawler_env(settings, RENDER_TIMEOUT=15, DOWNLOAD_TIMEOUT=10, RETRY_TIMES=0),
        tmp_path,
        name="render",
        extra_args=["--render"],
    )
    try:
        plain.wait_ready(client, prefix, count=2, timeout=60)
        renderer.wait_ready(client, prefix, count=2, timeout=60)
        seed(settings, client, appid="rungapp", crawlid="wall1", url=site.url("/rw/0"), maxdepth=1)
        collector.wait_for("wall1", 4, timeout=120)
        items = collector.settle("wall1", quiet_s=2.0, timeout=60)
        expected = [site.url(p) for p in ("/rw/0", "/rw/0/1", "/rw/0/2", "/rw/0/3")]
        assert sorted(i["url"] for i in items) == expected, [(i["url"], i.get("error")) for i in items]
        for item in items:  # each page's content, as the browser left the document
            assert item["status_code"] == 200 and item["fetch"] == "render", item
            assert f"behind {item['url'].split(str(site.port), 1)[1]}" in item["body"], item["body"][:500]
            assert "fetch_stopped" not in item
        # The seed met the wall plain, then impersonated, then was rendered: one attempt each,
        # no retry spent (RETRY_TIMES=0 would have ended it at the first wall otherwise).
        assert [rung_of(s) for s in site.hits("/rw/0") if s.path == "/rw/0"] == ["plain", "impersonate", "render"]
        assert {rung_of(s) for s in site.hits("/rw/0/")} == {"render"}  # its links started rendered
        (remembered,) = list(client.scan_iter(match=f"{prefix}*fetch-rung:127.0.0.1"))
        assert client.get(remembered) == b"render"
        # Another auto crawl of the site: the plain crawler hands its page over unfetched.
        js_wall(site, "/rw/9", children=0)
        seed(settings, client, appid="rungapp", crawlid="wall2", url=site.url("/rw/9"))
        (item,) = collector.wait_for("wall2", 1, timeout=60)
        assert item["status_code"] == 200 and item["fetch"] == "render" and "behind /rw/9" in item["body"], item
        assert [rung_of(s) for s in site.hits("/rw/9")] == ["render"]
        # A crawl with headers is never rendered (§15): the site remembers render, yet its page
        # starts impersonated, meets the wall there, and its item says why it went no higher.
        js_wall(site, "/rw/8", children=0)
        seed(settings, client, appid="rungapp", crawlid="wall3", url=site.url("/rw/8"), headers={"X-Seen": "1"})
        (item,) = collector.wait_for("wall3", 1, timeout=60)
        assert item["fetch"] == "impersonate" and "Just a moment" in item["body"], item
        assert (
            item["fetch_stopped"] == "the crawl sends headers, which rendered pages do not carry (docs/contract.md §15)"
        )
        assert [rung_of(s) for s in site.hits("/rw/8")] == ["impersonate"]
        # Nor is a page that goes through a proxy (§21.1): known only once its proxy is chosen.
        js_wall(site, "/rw/7", children=0)
        seed(settings, client, appid="rungapp", crawlid="wall4", url=site.url("/rw/7"), proxy_pool="p")
        (item,) = collector.wait_for("wall4", 1, timeout=60)
        assert item["fetch"] == "impersonate" and "Just a moment" in item["body"], item
        assert (
            item["fetch_stopped"]
            == "the page goes through a proxy, which rendered pages do not (docs/contract.md §21.1)"
        )
        (hit,) = site.hits("/rw/7")
        assert rung_of(hit) == "impersonate" and hit.headers.get("X-Via-Proxy") == "P", hit.headers
    finally:
        proxy.stop()
        codes = [plain.terminate(), renderer.terminate(30)]
    assert codes == [0, 0], (plain.output()[-3000:], renderer.output()[-3000:])
    for log in (plain.output(), renderer.output()):
        assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
    rung_counts_are_in_stats_info_crawls_and_metrics(settings, client)


def rung_counts_are_in_stats_info_crawls_and_metrics(settings: Settings, client: redis.Redis) -> None:
    """§25.7 through the real readers, the crawlers stopped (their counts flushed): the
    redis-monitor's ``stats`` and ``info`` answers, REST's ``GET /crawls`` and ``GET /metrics``.
    wall1: the seed fetched plain, impersonated, rendered (2 climbs), its 3 links rendered; wall2:
    one page rendered; wall3 and wall4: one impersonated each. robots.txt fetches count per spider type and host,
    in no crawl."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families
    from support.redis_monitor import Running, Topic, submit

    wall1 = {"plain": 1, "impersonate": 1, "render": 4, "climbs": 2}
    wall2 = {"plain": 0, "impersonate": 0, "render": 1, "climbs": 0}
    monitor_settings = settings.copy_with(REDIS_MONITOR_BLOCK_MS=100, REDIS_MONITOR_TICK_S=0.1, HEARTBEAT_INTERVAL=1)
    outbound = Topic(monitor_settings, monitor_settings.topic("outbound_firehose"))
    runner = Running()
    try:
        runner.start(monitor_settings, redis_for(settings["REDIS_URL"]))
        submit(client, monitor_settings, "stats", {"uuid": "f1", "appid": "rungapp", "stats": "fetch"})
        info = {"action": "info", "uuid": "i1", "appid": "rungapp", "crawlid": "wall1", "spiderid": "link"}
        submit(client, monitor_settings, "action", info)
        answers = {m["uuid"]: m for m in outbound.wait_for(2, where=lambda m: m.get("uuid") in ("f1", "i1"))}
    finally:
        runner.stop()
        outbound.close()
    assert answers["i1"]["fetch"] == wall1, answers["i1"]
    fetch = answers["f1"]["fetch"]
    (spider,) = fetch["spiders"].values()
    assert set(fetch["spiders"]) == {"link"} and len(fetch["machines"]) == 1, fetch
    assert spider["climbs"]["lifetime"] == 2 and spider["render"]["lifetime"] >= 5, spider
    assert spider["impersonate"]["lifetime"] == 3 and spider["plain"]["lifetime"] >= 1, spider  # wall1, 3, 4
    assert spider["climbs"]["900"] == 2  # a window map, as every counter of stats
    assert list(fetch["machines"].values()) == [spider]  # one host ran both crawlers
    from support.rest import running_rest

    with running_rest(settings, wait_for_kafka=False) as rest, httpx.Client(base_url=rest.url, timeout=30) as http:
        crawls = {row["crawlid"]: row for row in http.get("/crawls").json()["data"]["crawls"]}
        status = http.get("/crawls/rungapp/wall1").json()["data"]
        text = http.get("/metrics").text
    assert crawls["wall1"]["fetch"] == wall1 and crawls["wall2"]["fetch"] == wall2, crawls
    assert crawls["wall3"]["fetch"] == {"plain": 0, "impersonate": 1, "render": 0, "climbs": 0}
    assert status["fetch"] == wall1, status
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("crawlhive_fetch_")
    }
    assert samples[("crawlhive_fetch_climbs_total", (("spiderid", "link"),))] == 2, samples
    assert samples[("crawlhive_fetch_responses_total", (("rung", "impersonate"), ("spiderid", "link")))] == 3
    assert samples[("crawlhive_fetch_responses_total", (("rung", "render"), ("spiderid", "link")))] >= 5
