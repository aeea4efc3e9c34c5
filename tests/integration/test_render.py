"""Rendering crawlers (docs/contract.md §15), end to end: a real ``crawlhive crawler --render``
driving Debian's Chromium against a site of the test's own.

* Links a script inserts are found (and their pages crawled) in a render crawl, and not in a plain
  crawl of the same page.
* Plain crawlers never take rendering work: a render crawl waits, untouched, until a rendering
  crawler runs.
* The network guard holds for everything the browser loads: a subresource, fetch, iframe or
  redirect to a blocked address is never requested; a blocked page is a ``blocked network`` dead
  letter.
* A rendering crawler SIGKILLed mid-crawl, and a browser killed under a running crawler, lose no page.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from support.crawler import (
    CLI,
    Collector,
    Crawler,
    LeaseReaper,
    Seen,
    TestSite,
    crawler_env,
    descendants,
    html,
    isolated_settings,
    output_collector,
    redis_for,
    seed,
)

from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import FrontierReader

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not Path("/usr/bin/chromium-headless-shell").exists(), reason="no chromium-headless-shell"),
]

SCRIPT_LINKS = b"""<!doctype html><html><head><title>js page</title></head><body><p>static</p>
<script>
for (const name of ["a", "b"]) {
  const link = document.createElement("a");
  link.href = "PREFIX" + name;
  link.textContent = "inserted " + name;
  document.body.appendChild(link);
}
</script></body></html>"""


@pytest.fixture
def site() -> Any:
    site = TestSite()
    site.start()
    yield site
    site.stop()


@pytest.fixture
def isolated(
    redis_url: str, kafka_bootstrap: str, tmp_path: Path
) -> Iterator[tuple[Settings, str, redis.Redis, Collector]]:
    """Settings under a key and topic prefix of their own, a client, and a collector of the
    crawlers' output topics; afterwards everything under the prefix is deleted."""
    settings = isolated_settings(redis_url, kafka_bootstrap, tmp_path, "r")
    prefix = settings["REDIS_KEY_PREFIX"]
    client = redis_for(redis_url)
    collector = output_collector(settings)
    yield settings, prefix, client, collector
    collector.close()
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        client.delete(key)
    client.close()


def _browser_hit(seen: Seen) -> bool:
    """A request made by Chromium (Scrapy sends no ``Sec-Fetch-*`` headers)."""
    return any(name.lower().startswith("sec-fetch") for name in seen.headers)


def _render_env(settings: Any, **overrides: Any) -> dict[str, str]:
    return crawler_env(settings, **{"RENDER_TIMEOUT": 10, "DOWNLOAD_TIMEOUT": 5, **overrides})


def _wait_heartbeats(client: redis.Redis, prefix: str, count: int, crawlers: list[Crawler]) -> None:
    for crawler in crawlers:
        crawler.wait_ready(client, prefix, count=count, timeout=60)


