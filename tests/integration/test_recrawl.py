"""Continuous crawling end to end (docs/contract.md §19): kafka-monitor, redis-monitor and a crawler
as subprocesses on the test Redis and the embedded broker, a site whose pages change between
visits. Pages with an ETag or a Last-Modified are answered 304 and emit nothing, a page without
validators and the same body emits nothing, the changed page is emitted again with ``visit`` and
``changed``, the removed page is emitted once as changed and leaves the schedule, ``info`` counts,
``stop`` empties everything, and nothing says ``complete`` before that."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cluster_crawl import Stack
from support.crawler import Seen, TestSite, html, isolated_settings

from crawlhive.crawler.requests import url_fingerprint
from crawlhive.rest.cluster import ClusterView
from crawlhive.rest.metrics import ClusterCollector
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier.recrawl import PageState, Schedule, schedule_fingerprint
from crawlhive.utils.rules.domains import domain_of_url

pytestmark = pytest.mark.timeout(240)

LAST_MODIFIED = "Wed, 21 Oct 2015 07:28:00 GMT"


class ChangingSite:
    """The recrawled site: pages under /r/ and what the server saw (conditional requests, 304s)."""

    def __init__(self, site: TestSite) -> None:
        self.site = site
        self.version = 1
        self.gone = False
        self.lock = threading.Lock()
        self.not_modified: Counter[str] = Counter()
        self.conditional: Counter[str] = Counter()
        self.served: list[int] = []
        """The version /r/change answered each of its fetches with, in order (one fetch, one visit)."""
        site.page("/r/seed", html("/r/etag", "/r/lm", "/r/plain", "/r/change", "/r/gone"))
        site.handler("/r/etag", self.etag)
        site.handler("/r/lm", self.last_modified)
        site.handler("/r/change", self.change)
        site.handler("/r/gone", self.gone_page)
        site.page("/r/plain", html(title="plain"))

    def _count(self, seen: Seen, modified: bool) -> tuple[int, dict[str, str], bytes] | None:
        path = seen.path
        if "If-None-Match" in seen.headers or "If-Modified-Since" in seen.headers:
            with self.lock:
                self.conditional[path] += 1
        if not modified:
            with self.lock:
                self.not_modified[path] += 1
            return 304, {}, b""
        return None

    def etag(self, seen: Seen) -> tuple[int, dict[str, str], bytes]:
        answer = self._count(seen, seen.headers.get("If-None-Match") != '"v1"')
        return answer or (200, {"Content-Type": "text/html", "ETag": '"v1"'}, html(title="etag"))

    def last_modified(self, seen: Seen) -> tuple[int, dict[str, str], bytes]:
        answer = self._count(seen, seen.headers.get("If-Modified-Since") != LAST_MODIFIED)
        return answer or (200, {"Content-Type": "text/html", "Last-Modified": LAST_MODIFIED}, html(title="lm"))

    def change(self, seen: Seen) -> tuple[int, dict[str, str], bytes]:
        with self.lock:
            version = self.version
            self.served.append(version)
        return 200, {"Content-Type": "text/html"}, html(title=f"version {version}")

    def gone_page(self, seen: Seen) -> tuple[int, dict[str, str], bytes]:
        if self.gone:
            return 404, {"Content-Type": "text/html"}, b"<html>removed</html>"
        return 200, {"Content-Type": "text/html"}, html(title="here")


@pytest.fixture
def site() -> Iterator[TestSite]:
    served = TestSite()
    served.start()
    yield served
    served.stop()


def wait_until(what: str, check: Any, stack: Stack, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: {stack.logs()}"
        time.sleep(0.1)


def items(stack: Stack, crawlid: str) -> list[dict[str, Any]]:
    return stack.collector.of(crawlid, stack.settings.topic("crawled_firehose"))


@pytest.mark.parametrize("fetch", ["plain", "impersonate"])  # conditional requests either way (§25)
def test_a_recrawled_site_emits_only_its_changes_and_stop_ends_it(
    site: TestSite, redis_url: str, kafka_bootstrap: str, tmp_path: Path, fetch: str
) -> None:
    changing = ChangingSite(site)
    settings = isolated_settings(redis_url, kafka_bootstrap, tmp_path, "rc")
    stack = Stack(settings, tmp_path, RECRAWL_MIN_EVERY=1, RECRAWL_CONFIG_CACHE_S=0.5, FETCH=fetch)
    keys = keys_from_settings(settings)
    crawlid = "fresh"
    url = site.url
    codes: list[int] = []
    try:
        crawler = stack.crawler()
        crawler.wait_ready(stack.redis, settings["REDIS_KEY_PREFIX"])
        request = {
            "url": url("/r/seed"),
            "appid": "rapp",
            "crawlid": crawlid,
            "maxdepth": 1,
            "recrawl": {"every": 2, "min": 1, "max": 3},
        }
        stack.send(request)
        pages = ("/r/seed", "/r/etag", "/r/lm", "/r/plain", "/r/change", "/r/gone")
        wait_until("the first visit of every page", lambda: len(items(stack, crawlid)) >= 6, stack)
        first = items(stack, crawlid)
        assert sorted(i["url"] for i in first) == sorted(url(p) for p in pages)
        assert all("visit" not in i for i in first)  # a first fetch is a normal item (§5)
        agents = {v for s in site.hits("/r/") for k, v in s.headers.items() if k.lower() == "user-agent"}
        assert len(agents) == 1 and ("crawlhive" in agents.pop()) == (fetch == "plain"), agents

        # the server changes one page and removes another
        changing.version = 2
        changing.gone = True

        def emitted(path: str) -> list[dict[str, Any]]:
            return [i for i in items(stack, crawlid) if i["url"] == url(path)]

        wait_until("the changed page emitted again", lambda: len(emitted("/r/change")) >= 2, stack)
        again = emitted("/r/change")[1]
        # its visit number: the fetch that first got version 2 (each fetch of the page is a visit)
        assert again["changed"] is True and again["visit"] == changing.served.index(2) + 1 >= 2, again
        assert "version 2" in again["body"]
        assert isinstance(again["previous_fetch"], int) and again["previous_fetch"] <= time.time()
        wait_until("the removed page emitted once", lambda: len(emitted("/r/gone")) >= 2, stack)
        removed = emitted("/r/gone")[1]
        assert removed["status_code"] == 404 and removed["changed"] is True

        # the removed page leaves after RECRAWL_GONE_AFTER (2) visits that find it gone
        wait_until(
            "the removed page leaving",
            lambda: (
                stack.redis.hget(keys.crawl("link", "rapp", crawlid), "recurring") and gone_left(stack, keys, crawlid)
            ),
            stack,
        )
        hits_then = len(site.hits("/r/gone"))
        # more visits: the validators are sent back and answered 304
        wait_until(
            "conditional revisits", lambda: min(changing.not_modified[p] for p in ("/r/etag", "/r/lm")) >= 2, stack
        )
        assert changing.conditional["/r/etag"] >= 2 and changing.conditional["/r/lm"] >= 2
        # intervals adapt (every 2, min 1, max 3): unchanged pages' grow to max, the changed page's
        # halved to min
        wait_until(
            "intervals adapted",
            lambda: (
                [interval(stack, settings, crawlid, url(p)) for p in ("/r/etag", "/r/lm", "/r/plain", "/r/change")]
                == [3, 3, 3, 1]
            ),
            stack,
        )
        assert len(site.hits("/r/plain")) >= 2 and len(site.hits("/r/seed")) >= 2
        time.sleep(2.5)
        assert len(site.hits("/r/gone")) == hits_then  # no longer visited
        by_url = Counter(i["url"] for i in items(stack, crawlid))
        # unchanged pages (304 or the same body) emitted nothing after their first fetch
        assert all(by_url[url(p)] == 1 for p in ("/r/seed", "/r/etag", "/r/lm", "/r/plain")), by_url
        assert by_url[url("/r/gone")] == 2, by_url

        stack.send({"action": "info", "appid": "rapp", "crawlid": crawlid, "spiderid": "link", "uuid": "i1"})
        info = stack.answer(crawlid, "i1")
        recrawl = info["recrawl"]
        assert recrawl["scheduled"] == 5, info  # six pages, one gone
        # at least: /r/etag and /r/lm answered 304 twice each, /r/plain and /r/seed revisited once
        assert recrawl["gone"] >= 2 and recrawl["changed"] >= 1 and recrawl["unchanged"] >= 6, recrawl
        # each scheduled page waits for its time (next_due) or is released into the frontier (due):
        # on a loaded machine all five can be released at once, and next_due is then 0
        assert recrawl["visits"] >= 6 + 2 + 1 + 6 and (recrawl["next_due"] > 0 or recrawl["due"] > 0), recrawl
        assert not [m for m in stack.collector.of(crawlid) if m.get("action") == "complete"]  # recurring
        # GET /crawls and the dashboard read the cluster through ClusterView; /metrics through its collector
        view = ClusterView(stack.redis, settings, {})
        (row,) = [r for r in view.crawl_list("active") if r["crawlid"] == crawlid]
        assert row["state"] == "recurring" and row["recrawl"]["scheduled"] == 5, row
        assert row["recrawl"]["next_due"] > 0 or row["recrawl"]["due"] > 0, row
        assert 0 < row["recrawl"]["changed_ratio"] < 1, row
        metrics = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for m in ClusterCollector(view).collect()
            for s in m.samples
        }
        assert metrics[("crawlhive_recrawl_scheduled", (("spiderid", "link"),))] == 5
        unchanged = ("crawlhive_recrawl_visits_total", (("outcome", "unchanged"), ("spiderid", "link")))
        assert metrics.get(unchanged, 0) >= 6, [k for k in metrics if "recrawl" in k[0]]

        # a crawler SIGKILLed mid-crawl loses no scheduled page: its leases are reclaimed, the
        # visits done by the next crawler, and every page keeps being visited
        killed_at = time.time()
        visits_then = total(stack, keys, crawlid, "rc-visits")
        crawler.kill()
        stack.crawlers.remove(crawler)
        stack.crawler("crawler-2").wait_ready(stack.redis, settings["REDIS_KEY_PREFIX"])
        wait_until(
            "revisits by the second crawler",
            lambda: (
                total(stack, keys, crawlid, "rc-visits") >= visits_then + 10
                and all(any(h.at > killed_at + 1 for h in site.hits(p)) for p in pages if p != "/r/gone")
            ),
            stack,
            timeout=60,
        )
        assert gone_left(stack, keys, crawlid)  # still the five pages

        stack.send({"action": "stop", "appid": "rapp", "crawlid": crawlid, "spiderid": "link", "uuid": "s1"})
        stopped = stack.answer(crawlid, "stop")
        assert stopped["total_purged"] >= 5, stopped
        stack.answer(crawlid, "complete")
        settled = time.monotonic()
        hits = len(site.hits("/r/"))
        time.sleep(3)
        assert len(site.hits("/r/")) <= hits + 5  # at most the visits in flight at the stop
        assert schedule_keys(stack, settings["REDIS_KEY_PREFIX"]) == [], settled
    finally:
        logs = stack.logs()
        codes = stack.close()
    _assert_clean_exit(codes, logs)


def interval(stack: Stack, settings: Settings, crawlid: str, url: str) -> int | None:
    """The interval of the scheduled page *url* of crawl *crawlid* (appid rapp), None if not scheduled."""
    keys = keys_from_settings(settings)
    schedule = Schedule(stack.redis, keys, settings.getint("RECRAWL_STATE_BUCKETS"), 3600)
    fingerprint = schedule_fingerprint(url_fingerprint(url))
    key = schedule.state_key("link", "rapp", crawlid, fingerprint, keys.shard_of(domain_of_url(url)))
    raw = stack.redis.hget(key, fingerprint)
    return PageState.unpack(raw).interval if raw else None


def total(stack: Stack, keys: Keys, crawlid: str, field: str) -> int:
    """A schedule counter of the crawl, summed over the shards."""
    parts = (keys.crawl_shard("link", "rapp", crawlid, shard) for shard in range(keys.shards))
    return sum(int(stack.redis.hget(part, field) or 0) for part in parts)


def gone_left(stack: Stack, keys: Keys, crawlid: str) -> bool:
    """The crawl's schedule holds five pages (the removed one left)."""
    return total(stack, keys, crawlid, "rc-scheduled") == 5


