"""The network guard end to end (docs/contract.md §10.2): a real ``crawlhive crawler`` that may
reach 127.0.0.2 only (CRAWLER_ALLOWED_NETWORKS) and a test site listening on 127.0.0.1 and 127.0.0.2,
so every request that reaches 127.0.0.1 would be seen by the site. Blocked requests must never
arrive (not even robots.txt), must not be retried, and must end as ``blocked network: …`` dead
letters counted in the crawl's failures."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.crawler import TestSite, crawler_env, crawler_module, html, seed

from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import FrontierReader

pytestmark = pytest.mark.timeout(90)

ALLOWED = "127.0.0.2"
BLOCKED = "127.0.0.1"


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    site = TestSite()
    site.start()
    yield site
    site.stop()


@pytest.fixture(scope="module", params=["plain", "impersonate"])
def env(
    redis_url: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, Any]]:
    """A crawler per fetch (docs/contract.md §25): the impersonated one is held to the same guard."""
    home = tmp_path_factory.mktemp("guard")
    with crawler_module(
        redis_url,
        kafka_bootstrap,
        home,
        "g",
        CRAWLER_ALLOWED_NETWORKS=[f"{ALLOWED}/32"],
        RETRY_TIMES=2,
        FETCH=request.param,
    ) as env:
        yield env


def _crawl(env: dict[str, Any], **request: Any) -> str:
    crawlid = secrets.token_hex(4)
    seed(env["settings"], env["redis"], appid="guardapp", crawlid=crawlid, **request)
    return crawlid


def _blocked_hits(site: TestSite, prefix: str) -> list[Any]:
    return [s for s in site.seen if s.host == BLOCKED and (s.path.startswith(prefix) or s.path == "/robots.txt")]


def _failed(env: dict[str, Any], crawlid: str) -> int:
    reader = FrontierReader.from_settings(env["redis"], env["settings"])
    return reader.crawl_state("link", "guardapp", crawlid).failed


def test_a_name_that_resolves_to_a_blocked_address_is_never_fetched(env: dict[str, Any], site: TestSite) -> None:
    site.seen.clear()
    url = f"http://localhost:{site.port}/n/seed"  # a name, not an address: checked after DNS
    crawlid = _crawl(env, url=url)
    (letter,) = env["collector"].wait_for(crawlid, 1)
    assert letter["_topic"].endswith(".dead_letter") and letter["stage"] == "crawl"
    assert letter["error"].startswith(f"blocked network: localhost ({BLOCKED}) is in 127.0.0.0/8"), letter
    assert "CRAWLER_BLOCKED_NETWORKS" in letter["error"]
    assert letter["retry_times"] == 0 and letter["url"] == url
    assert env["collector"].settle(crawlid, 1.0) == [letter]  # not retried
    assert _blocked_hits(site, "/n/") == []  # nothing reached the site, robots.txt included
    assert _failed(env, crawlid) == 1
    # The crawler's log says it in one line, at WARNING, naming the setting that allows it; not
    # Scrapy's two "Error downloading" lines, each with ~70 lines of "DNS lookup failed" traceback.
    log = env["crawler"].output()
    said = [line for line in log.splitlines() if "blocked network: localhost" in line]
    assert len(said) == 1 and " WARNING " in said[0] and "CRAWLER_ALLOWED_NETWORKS" in said[0], said
    assert "Traceback" not in log and "Error downloading" not in log and "DNS lookup failed" not in log, log[-3000:]


def test_links_and_redirects_into_a_blocked_network_are_refused(env: dict[str, Any], site: TestSite) -> None:
    site.seen.clear()
    inner = site.url("/g/inner", host=BLOCKED)
    site.page("/g/start", html(inner, site.url("/g/redirect", host=ALLOWED), site.url("/g/ok", host=ALLOWED)))
    site.page("/g/ok", html())
    site.page("/g/inner", html())
    site.page("/g/target", html())
    site.handler(
        "/g/redirect",
        lambda _seen: (302, {"Location": site.url("/g/target", host=BLOCKED), "Content-Type": "text/html"}, b""),
    )
    crawlid = _crawl(env, url=site.url("/g/start", host=ALLOWED), maxdepth=1)
    messages = env["collector"].wait_for(crawlid, 4)
    messages = env["collector"].settle(crawlid, 1.5)
    items = sorted(m["url"] for m in messages if m["_topic"].endswith(".crawled_firehose"))
    letters = {m["url"]: m for m in messages if m["_topic"].endswith(".dead_letter")}
    assert items == [site.url("/g/ok", host=ALLOWED), site.url("/g/start", host=ALLOWED)], messages
    assert set(letters) == {inner, site.url("/g/redirect", host=ALLOWED)}, messages
    for letter in letters.values():
        assert letter["error"].startswith(f"blocked network: {BLOCKED} is in 127.0.0.0/8"), letter
        assert letter["retry_times"] == 0
    assert _blocked_hits(site, "/g/") == []
    assert [s.path for s in site.seen if s.path == "/g/redirect"] == ["/g/redirect"]  # asked once, not retried
    assert _failed(env, crawlid) == 2


def test_mapped_and_metadata_addresses_are_refused(env: dict[str, Any], site: TestSite) -> None:
    """``::ffff:127.0.0.1`` is 127.0.0.1, and the cloud metadata address is blocked by default."""
    site.seen.clear()
    site.page("/m/seed", html())
    mapped = f"http://[::ffff:{BLOCKED}]:{site.port}/m/seed"
    metadata = "http://169.254.169.254/latest/meta-data/"
    crawls = {url: _crawl(env, url=url) for url in (mapped, metadata)}
    for url, network in ((mapped, "127.0.0.0/8"), (metadata, "169.254.0.0/16")):
        (letter,) = env["collector"].wait_for(crawls[url], 1)
        assert letter["_topic"].endswith(".dead_letter") and letter["retry_times"] == 0, letter
        assert letter["error"].startswith("blocked network: ") and f"is in {network}" in letter["error"], letter
    assert site.hits("/m/") == []


def test_wrong_networks_stop_the_crawler_at_start_naming_the_setting(tmp_path: Any) -> None:
    env = crawler_env(
        Settings.from_overrides(CRAWLHIVE_HOME=str(tmp_path)), CRAWLER_BLOCKED_NETWORKS=["10.0.0.0/8", "nonsense"]
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "crawlhive.app.cli", "crawler"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "CRAWLER_BLOCKED_NETWORKS: 'nonsense' is not a network" in done.stderr
    assert time.monotonic() - started < 30  # refused before connecting to anything