def test_script_links_are_followed_only_when_rendered(site: TestSite, isolated: Any, tmp_path: Path) -> None:
    site.page("/js/0", SCRIPT_LINKS.replace(b"PREFIX", b"/js/"))
    for name in ("a", "b"):
        site.page(f"/js/{name}", html(title=name))
    settings, prefix, client, collector = isolated
    plain = Crawler(crawler_env(settings), tmp_path, name="plain")
    renderer: Crawler | None = None
    try:
        plain.wait_ready(client, prefix)
        seed(settings, client, appid="japp", crawlid="plain1", url=site.url("/js/0"), maxdepth=1)
        seed(settings, client, appid="japp", crawlid="rend1", url=site.url("/js/0"), maxdepth=1, render=True)
        items = collector.wait_for("plain1", 1)
        assert collector.settle("plain1", quiet_s=1.5) == items  # no link found: one page
        assert ">inserted a</a>" not in items[0]["body"]
        # The plain crawler never takes the render crawl's seed: it waits, queued, for a renderer.
        assert collector.of("rend1") == []
        state = FrontierReader.from_settings(client, settings).crawl_state("link", "japp", "rend1")
        assert state.pending == 1 and state.lanes == {True}
        assert [s.path for s in site.hits("/js/")] == ["/js/0"]

        renderer = Crawler(_render_env(settings), tmp_path, name="render", extra_args=["--render"])
        renderer.wait_ready(client, prefix, count=2, timeout=60)
        rendered = collector.wait_for("rend1", 3, timeout=90)
        by_url = {item["url"]: item for item in rendered}
        assert set(by_url) == {site.url(p) for p in ("/js/0", "/js/a", "/js/b")}
        root = by_url[site.url("/js/0")]
        assert root["status_code"] == 200 and ">inserted a</a>" in root["body"]  # the DOM after the script
        assert root["response_headers"]["Content-Type"] in (["text/html; charset=utf-8"], "text/html; charset=utf-8")
        assert sorted(link["url"] for link in root["links"]) == sorted(site.url(p) for p in ("/js/a", "/js/b"))
        browser_paths = sorted(s.path for s in site.hits("/js/") if _browser_hit(s))
        assert browser_paths == ["/js/0", "/js/a", "/js/b"]
        assert collector.settle("rend1", quiet_s=1.0) == rendered  # each page once
    finally:
        codes = [plain.terminate()] + ([renderer.terminate(30)] if renderer else [])
    assert codes == [0, 0], (plain.output(), renderer.output() if renderer else "")


GUARDED_PAGE = """<!doctype html><html><head><title>guarded</title>
<link rel="stylesheet" href="BLOCKED/g/style.css"><script src="/g/ok.js"></script></head>
<body><img src="BLOCKED/g/img.png"><iframe src="BLOCKED/g/frame"></iframe>
<script>
fetch("BLOCKED/g/fetch").catch(() => {});
try { new WebSocket("BLOCKED/g/ws".replace("http", "ws")); } catch (e) {}
navigator.sendBeacon && navigator.sendBeacon("BLOCKED/g/beacon", "x");
</script></body></html>"""


def _resources(site: TestSite) -> None:
    blocked = site.url("", host="127.0.0.2")
    site.page("/g/0", GUARDED_PAGE.replace("BLOCKED", blocked).encode())
    site.page("/g/ok.js", b"document.title = 'script ran';", content_type="application/javascript")
    site.handler("/g/away", lambda _seen: (302, {"Location": site.url("/g/target", host="127.0.0.2")}, b""))


def test_the_guard_blocks_every_connection_the_browser_would_make(
    site: TestSite, isolated: Any, tmp_path: Path
) -> None:
    """127.0.0.2 is blocked (only 127.0.0.1/32 allowed): nothing the page loads, no redirect and no
    seed reaches it; the page itself and its allowed script load."""
    _resources(site)
    settings, prefix, client, collector = isolated
    env = _render_env(settings, CRAWLER_ALLOWED_NETWORKS=["127.0.0.1/32"])
    renderer = Crawler(env, tmp_path, name="render-guard", extra_args=["--render"])
    try:
        renderer.wait_ready(client, prefix, timeout=60)
        seed(settings, client, appid="gapp", crawlid="g1", url=site.url("/g/0"), render=True)
        seed(settings, client, appid="gapp", crawlid="g2", url=site.url("/g/direct", host="127.0.0.2"), render=True)
        seed(settings, client, appid="gapp", crawlid="g3", url=site.url("/g/away"), render=True)
        (page,) = collector.wait_for("g1", 1, timeout=60)
        assert page["status_code"] == 200 and "<title>script ran</title>" in page["body"]
        (direct,) = collector.wait_for("g2", 1, timeout=60)
        assert direct["error"].startswith("blocked network: 127.0.0.2 is in 127.0.0.0/8"), direct
        (away,) = collector.wait_for("g3", 1, timeout=60)
        assert away["url"] == site.url("/g/away"), away
        assert away["error"].startswith("blocked network: 127.0.0.2 is in 127.0.0.0/8"), away  # not retried
        collector.settle("g1", quiet_s=1.0)
    finally:
        code = renderer.terminate(30)
    assert sorted(s.path for s in site.hits("/g/") if s.host == "127.0.0.1") == ["/g/0", "/g/away", "/g/ok.js"]
    assert [s.path for s in site.seen if s.host == "127.0.0.2"] == []
    assert code == 0, renderer.output()