def schedule_keys(stack: Stack, prefix: str) -> list[bytes]:
    return [k for k in stack.redis.scan_iter(match=f"{prefix}*rc-*", count=1000) if stack.redis.type(k) != b"none"]


def test_a_sitemap_lastmod_brings_its_page_forward(
    site: TestSite, redis_url: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Every read of the sitemap says /s/a changed just now (and /s/b long ago): /s/a is visited at
    each read of the sitemap (which changes, so its interval shrinks to ``min``), /s/b on its own
    schedule, which grows while it is unchanged."""
    settings = isolated_settings(redis_url, kafka_bootstrap, tmp_path, "rs")
    site.page(
        "/robots.txt", f"User-agent: *\nSitemap: {site.url('/s/sitemap.xml')}\n".encode(), content_type="text/plain"
    )

    def sitemap(_seen: Seen) -> tuple[int, dict[str, str], bytes]:
        now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() + 1))
        body = (
            '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"<url><loc>{site.url('/s/a')}</loc><lastmod>{now}</lastmod></url>"
            f"<url><loc>{site.url('/s/b')}</loc><lastmod>2001-01-01</lastmod></url></urlset>"
        )
        return 200, {"Content-Type": "application/xml"}, body.encode()

    site.handler("/s/sitemap.xml", sitemap)
    site.page("/s/", html(title="home"))
    site.page("/s/a", html(title="a"))
    site.page("/s/b", html(title="b"))
    stack = Stack(settings, tmp_path, RECRAWL_MIN_EVERY=1)
    codes: list[int] = []
    try:
        stack.crawler().wait_ready(stack.redis, settings["REDIS_KEY_PREFIX"])
        stack.send(
            {
                "url": site.url("/s/"),
                "appid": "rapp",
                "crawlid": "maps",
                "sitemap": True,
                "recrawl": {"every": 3, "min": 1, "max": 60},
            }
        )
        wait_until("a, b and the home page fetched", lambda: len(items(stack, "maps")) >= 3, stack)
        wait_until("/s/a brought forward", lambda: len(site.hits("/s/a")) >= len(site.hits("/s/b")) + 3, stack, 60)
        assert len(site.hits("/s/sitemap.xml")) >= 3 and site.hits("/s/b")
        assert sorted(i["url"] for i in items(stack, "maps")) == [site.url(p) for p in ("/s/", "/s/a", "/s/b")]
        assert len(items(stack, "maps")) == 3  # nothing changed on the pages themselves: nothing emitted
    finally:
        logs = stack.logs()
        codes = stack.close()
    assert codes == [0, 0, 0], logs


def test_a_recrawling_crawl_sent_again_after_stop_starts_a_fresh_schedule(
    site: TestSite, redis_url: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """§19.1: ``stop`` ends a recurring crawl (§3.9: its stopped mark would have a seed sent again
    fetched without its links); the same crawl sent again with ``recrawl`` starts afresh: every
    page is fetched again (links followed, the old dupefilter gone), emitted as a first fetch,
    scheduled again and revisited, and ``info`` and ``GET /crawls`` show the new schedule."""
    site.page("/f/seed", html("/f/a", "/f/b"))
    site.page("/f/a", html(title="a"))
    site.page("/f/b", html(title="b"))
    settings = isolated_settings(redis_url, kafka_bootstrap, tmp_path, "rr")
    stack = Stack(settings, tmp_path, RECRAWL_MIN_EVERY=1)
    keys = keys_from_settings(settings)
    crawlid = "again"
    request = {
        "url": site.url("/f/seed"),
        "appid": "rapp",
        "crawlid": crawlid,
        "maxdepth": 1,
        "recrawl": {"every": 1, "adaptive": False},
    }
    pages = sorted(site.url(p) for p in ("/f/seed", "/f/a", "/f/b"))
    codes: list[int] = []
    try:
        stack.crawler().wait_ready(stack.redis, settings["REDIS_KEY_PREFIX"])
        stack.send(request)
        wait_until("the first visits", lambda: sorted(i["url"] for i in items(stack, crawlid)) == pages, stack)
        wait_until("revisits", lambda: all(len(site.hits(p)) >= 2 for p in ("/f/a", "/f/b")), stack)
        stack.send({"action": "stop", "appid": "rapp", "crawlid": crawlid, "spiderid": "link", "uuid": "s1"})
        assert stack.answer(crawlid, "s1")["total_purged"] >= 3
        stack.answer(crawlid, "complete")
        time.sleep(2)  # visits in flight at the stop are over
        assert total(stack, keys, crawlid, "rc-scheduled") == 0
        assert schedule_keys(stack, settings["REDIS_KEY_PREFIX"]) == []
        hits = {p: len(site.hits(p)) for p in ("/f/seed", "/f/a", "/f/b")}
        time.sleep(2)
        assert {p: len(site.hits(p)) for p in hits} == hits  # stopped: nothing visited

        restarted = time.time()
        before = len(items(stack, crawlid))
        assert before == 3  # unchanged revisits emitted nothing
        stack.send(request)  # the same crawl again, with recrawl: a fresh schedule
        wait_until(
            "every page fetched again and emitted as a first fetch",
            lambda: sorted(i["url"] for i in items(stack, crawlid)[before:]) == pages,
            stack,
        )
        again = items(stack, crawlid)[before:]
        assert all("visit" not in i for i in again), again  # the purged state is not carried over
        wait_until("all three pages scheduled", lambda: total(stack, keys, crawlid, "rc-scheduled") == 3, stack)
        wait_until(
            "revisits on the new schedule",
            lambda: all(len([h for h in site.hits(p) if h.at > restarted]) >= 3 for p in ("/f/seed", "/f/a", "/f/b")),
            stack,
        )
        stack.send({"action": "info", "appid": "rapp", "crawlid": crawlid, "spiderid": "link", "uuid": "i1"})
        recrawl = stack.answer(crawlid, "i1")["recrawl"]
        assert recrawl["scheduled"] == 3 and 0 <= recrawl["due"] <= 3, recrawl
        assert recrawl["next_due"] > 0 or recrawl["due"] > 0, recrawl  # waiting for its time, or released
        view = ClusterView(stack.redis, settings, {})
        (row,) = [r for r in view.crawl_list("active") if r["crawlid"] == crawlid]
        assert row["state"] == "recurring" and row["recrawl"]["scheduled"] == 3, row
        # unchanged pages: no item on the new schedule's revisits either
        assert len(items(stack, crawlid)) == before + 3

        stack.send({"action": "stop", "appid": "rapp", "crawlid": crawlid, "spiderid": "link", "uuid": "s2"})
        assert stack.answer(crawlid, "s2")["total_purged"] >= 3
        time.sleep(2)
        assert schedule_keys(stack, settings["REDIS_KEY_PREFIX"]) == []
    finally:
        logs = stack.logs()
        codes = stack.close()
    _assert_clean_exit(codes, logs)


def test_with_emit_unchanged_every_revisit_is_emitted(
    site: TestSite, redis_url: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """RECRAWL_EMIT_UNCHANGED (§19.4): every revisit emits an item. An unchanged one (a 304 for
    the pages with validators, the same body for the others) has ``"changed": false`` and an empty
    body; the changed page's revisit has ``"changed": true`` and its new body, then ``false`` again
    while it stays the same; each page's visit numbers run without a gap, and ``info`` counts them."""
    changing = ChangingSite(site)
    settings = isolated_settings(redis_url, kafka_bootstrap, tmp_path, "ru")
    stack = Stack(settings, tmp_path, RECRAWL_MIN_EVERY=1, RECRAWL_EMIT_UNCHANGED=True)
    crawlid = "all"
    url = site.url
    codes: list[int] = []

    def emitted(path: str) -> list[dict[str, Any]]:
        return [i for i in items(stack, crawlid) if i["url"] == url(path)]

    steady = ("/r/seed", "/r/etag", "/r/lm", "/r/plain")
    try:
        stack.crawler().wait_ready(stack.redis, settings["REDIS_KEY_PREFIX"])
        stack.send(
            {
                "url": url("/r/seed"),
                "appid": "rapp",
                "crawlid": crawlid,
                "maxdepth": 1,
                "recrawl": {"every": 1, "adaptive": False},
            }
        )
        wait_until("the first visit of every page", lambda: len(items(stack, crawlid)) >= 6, stack)
        changing.version = 2
        wait_until(
            "unchanged revisits emitted",
            lambda: (
                all(len(emitted(p)) >= 4 for p in steady)
                and any(i.get("changed") is True for i in emitted("/r/change"))
                and len(emitted("/r/change")) >= 4
            ),
            stack,
        )
        stack.send({"action": "info", "appid": "rapp", "crawlid": crawlid, "spiderid": "link", "uuid": "i1"})
        recrawl = stack.answer(crawlid, "i1")["recrawl"]
        assert recrawl["unchanged"] >= 4 * 3 and recrawl["changed"] >= 1, recrawl
        stack.send({"action": "stop", "appid": "rapp", "crawlid": crawlid, "spiderid": "link", "uuid": "s1"})
        stack.answer(crawlid, "complete")
        stack.collector.settle(crawlid)
        now = time.time()
        for path in (*steady, "/r/change"):
            first, *revisits = sorted(emitted(path), key=lambda i: i.get("visit", 1))
            assert "visit" not in first and first["body"], first  # the first fetch: a normal item
            assert [i["visit"] for i in revisits] == list(range(2, 2 + len(revisits))), revisits
            for item in revisits:
                assert 0 < item["previous_fetch"] <= now, item
            unchanged = [i for i in revisits if not i["changed"]]
            assert all(i["body"] == "" for i in unchanged), unchanged
            if path != "/r/change":
                assert len(unchanged) == len(revisits) >= 3, revisits
            # the visit's own status: 304 where the server answered the conditional request so
            answered = 304 if path in ("/r/etag", "/r/lm") else 200
            assert all(i["status_code"] == answered for i in revisits), revisits
        # the server answered the pages with validators 304 (and those visits were emitted too)
        assert changing.not_modified["/r/etag"] >= 3 and changing.not_modified["/r/lm"] >= 3
        changed = [i for i in emitted("/r/change") if i.get("changed")]
        assert len(changed) == 1 and "version 2" in changed[0]["body"], changed  # changed once
    finally:
        logs = stack.logs()
        codes = stack.close()
    _assert_clean_exit(codes, logs)


def test_a_recurring_crawl_and_an_appid_keep_at_most_their_limits_on_schedule(
    site: TestSite, redis_url: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """§19.1: a recurring crawl keeps at most RECRAWL_MAX_PAGES_DEFAULT pages on its schedule (its
    ``max_pages`` when it sends one), an appid at most APPID_MAX_SCHEDULED_PAGES over all its
    recurring crawls, counted cluster-wide; pages fetched past a limit are emitted but not fetched
    again, and ``info`` names the limit. Without the limits every fetched page would be revisited
    for as long as the crawl recurs."""
    for prefix in ("/ca/", "/cb/"):
        pages = [f"{prefix}{i}" for i in range(6)]
        site.page(f"{prefix}seed", html(*pages))
        for page in pages:
            site.page(page, html())
    settings = isolated_settings(redis_url, kafka_bootstrap, tmp_path, "rq")
    stack = Stack(settings, tmp_path, RECRAWL_MIN_EVERY=1, RECRAWL_MAX_PAGES_DEFAULT=3, APPID_MAX_SCHEDULED_PAGES=5)
    keys = keys_from_settings(settings)
    codes: list[int] = []
    try:
        stack.crawler().wait_ready(stack.redis, settings["REDIS_KEY_PREFIX"])
        recrawl = {"every": 1, "adaptive": False}
        stack.send({"url": site.url("/ca/seed"), "appid": "qapp", "crawlid": "ca", "maxdepth": 1, "recrawl": recrawl})
        wait_until("the first visit of every page of ca", lambda: len(items(stack, "ca")) >= 7, stack)
        # its own max_pages (7) is its cap; the appid's ceiling (5) leaves it 5 - 3 = 2
        stack.send(
            {
                "url": site.url("/cb/seed"),
                "appid": "qapp",
                "crawlid": "cb",
                "maxdepth": 1,
                "max_pages": 7,
                "recrawl": recrawl,
            }
        )
        wait_until("the first visit of every page of cb", lambda: len(items(stack, "cb")) >= 7, stack)
        time.sleep(3)  # revisits: only scheduled pages are fetched again
        fetched = Counter(s.path for s in site.hits("/c"))
        for crawlid in ("ca", "cb"):
            stack.send({"action": "info", "appid": "qapp", "crawlid": crawlid, "spiderid": "link", "uuid": crawlid})
        ca, cb = (stack.answer(c, c)["recrawl"] for c in ("ca", "cb"))
        assert (ca["scheduled"], ca.get("schedule_stopped")) == (3, "RECRAWL_MAX_PAGES_DEFAULT"), ca
        assert (cb["scheduled"], cb.get("schedule_stopped")) == (2, "APPID_MAX_SCHEDULED_PAGES"), cb
        for prefix, scheduled in (("/ca/", 3), ("/cb/", 2)):
            again = [p for p, n in fetched.items() if p.startswith(prefix) and n > 1]
            assert len(again) == scheduled, fetched  # the others were fetched once
        wait_until(  # the redis-monitor's true count, cluster-wide
            "the appid's count",
            lambda: stack.redis.hget(keys.app_scheduled("qapp"), "*") == b"5",
            stack,
        )
        stack.send({"action": "stop", "appid": "qapp", "crawlid": "ca", "spiderid": "link", "uuid": "s"})
        stack.answer("ca", "stop")
        assert stack.redis.hget(keys.app_scheduled("qapp"), "*") == b"2"  # its pages left the count
    finally:
        logs = stack.logs()
        codes = stack.close()
    _assert_clean_exit(codes, logs)


def _assert_clean_exit(codes: list[int], logs: str) -> None:
    """Every process of the stack exited 0 and logged no WARNING, ERROR or traceback."""
    assert codes == [0, 0, 0], logs
    for line in logs.splitlines():
        assert " WARNING " not in line and " ERROR " not in line and "Traceback" not in line, line