def _browsers(pid: int) -> list[int]:
    """The Chromium processes started under *pid*."""
    names = []
    for child in descendants(pid):
        try:
            if "chrom" in Path(f"/proc/{child}/comm").read_text():
                names.append(child)
        except OSError:
            continue
    return names


def test_a_killed_rendering_crawler_and_a_crashed_browser_lose_no_page(
    site: TestSite, isolated: Any, tmp_path: Path
) -> None:
    """A rendering crawler SIGKILLed mid-crawl: its leases expire and another rendering crawler
    renders those pages. Then that crawler's browser is killed under it: the pages it was loading
    fail, are retried, and arrive; the crawler starts a new browser."""

    def leaf(_seen: Seen) -> tuple[int, dict[str, str], bytes]:
        time.sleep(0.3)
        return 200, {"Content-Type": "text/html"}, html(title="leaf")

    count = 40
    script = "".join(
        f'document.body.appendChild(Object.assign(document.createElement("a"), {{href: "/k/{i}"}}));'
        for i in range(1, count + 1)
    )
    site.page("/k/0", f"<html><body><script>{script}</script></body></html>".encode())
    for i in range(1, count + 1):
        site.handler(f"/k/{i}", leaf)
    settings, prefix, client, collector = isolated
    env = _render_env(settings, LEASE_TIMEOUT=3, RENDER_CONCURRENCY=4, RETRY_TIMES=3)
    victim = Crawler(env, tmp_path, name="render-victim", extra_args=["--render"])
    survivor: Crawler | None = None
    reaper = LeaseReaper(client, settings)
    try:
        victim.wait_ready(client, prefix, timeout=60)
        seed(settings, client, appid="kapp", crawlid="k1", url=site.url("/k/0"), maxdepth=1, render=True)
        collector.wait_for("k1", 6, timeout=60)
        orphans = descendants(victim.proc.pid)
        victim.kill()
        reaper.start()
        survivor = Crawler(env, tmp_path, name="render-survivor", extra_args=["--render"])
        collector.wait_for("k1", 16, timeout=60)
        browsers = _browsers(survivor.proc.pid)
        assert browsers, "the survivor's browser is not running"
        for pid in browsers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        items = collector.wait_for("k1", count + 1, timeout=90)
        urls = {item["url"] for item in items}
        deadline = time.monotonic() + 30
        while len(urls) < count + 1 and time.monotonic() < deadline:
            urls = {item["url"] for item in collector.of("k1")}
            time.sleep(0.2)
        assert urls == {site.url(f"/k/{i}") for i in range(count + 1)}
        assert collector.of("k1", settings.topic("dead_letter")) == []
        assert sum(reaper.requeued) > 0  # the victim held leases when it died
        assert _browsers(survivor.proc.pid), "no new browser was started"
    finally:
        reaper.stop()
        code = survivor.terminate(30) if survivor else 0
    deadline = time.monotonic() + 10
    while [p for p in orphans if Path(f"/proc/{p}").exists()] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p for p in orphans if Path(f"/proc/{p}").exists()] == [], "the killed crawler left processes behind"
    assert code == 0, survivor.output() if survivor else ""


def test_a_missing_browser_is_named_before_anything_starts(
    redis_url: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = isolated_settings(redis_url, kafka_bootstrap, tmp_path, "rm")
    env = crawler_env(settings, RENDER_BROWSER="/nonexistent/chromium")
    done = subprocess.run(
        [*CLI, "crawler", "--render"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1, done.stderr
    assert "RENDER_BROWSER: '/nonexistent/chromium' is not an executable browser" in done.stderr
    assert "Traceback" not in done.stderr


def test_up_with_a_rendering_crawler_renders_a_crawl_fed_from_the_command_line(site: TestSite, tmp_path: Path) -> None:
    """The real commands: ``crawlhive up --render-crawlers 1`` and ``crawlhive feed`` of a crawl with
    ``"render": true``: the kafka-monitor accepts the field, the rendering crawler renders the page
    and follows the links its script inserted, and the crawl completes with the right counts."""
    site.page("/up/0", SCRIPT_LINKS.replace(b"PREFIX", b"/up/"))
    for name in ("a", "b"):
        site.page(f"/up/{name}", html(title=name))
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS", "KAFKA_HOSTS")}
    env.update(CRAWLHIVE_HOME=str(tmp_path), KAFKA_TOPIC_PREFIX="renderup", RENDER_TIMEOUT="10")
    log = tmp_path / "up.log"
    with log.open("w") as out:
        up = subprocess.Popen(
            [*CLI, "up", "--cleaners", "0", "--render-crawlers", "1"], env=env, stdout=out, stderr=out
        )
    collector = None
    try:
        deadline = time.monotonic() + 90
        while "Ctrl-C stops everything" not in log.read_text() and time.monotonic() < deadline:
            assert up.poll() is None, log.read_text()
            time.sleep(0.2)
        assert "crawler-render-1" in log.read_text(), log.read_text()
        state = json.loads((tmp_path / "up.json").read_text())
        settings = Settings.from_overrides(
            REDIS_URL=state["REDIS_URL"], KAFKA_BOOTSTRAP_SERVERS=state["KAFKA_BOOTSTRAP_SERVERS"],
            KAFKA_TOPIC_PREFIX="renderup", CRAWLHIVE_HOME=str(tmp_path),
        )  # fmt: skip
        collector = Collector(settings, [settings.topic("crawled_firehose"), settings.topic("outbound_firehose")])
        request = {"url": site.url("/up/0"), "appid": "upapp", "crawlid": "up1", "maxdepth": 1, "render": True}
        fed = subprocess.run([*CLI, "feed", json.dumps(request)], env=env, capture_output=True, text=True, timeout=60)
        assert fed.returncode == 0, fed.stderr
        found = collector.wait_for("up1", 4, timeout=90)
        pages = {m["url"] for m in found if m["_topic"] == settings.topic("crawled_firehose")}
        assert pages == {site.url(p) for p in ("/up/0", "/up/a", "/up/b")}, log.read_text()[-3000:]
        complete = [m for m in found if m.get("action") == "complete"]
        assert complete and complete[0]["total_crawled"] == 3, found
    finally:
        if collector is not None:
            collector.close()
        up.send_signal(signal.SIGINT)
        code = up.wait(timeout=60)
    assert code == 0, log.read_text()[-3000:]


def test_cookies_reach_only_the_seed_s_host_and_the_user_agent_is_the_crawl_s(
    site: TestSite, isolated: Any, tmp_path: Path
) -> None:
    """§10.6 in a browser: the crawl's cookies go to the seed's host (its page and subresources) and
    never to another host, whether the page loads from it, links to it or redirects to it."""
    other = site.url("", host="127.0.0.2")
    page = f'<html><head><script src="/c/same.js"></script><script src="{other}/c/other.js"></script></head>'
    page += f'<body><a href="{other}/c/next">next</a></body></html>'
    site.page("/c/0", page.encode())
    site.page("/c/same.js", b"1;", content_type="application/javascript")
    site.page("/c/other.js", b"1;", content_type="application/javascript")
    site.page("/c/next", html(title="next"))
    site.page("/c/target", html(title="target"))
    site.handler("/c/away", lambda _seen: (302, {"Location": f"{other}/c/target"}, b""))
    settings, prefix, client, collector = isolated
    renderer = Crawler(_render_env(settings), tmp_path, name="render-cookies", extra_args=["--render"])
    try:
        renderer.wait_ready(client, prefix, timeout=60)
        crawl = {"appid": "capp", "render": True, "useragent": "crawlhive-test-agent", "cookies": {"session": "s3cret"}}
        seed(settings, client, crawlid="c1", url=site.url("/c/0"), maxdepth=1, **crawl)
        seed(settings, client, crawlid="c2", url=site.url("/c/away"), **crawl)
        # Redirected by the site out of allowed_domains: dropped, its lease ended, no item.
        seed(settings, client, crawlid="c3", url=site.url("/c/away"), allowed_domains=["127.0.0.1"], **crawl)
        assert len(collector.wait_for("c1", 2, timeout=60)) == 2
        assert len(collector.wait_for("c2", 1, timeout=60)) == 1
        reader = FrontierReader.from_settings(client, settings)
        deadline = time.monotonic() + 30
        while reader.crawl_state("link", "capp", "c3").inflight and time.monotonic() < deadline:
            time.sleep(0.1)
        state = reader.crawl_state("link", "capp", "c3")
        assert (state.inflight, state.pending, state.crawled, state.failed) == (0, 0, 0, 0)
        assert collector.of("c3") == []
    finally:
        code = renderer.terminate(30)
    hits = site.hits("/c/")
    cookie = {(s.host, s.path): s.headers.get("Cookie") or s.headers.get("cookie") for s in hits}
    assert cookie[("127.0.0.1", "/c/0")] == "session=s3cret"
    assert cookie[("127.0.0.1", "/c/same.js")] == "session=s3cret"
    assert cookie[("127.0.0.1", "/c/away")] == "session=s3cret"
    elsewhere = {path: value for (host, path), value in cookie.items() if host == "127.0.0.2"}
    assert set(elsewhere) == {"/c/other.js", "/c/next", "/c/target"} and set(elsewhere.values()) == {None}
    agents = {s.headers.get("User-Agent") or s.headers.get("user-agent") for s in hits}
    assert agents == {"crawlhive-test-agent"}
    assert code == 0, renderer.output()


def _auto_submit(action: str, target: str = "_self") -> bytes:
    return (
        f'<html><body><form method="post" action="{action}" target="{target}">'
        '<input name="confirm" value="yes"></form><script>document.forms[0].submit()</script></body></html>'
    ).encode()


def test_a_page_of_another_origin_never_sends_the_crawl_s_cookies_to_the_seed(
    site: TestSite, isolated: Any, tmp_path: Path
) -> None:
    """§10.6 in a browser, per origin (scheme, host, port): pages of another port of the same host
    (same-site for the browser) auto-submit forms to the seed's origin from a frame of the seed's
    page, after the seed's page navigated or was redirected to them, and from a popup; the seed's
    origin receives those POSTs without the crawl's cookie (the popup's may not come at all), and
    nothing of another port gets it either, the target of a redirect included."""
    other = TestSite()
    other.start()
    try:
        seed_origin, evil = site.url(""), other.url("")
        # The other port's script and frame only once the seed's own script has loaded with the
        # cookie (a request of the page to another origin of the seed's host withdraws them).
        later = (
            f'document.body.appendChild(Object.assign(document.createElement("script"), {{src: "{evil}/x/other.js"}}));'
            f'document.body.appendChild(Object.assign(document.createElement("iframe"), {{src: "{evil}/x/framed"}}));'
        )
        site.page("/x/0", f"<html><body><script src=\"/x/0.js\" onload='{later}'></script></body></html>".encode())
        site.page("/x/0.js", b"1;", content_type="application/javascript")
        site.page("/x/1", f'<html><body><script>location = "{evil}/x/away"</script></body></html>'.encode())
        site.page("/x/2", f'<html><body><script>window.open("{evil}/x/popup")</script></body></html>'.encode())
        other.page("/x/other.js", b"1;", content_type="application/javascript")
        other.page("/x/framed", _auto_submit(f"{seed_origin}/x/delete/framed", target="_top"))
        other.page("/x/away", _auto_submit(f"{seed_origin}/x/delete/away"))
        other.page("/x/popup", _auto_submit(f"{seed_origin}/x/delete/popup"))
        site.handler("/x/3", lambda _seen: (302, {"Location": f"{evil}/x/redirected"}, b""))
        other.page("/x/redirected", _auto_submit(f"{seed_origin}/x/delete/redirected"))
        for name in ("framed", "away", "popup", "redirected"):
            site.page(f"/x/delete/{name}", html(title="deleted"))
        settings, prefix, client, collector = isolated
        renderer = Crawler(_render_env(settings), tmp_path, name="render-csrf", extra_args=["--render"])
        try:
            renderer.wait_ready(client, prefix, timeout=60)
            for number in range(4):
                seed(settings, client, appid="xapp", crawlid=f"x{number}", url=site.url(f"/x/{number}"),
                     render=True, cookies={"session": "s3cret"})  # fmt: skip
            for number in range(4):
                collector.wait_for(f"x{number}", 1, timeout=60)
            deadline = time.monotonic() + 20
            while len([s for s in site.hits("/x/delete/") if s.method == "POST"]) < 3 and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            code = renderer.terminate(30)
        assert code == 0, renderer.output()
    finally:
        other.stop()

    def cookie(seen: Seen) -> str | None:
        return seen.headers.get("Cookie") or seen.headers.get("cookie")

    posts = {s.path: cookie(s) for s in site.hits("/x/delete/") if s.method == "POST"}
    # The popup's requests are refused (its POST may never come); those that come carry no cookie.
    assert {"/x/delete/framed", "/x/delete/away", "/x/delete/redirected"} <= set(posts), posts
    assert set(posts.values()) == {None}, posts
    assert {s.path: cookie(s) for s in site.hits("/x/") if s.path in ("/x/0", "/x/0.js", "/x/1", "/x/2")} == {
        "/x/0": "session=s3cret", "/x/0.js": "session=s3cret", "/x/1": "session=s3cret", "/x/2": "session=s3cret"
    }  # fmt: skip
    assert other.hits("/x/") and [s.path for s in other.hits("/x/") if cookie(s)] == []


def test_a_dom_over_download_maxsize_is_a_dead_letter_and_the_crawler_goes_on(
    site: TestSite, isolated: Any, tmp_path: Path
) -> None:
    """§10.7 for rendered pages: a small page whose script builds a DOM of about 600 KB, with
    DOWNLOAD_MAXSIZE at 100 KB, is a ``response too large`` dead letter, not retried; the DOM is
    never taken from the browser, and the next page renders. A page that keeps its network busy
    while its script grows the DOM is stopped within seconds, not at RENDER_TIMEOUT."""
    grow = (
        "for (let i = 0; i < 6000; i++) { const p = document.createElement('p');"
        " p.textContent = 'x'.repeat(100); document.body.appendChild(p); }"
    )
    site.page("/m/big", f"<html><body><script>{grow}</script></body></html>".encode())
    site.page("/m/next", html(title="next"))
    growing = (
        "fetch('/m/hang').catch(() => {});"
        "setInterval(() => { const p = document.createElement('p'); p.textContent = 'y'.repeat(20000);"
        " document.body.appendChild(p); }, 100);"
    )
    site.page("/m/growing", f"<html><body><script>{growing}</script></body></html>".encode())

    def hang(_seen: Seen) -> tuple[int, dict[str, str], bytes]:
        time.sleep(35)  # the network never idles while the page is open
        return 200, {"Content-Type": "text/plain"}, b""

    site.handler("/m/hang", hang)
    settings, prefix, client, collector = isolated
    env = _render_env(settings, DOWNLOAD_MAXSIZE=100_000, RENDER_TIMEOUT=30)
    renderer = Crawler(env, tmp_path, name="render-big", extra_args=["--render"])
    try:
        renderer.wait_ready(client, prefix, timeout=60)
        seed(settings, client, appid="mapp", crawlid="m1", url=site.url("/m/big"), render=True)
        (letter,) = collector.wait_for("m1", 1, timeout=60)
        seed(settings, client, appid="mapp", crawlid="m2", url=site.url("/m/next"), render=True)
        (page,) = collector.wait_for("m2", 1, timeout=60)
        seed(settings, client, appid="mapp", crawlid="m3", url=site.url("/m/growing"), render=True)
        (grown,) = collector.wait_for("m3", 1, timeout=60)
        grown_after = time.time() - site.hits("/m/growing")[0].at
        assert collector.settle("m1", quiet_s=1.0) == [letter]
    finally:
        code = renderer.terminate(30)
    expected = "response too large: the rendered page's DOM is over 100000 bytes (DOWNLOAD_MAXSIZE)"
    assert letter["_topic"].endswith(".dead_letter") and letter["error"] == expected, letter
    assert letter["retry_times"] == 0 and len(site.hits("/m/big")) == 1
    assert page["status_code"] == 200 and "<title>next</title>" in page["body"]
    assert grown["_topic"].endswith(".dead_letter") and grown["error"] == expected, grown
    assert grown_after < 15, grown_after  # measured while settling, not once RENDER_TIMEOUT (30 s) was over
    assert code == 0, renderer.output()


#: Variables of the crawler's environment that must never reach the browser.
SECRETS = {"REST_API_KEY": "rest-secret", "KAFKA_TEST_SECRET": "kafka-secret", "SHOP_DB_PASSWORD": "db-secret"}


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode("utf-8", "replace").split("\0") if "=" in item)


def _status(pid: int, field: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    return ""


def test_the_browser_runs_sandboxed_without_the_crawler_s_credentials(
    site: TestSite, isolated: Any, tmp_path: Path
) -> None:
    """Chromium's sandbox is on (each renderer in user and PID namespaces of its own, under a
    seccomp filter), never as root, and no process of the browser has REDIS_URL, KAFKA_*,
    REST_API_KEY or a password in its environment."""

    def slow(_seen: Seen) -> tuple[int, dict[str, str], bytes]:
        time.sleep(4)  # the page stays open (its renderer alive) meanwhile
        return 200, {"Content-Type": "image/png"}, b""

    site.page("/s/0", b'<html><head><title>sandboxed</title></head><body><img src="/s/slow.png"></body></html>')
    site.handler("/s/slow.png", slow)
    settings, prefix, client, collector = isolated
    renderer = Crawler(_render_env(settings, **SECRETS), tmp_path, name="render-sandbox", extra_args=["--render"])
    seen: dict[int, tuple[dict[str, str], str, str, str]] = {}
    try:
        renderer.wait_ready(client, prefix, timeout=60)
        crawler_userns = os.readlink(f"/proc/{renderer.proc.pid}/ns/user")
        seed(settings, client, appid="sapp", crawlid="s1", url=site.url("/s/0"), render=True)
        deadline = time.monotonic() + 30
        while not site.hits("/s/slow.png") and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        for pid in _browsers(renderer.proc.pid):
            with contextlib.suppress(OSError):
                seen[pid] = (
                    _environ(pid), _status(pid, "Uid"), _status(pid, "Seccomp"), os.readlink(f"/proc/{pid}/ns/user")
                )  # fmt: skip
        (page,) = collector.wait_for("s1", 1, timeout=60)
    finally:
        code = renderer.terminate(30)
    assert page["status_code"] == 200 and "<title>sandboxed</title>" in page["body"]
    assert "WARNING" not in renderer.output() and "sandbox" not in renderer.output().lower(), renderer.output()
    for pid, (environ, uids, _, _) in seen.items():
        leaked = sorted(n for n in environ if n in SECRETS or n.startswith(("REDIS", "KAFKA")) or "PASSWORD" in n)
        assert leaked == [], (pid, leaked)
        assert not set(environ.values()) & set(SECRETS.values())
        assert uids.split()[0] != "0", (pid, uids)  # never as root
    sandboxed = [pid for pid, (_, _, seccomp, userns) in seen.items() if seccomp == "2" and userns != crawler_userns]
    assert sandboxed, seen  # the renderers: seccomp-bpf and a user namespace of their own
    assert code == 0, renderer.output()


@pytest.mark.skipif(os.geteuid() != 0, reason="RENDER_BROWSER_USER applies to a crawler running as root")
def test_without_a_sandbox_the_crawler_refuses_to_start_unless_told(
    site: TestSite, isolated: Any, tmp_path: Path
) -> None:
    """As root with RENDER_BROWSER_USER=root the sandbox cannot work: the crawler stops at once,
    naming the reason and RENDER_ALLOW_NO_SANDBOX; with that setting true it renders, with one
    WARNING saying why that is dangerous."""
    settings, prefix, client, collector = isolated
    env = _render_env(settings, RENDER_BROWSER_USER="root")
    done = subprocess.run([*CLI, "crawler", "--render"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "rendering needs Chromium's sandbox and it cannot work here: the browser would run as root" in done.stderr
    assert "RENDER_ALLOW_NO_SANDBOX=true" in done.stderr and "Traceback" not in done.stderr
    site.page("/n/0", html(title="unsandboxed"))
    env = _render_env(settings, RENDER_BROWSER_USER="root", RENDER_ALLOW_NO_SANDBOX=True, **SECRETS)
    renderer = Crawler(env, tmp_path, name="render-nosandbox", extra_args=["--render"])
    try:
        renderer.wait_ready(client, prefix, timeout=60)
        seed(settings, client, appid="napp", crawlid="n1", url=site.url("/n/0"), render=True)
        (page,) = collector.wait_for("n1", 1, timeout=60)
        environs = []
        for pid in _browsers(renderer.proc.pid):
            with contextlib.suppress(OSError):  # a renderer may end meanwhile
                environs.append(_environ(pid))
    finally:
        code = renderer.terminate(30)
    assert page["status_code"] == 200 and "<title>unsandboxed</title>" in page["body"]
    warnings = [line for line in renderer.output().splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "WITHOUT Chromium's sandbox (RENDER_ALLOW_NO_SANDBOX=true)" in warnings[0], warnings
    assert environs and all("REDIS_URL" not in e and "REST_API_KEY" not in e for e in environs)
    assert code == 0, renderer.output()


def test_a_script_past_the_javascript_heap_bound_kills_only_its_page(
    site: TestSite, isolated: Any, tmp_path: Path
) -> None:
    """RENDER_JS_HEAP_MB reaches the renderers: a script that allocates without end crashes its page
    within seconds (a failed load, retried, then a dead letter) instead of growing to the V8 default
    of gigabytes, and the crawler renders the next page."""
    hog = "const keep = []; for (;;) { keep.push(new Array(1e6).fill(Math.random())); }"
    site.page("/h/hog", f"<html><body><script>{hog}</script></body></html>".encode())
    site.page("/h/next", html(title="next"))
    settings, prefix, client, collector = isolated
    renderer = Crawler(_render_env(settings, RENDER_JS_HEAP_MB=64, RETRY_TIMES=1), tmp_path, name="render-heap",
                       extra_args=["--render"])  # fmt: skip
    try:
        renderer.wait_ready(client, prefix, timeout=60)
        started = time.monotonic()
        seed(settings, client, appid="happ", crawlid="h1", url=site.url("/h/hog"), render=True)
        (letter,) = collector.wait_for("h1", 1, timeout=60)
        took = time.monotonic() - started
        seed(settings, client, appid="happ", crawlid="h2", url=site.url("/h/next"), render=True)
        (page,) = collector.wait_for("h2", 1, timeout=60)
    finally:
        code = renderer.terminate(30)
    assert letter["_topic"].endswith(".dead_letter") and "crashed" in letter["error"], letter
    assert took < 20, took
    assert page["status_code"] == 200 and "<title>next</title>" in page["body"]
    assert code == 0, renderer.output()
