"""User spiders, first part (docs/contract.md §11): how ``crawlhive crawler --spider NAME`` finds
a spider (built-in, ``package.module:Class``, or by ``name`` in SPIDER_MODULES), an unknown name
exits 2 naming SPIDER_MODULES, and SPIDER_IDS limits the spider types requests may name."""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from support.crawler import (
    Collector,
    Crawler,
    LeaseReaper,
    TestSite,
    crawler_env,
    crawler_module,
    html,
    isolated_settings,
    output_collector,
    redis_for,
    seed,
)
from support.sinks import count, log_of, pg_table, rows, sink_url, start_sink, wait_until

from crawlhive.utils.backends.blobs import BlobStore
from crawlhive.utils.backends.kafka_clients import ensure_topics
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.validation import Accepted, Rejected
from crawlhive.utils.frontier import FrontierReader
from crawlhive.utils.process.intake import request_validator

__all__ = ["pg_table"]  # the fixture, imported from support.sinks

pytestmark = pytest.mark.timeout(120)

CLI = [sys.executable, "-m", "crawlhive.app.cli"]

#: A user's spider module: built on crawlhive's link spider, under its own spider type.
SPIDER_MODULE = """
from crawlhive.crawler.spiders.link import LinkSpider


class ShopSpider(LinkSpider):
    name = "shop"
"""


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    package = tmp_path / "userspiders"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "shop.py").write_text(textwrap.dedent(SPIDER_MODULE))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{__import__('os').environ.get('PYTHONPATH', '')}")
    return tmp_path


@pytest.mark.parametrize(
    ("spider", "extra"),
    [
        ("userspiders.shop:ShopSpider", {}),
        ("shop", {"SPIDER_MODULES": ["userspiders.shop"]}),
    ],
)
def test_a_user_spider_is_found_and_crawls_under_its_own_spiderid(
    user_module: Path, redis_url: str, kafka_bootstrap: str, spider: str, extra: dict[str, object]
) -> None:
    site = TestSite()
    site.start()
    site.page("/u/0", html())
    try:
        with crawler_module(redis_url, kafka_bootstrap, user_module, "u", spider=spider, **extra) as env:
            seed(env["settings"], env["redis"], appid="userapp", crawlid="u1", spiderid="shop", url=site.url("/u/0"))
            (item,) = env["collector"].wait_for("u1", 1)
            assert item["url"] == site.url("/u/0") and item["status_code"] == 200
    finally:
        site.stop()


@pytest.mark.parametrize(
    ("spider", "extra", "message"),
    [
        ("nosuch", {}, "SPIDER_MODULES (not set)"),
        ("nosuch", {"SPIDER_MODULES": ["userspiders.shop"]}, "SPIDER_MODULES (userspiders.shop)"),
        ("userspiders.shop:Nope", {}, "cannot load 'userspiders.shop:Nope'"),
        ("shop", {"SPIDER_MODULES": ["no_such_module_here"]}, "SPIDER_MODULES: cannot import"),
    ],
)
def test_an_unknown_spider_exits_2_naming_spider_modules(
    user_module: Path, tmp_path: Path, spider: str, extra: dict[str, object], message: str
) -> None:
    env = crawler_env(Settings.from_overrides(CRAWLHIVE_HOME=str(tmp_path)), **extra)
    done = subprocess.run([*CLI, "crawler", "--spider", spider], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_spider_ids_limit_the_spider_types_requests_may_name() -> None:
    anyone = request_validator(Settings.from_overrides())
    assert isinstance(
        anyone.validate({"url": "http://x.com/", "appid": "app", "crawlid": "c", "spiderid": "x"}), Accepted
    )
    only = request_validator(Settings.from_overrides(SPIDER_IDS=["shop", "link"]))
    crawl = {"url": "http://x.com/", "appid": "app", "crawlid": "c"}
    assert isinstance(only.validate({**crawl, "spiderid": "shop"}), Accepted)
    assert isinstance(only.validate(crawl), Accepted)  # the default spiderid, link, is listed
    rejected = only.validate({**crawl, "spiderid": "x"})
    assert isinstance(rejected, Rejected)
    assert rejected.reason == "Invalid request: crawl: 'x' is not a known spider (SPIDER_IDS)"
    info = {"action": "info", "appid": "app", "uuid": "u", "spiderid": "x", "crawlid": "c"}
    assert only.validate(info) == Rejected("Invalid request: action: 'x' is not a known spider (SPIDER_IDS)")
    assert isinstance(only.validate({"stats": "queue", "appid": "app", "uuid": "s"}), Accepted)  # no spiderid


#: An ordinary Scrapy spider (no crawlhive base class) with pipelines, callbacks, cb_kwargs, meta,
#: response.follow and Request, a dataclass item, a spider error, and custom_settings.
QUOTES_MODULE = """
import dataclasses
import threading

import scrapy
from scrapy.exceptions import DropItem


@dataclasses.dataclass
class Detail:
    title: str
    n: int
    label: str


class DropSecrets:
    def process_item(self, item):
        if "secret" in str(dict(item) if isinstance(item, dict) else item):
            raise DropItem("secret")
        return item


class Shout:
    def process_item(self, item):
        if isinstance(item, dict):
            item = {**item, "text": item["text"].upper()}  # a new object: still delivered
        return item


class Explode:
    def process_item(self, item):
        if isinstance(item, dict) and item.get("text", "").lower() == "pipeline bomb":
            raise RuntimeError("pipeline exploded")
        return item


class Tag:
    def process_request(self, request):
        request.headers["X-Quotes"] = "1"


class QuoteSpider(scrapy.Spider):
    name = "quotes"
    custom_settings = {
        "ITEM_PIPELINES": {
            "userspiders.quotes.DropSecrets": 100,
            "userspiders.quotes.Shout": 200,
            "userspiders.quotes.Explode": 300,
        },
        "DOWNLOADER_MIDDLEWARES": {"userspiders.quotes.Tag": 543},
    }

    def parse(self, response):
        if "boom" in response.url:
            raise ValueError("boom on purpose")
        for text in response.css("p.quote::text").getall():
            yield {"text": text, "page": response.url}
        for href in response.css("a.detail::attr(href)").getall():
            yield response.follow(href, callback=self.parse_detail, cb_kwargs={"n": 7}, meta={"label": "L"})
        for href in response.css("a.plain::attr(href)").getall():
            yield scrapy.Request(response.urljoin(href))
        for href in response.css("a.again::attr(href)").getall():
            yield scrapy.Request(response.urljoin(href), dont_filter=True)
        for href in response.css("a.odd::attr(href)").getall():
            url = response.urljoin(href)
            meta = {"label": "kept", "lock": threading.Lock()}  # the lock cannot travel: left out
            yield scrapy.Request(url, callback=self.parse_detail, cb_kwargs={"n": 1}, meta=meta)
            yield scrapy.Request(url + "?bad", callback=self.parse_detail, cb_kwargs={"n": object()})  # dropped

    def parse_detail(self, response, n):
        yield Detail(title=response.css("title::text").get(), n=n, label=response.meta["label"])
"""


def _quote_page(*quotes: str, links: str = "", title: str = "page") -> bytes:
    body = "".join(f'<p class="quote">{q}</p>' for q in quotes)
    return f"<html><head><title>{title}</title></head><body>{body}{links}</body></html>".encode()


@pytest.fixture
def quotes_module(user_module: Path) -> Path:
    (user_module / "userspiders" / "quotes.py").write_text(textwrap.dedent(QUOTES_MODULE))
    return user_module


def test_a_plain_scrapy_spider_runs_on_the_cluster_with_items_callbacks_pipelines_and_filters(
    quotes_module: Path, redis_url: str, kafka_bootstrap: str
) -> None:
    """docs/contract.md §11: items in the envelope on <prefix>.items after the user's pipelines
    (DropItem drops, a replaced object is delivered), callbacks with cb_kwargs and meta, and the
    crawl's maxdepth, filters and dedupe on the requests the spider yields (dont_filter skips only
    dedupe); a page counts as crawled whatever it yielded."""
    site = TestSite()
    site.start()
    links = (
        '<a class="detail" href="/q/detail">d</a>'
        '<a class="plain" href="/q/1">1</a><a class="plain" href="/q/1">1 again</a>'  # deduped
        '<a class="plain" href="/q/0">self</a>'  # seen already
        f'<a class="plain" href="{site.url("/q/other", host="127.0.0.2")}">other host</a>'  # allowed_domains
        '<a class="plain" href="/q/deny-me">denied</a>'  # deny_regex
        '<a class="plain" href="/q/file.pdf">pdf</a>'  # deny_extensions (Scrapy's default list)
        '<a class="plain" href="ftp://127.0.0.1/x">ftp</a>'  # not http(s)
    )
    site.page("/q/0", _quote_page("first", "a secret one", links=links))
    site.page("/q/detail", _quote_page(title="Detail page"))
    site.page(
        "/q/1",
        _quote_page(
            "second",
            links='<a class="plain" href="/q/2">2</a><a class="again" href="/q/0">0</a>'
            '<a class="plain" href="/q/empty">e</a>',
        ),
    )
    site.page("/q/empty", _quote_page())  # yields nothing: still a crawled page
    site.page("/q/2", _quote_page("third", links='<a class="plain" href="/q/3">3</a>'))  # depth 2 = maxdepth
    site.page("/q/3", _quote_page("too deep"))
    try:
        with crawler_module(
            redis_url, kafka_bootstrap, quotes_module, "q", spider="quotes", SPIDER_MODULES=["userspiders.quotes"]
        ) as env:
            settings = env["settings"]
            seed(
                settings,
                env["redis"],
                appid="qapp",
                crawlid="q1",
                spiderid="quotes",
                url=site.url("/q/0"),
                maxdepth=2,
                allowed_domains=["127.0.0.1"],
                deny_regex=["deny"],
            )
            collector = env["collector"]
            collector.wait_for("q1", 5, topic=settings.topic("items"), timeout=30)
            items = collector.settle("q1", quiet_s=2.0)
            state = FrontierReader.from_settings(env["redis"], settings).crawl_state("quotes", "qapp", "q1")
    finally:
        site.stop()
    assert {m["_topic"] for m in items} == {settings.topic("items")}, items  # no page items: none yielded
    for m in items:
        assert set(m) == {"appid", "crawlid", "spiderid", "url", "timestamp", "item", "_topic"}
        assert (m["appid"], m["crawlid"], m["spiderid"]) == ("qapp", "q1", "quotes")
    quotes = sorted((m["item"].get("text"), m["url"]) for m in items if "text" in m["item"])
    # "first" twice: /q/0 was fetched again by the dont_filter request on /q/1
    assert quotes == [
        ("FIRST", site.url("/q/0")),
        ("FIRST", site.url("/q/0")),
        ("SECOND", site.url("/q/1")),
        ("THIRD", site.url("/q/2")),
    ], quotes
    (detail,) = [m for m in items if "title" in m["item"]]
    assert detail["item"] == {"title": "Detail page", "n": 7, "label": "L"}
    assert detail["url"] == site.url("/q/detail")
    fetched = sorted(s.path for s in site.hits("/q/"))
    assert fetched == ["/q/0", "/q/0", "/q/1", "/q/2", "/q/detail", "/q/empty"], fetched
    assert state.crawled == 6, state  # every fetched page, /q/empty included
    # the spider's own downloader middleware ran beside crawlhive's
    assert all({k.lower(): v for k, v in s.headers.items()}.get("x-quotes") == "1" for s in site.hits("/q/"))


def test_spider_and_pipeline_errors_are_dead_letters_without_retries(
    quotes_module: Path, redis_url: str, kafka_bootstrap: str
) -> None:
    site = TestSite()
    site.start()
    site.page("/e/boom", _quote_page("never"))
    site.page("/e/pipe", _quote_page("pipeline bomb", "fine"))
    site.page("/e/odd", _quote_page(links='<a class="odd" href="/e/target">t</a>'))
    site.page("/e/target", _quote_page(title="Target"))
    try:
        with crawler_module(
            redis_url, kafka_bootstrap, quotes_module, "e", spider="userspiders.quotes:QuoteSpider"
        ) as env:
            settings = env["settings"]
            for crawlid, path in (("e1", "/e/boom"), ("e2", "/e/pipe"), ("e3", "/e/odd")):
                seed(
                    settings,
                    env["redis"],
                    appid="eapp",
                    crawlid=crawlid,
                    spiderid="quotes",
                    url=site.url(path),
                    maxdepth=1,
                )
            collector = env["collector"]
            (boom,) = collector.wait_for("e1", 1, topic=settings.topic("dead_letter"), timeout=30)
            pipe = collector.wait_for("e2", 1, topic=settings.topic("dead_letter"), timeout=30)
            odd = collector.wait_for("e3", 1, topic=settings.topic("items"), timeout=30)
            time.sleep(1.0)
            log = env["crawler"].output()
    finally:
        site.stop()
    assert boom["error"] == "spider error: ValueError: boom on purpose"
    assert boom["stage"] == "crawl" and boom["retry_times"] == 0
    assert pipe[0]["error"] == "item pipeline error: RuntimeError: pipeline exploded"
    assert len(site.hits("/e/boom")) == 1  # not retried
    assert "Traceback" in log and "boom on purpose" in log
    assert collector.of("e1", settings.topic("items")) == []
    # meta that is not JSON is left out, cb_kwargs that are not JSON drop the request (§11)
    assert [m["item"] for m in odd] == [{"title": "Target", "n": 1, "label": "kept"}]
    assert [s.path for s in site.hits("/e/target")] == ["/e/target"]
    assert "'lock' is not a JSON value" in log and "cb_kwargs are not JSON values" in log


def test_custom_settings_cannot_remove_crawlhive_components(user_module: Path, tmp_path: Path) -> None:
    (user_module / "userspiders" / "rude.py").write_text(
        textwrap.dedent(
            """
            import scrapy

            class Rude(scrapy.Spider):
                name = "rude"
                custom_settings = {
                    "SPIDER_MIDDLEWARES": {"crawlhive.crawler.middlewares.spider.FrontierSpiderMiddleware": None}
                }
            """
        )
    )
    env = crawler_env(Settings.from_overrides(CRAWLHIVE_HOME=str(tmp_path)))
    done = subprocess.run(
        [*CLI, "crawler", "--spider", "userspiders.rude:Rude"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stderr  # a settings error
    assert "Traceback" not in done.stderr
    assert "Rude.custom_settings" in done.stderr and "FrontierSpiderMiddleware" in done.stderr


def test_redis_only_mode_crawls_from_a_start_urls_list_with_no_broker(
    quotes_module: Path, redis_url: str, tmp_path: Path
) -> None:
    """docs/contract.md §12: ``--no-kafka`` with an unreachable broker: seeds (a URL, a JSON crawl
    request) from ``<name>:start_urls``, items to ``<spider>:items``, invalid entries and crawl
    dead letters to ``<spider>:dead_letter``, nothing left in the start list."""
    site = TestSite()
    site.start()
    detail = '<a class="detail" href="/r/detail">d</a>'
    site.page("/r/0", _quote_page("one", links=detail))  # a bare URL: maxdepth 0, the link is not followed
    site.page("/r/detail", _quote_page(title="R detail"))
    site.page("/r/json", _quote_page("from json", links=detail))
    site.page("/r/boom", _quote_page("never"))
    prefix = f"ro{secrets.token_hex(4)}"
    name = f"quotes{secrets.token_hex(3)}"  # the lists are not under the prefix: unique per test
    settings = Settings.from_overrides(
        REDIS_URL=redis_url,
        KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1",  # nothing listens: any Kafka use would fail
        REDIS_KEY_PREFIX=prefix,
        KAFKA_TOPIC_PREFIX=prefix,
        CRAWLHIVE_HOME=str(tmp_path),
    )
    client = redis_for(redis_url)
    env = crawler_env(
        settings,
        SPIDER_MODULES=["userspiders.quotes"],
        REDIS_START_URLS_KEY=f"{name}:start_urls",
        REDIS_ITEMS_KEY=f"{name}:items",
    )
    crawler = Crawler(env, tmp_path, spider="quotes", name="redis-only", extra_args=["--no-kafka"])
    try:
        crawler.wait_ready(client, prefix)
        client.rpush(
            f"{name}:start_urls",
            site.url("/r/0"),
            json.dumps({"url": site.url("/r/json"), "appid": "japp", "crawlid": "j1", "maxdepth": 1}),
            json.dumps({"url": site.url("/r/boom"), "appid": "japp", "crawlid": "j2"}),
            "not a url at all",
            "{broken json",
            json.dumps({"action": "info", "appid": "app1", "uuid": "u1", "spiderid": "quotes", "crawlid": "j1"}),
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
            client.llen(f"{name}:items") < 3 or client.llen("quotes:dead_letter") < 4
        ):
            time.sleep(0.1)
        items = [json.loads(x) for x in client.lrange(f"{name}:items", 0, -1)]
        letters = [json.loads(x) for x in client.lrange("quotes:dead_letter", 0, -1)]
        assert client.llen(f"{name}:start_urls") == 0
    finally:
        code = crawler.terminate()
        site.stop()
        for key in [*client.scan_iter(match=f"{prefix}*", count=1000), f"{name}:items", "quotes:dead_letter"]:
            client.delete(key)
        client.close()
    assert code == 0, crawler.output()
    by_text = {i["item"].get("text") or i["item"].get("title"): i for i in items}
    assert set(by_text) == {"ONE", "R detail", "FROM JSON"}, items
    assert (by_text["ONE"]["appid"], by_text["ONE"]["crawlid"]) == ("redis", "quotes")
    assert (by_text["FROM JSON"]["appid"], by_text["FROM JSON"]["crawlid"]) == ("japp", "j1")
    assert by_text["R detail"]["crawlid"] == "j1" and len(site.hits("/r/detail")) == 1
    errors = sorted(letter["error"] for letter in letters)
    assert "spider error: ValueError: boom on purpose" in errors
    assert len(errors) == 4, errors
    assert any(e.startswith("Invalid request: crawl: 'not a url at all' is not an absolute") for e in errors), errors
    assert any(e.startswith("Invalid request: action requests are not read from") for e in errors), errors
    assert any("JSON" in e for e in errors), errors
    log = crawler.output()
    assert "Redis-only mode" in log
    assert not [line for line in log.splitlines() if "kafka" in line.lower() and "Redis-only mode" not in line], log


def test_a_user_spider_crawl_survives_a_sigkilled_crawler(
    quotes_module: Path, redis_url: str, kafka_bootstrap: str
) -> None:
    """At least once (§11): a crawler SIGKILLed mid-crawl; its expired leases are reclaimed (as
    the redis-monitor's reaper does) and another crawler delivers every page's item."""
    site = TestSite()
    site.start()

    def leaf(seen: Any) -> tuple[int, dict[str, str], bytes]:
        time.sleep(0.05)
        return 200, {"Content-Type": "text/html"}, _quote_page(f"quote {seen.path}")

    pages = [f"/k/{i}" for i in range(1, 200)]
    site.page("/k/0", _quote_page("quote /k/0", links="".join(f'<a class="plain" href="{p}">x</a>' for p in pages)))
    for page in pages:
        site.handler(page, leaf)
    settings = isolated_settings(redis_url, kafka_bootstrap, quotes_module, "k")
    token = settings["REDIS_KEY_PREFIX"]
    client = redis_for(redis_url)
    collector = output_collector(settings)
    env = crawler_env(settings, SPIDER_MODULES=["userspiders.quotes"], LEASE_TIMEOUT=2, CONCURRENT_REQUESTS=8)
    victim = Crawler(env, quotes_module, spider="quotes", name="victim")
    survivor: Crawler | None = None
    reaper = LeaseReaper(client, settings, "quotes")
    try:
        victim.wait_ready(client, token)
        seed(settings, client, appid="kapp", crawlid="kill", spiderid="quotes", url=site.url("/k/0"), maxdepth=1)
        collector.wait_for("kill", 40, timeout=30)
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        survivor = Crawler(env, quotes_module, spider="quotes", name="survivor")
        reaper.start()
        deadline = time.monotonic() + 60
        urls: set[str] = set()
        while len(urls) < 200 and time.monotonic() < deadline:
            urls = {m["url"] for m in collector.of("kill", settings.topic("items"))}
            time.sleep(0.1)
        assert len(urls) == 200, (sum(reaper.requeued), survivor.output()[-3000:])
        assert sum(reaper.requeued) > 0  # the victim held leases when it died
        assert collector.of("kill", settings.topic("dead_letter")) == []
    finally:
        reaper.stop()
        victim.kill()
        if survivor is not None:
            assert survivor.terminate() == 0, survivor.output()
        collector.close()
        site.stop()
        for key in client.scan_iter(match=f"{token}*", count=1000):
            client.delete(key)
        client.close()


def test_items_go_to_the_appid_topic_too_and_an_oversized_item_goes_by_reference(
    quotes_module: Path, redis_url: str, kafka_bootstrap: str, pg_table: str
) -> None:
    """KAFKA_APPID_TOPICS copies items to items_<appid>; an item over KAFKA_PRODUCER_MAX_REQUEST_SIZE
    is no dead letter but goes by reference (§20.5): ``"item": null`` and ``item_ref``, the item's
    JSON a blob, which a PostgreSQL sink reading ``items`` and ``crawlhive dump`` read whole."""
    site = TestSite()
    site.start()
    site.page("/b/ok", _quote_page("small"))
    site.page("/b/big", _quote_page("x" * 60_000))
    try:
        with crawler_module(
            redis_url,
            kafka_bootstrap,
            quotes_module,
            "b",
            spider="userspiders.quotes:QuoteSpider",
            KAFKA_APPID_TOPICS=True,
            KAFKA_PRODUCER_MAX_REQUEST_SIZE=50_000,
        ) as env:
            settings = env["settings"]
            appid_topic = settings.topic("items_bapp")
            ensure_topics(settings, [appid_topic])
            per_app = Collector(settings, [appid_topic])
            try:
                time.sleep(1.0)  # the new consumer has its partitions
                for crawlid, path in (("b1", "/b/ok"), ("b2", "/b/big")):
                    seed(settings, env["redis"], appid="bapp", crawlid=crawlid, spiderid="quotes", url=site.url(path))
                (copy,) = per_app.wait_for("b1", 1, timeout=30)
                (big,) = env["collector"].wait_for("b2", 1, topic=settings.topic("items"), timeout=30)
                (item,) = env["collector"].wait_for("b1", 1, topic=settings.topic("items"), timeout=30)
            finally:
                per_app.close()
            sink = start_sink(settings, quotes_module, sink_url(pg_table), "--from", "items")
            try:
                wait_until("both items stored", lambda: count(pg_table) == 2, timeout=90, process=sink)
            finally:
                sink.send_signal(signal.SIGTERM)
                assert sink.wait(30) == 0
            dumped = subprocess.run(
                [*CLI, "dump", "items", "-b", "-n", "2"], env=crawler_env(settings), capture_output=True, timeout=60
            )
            letters = env["collector"].of("b2", settings.topic("dead_letter"))
            blobs = BlobStore.from_settings(settings)
    finally:
        site.stop()
    assert copy["item"] == item["item"] == {"text": "SMALL", "page": site.url("/b/ok")}
    whole = {"text": "X" * 60_000, "page": site.url("/b/big")}
    assert big["item"] is None and big["item_ref"]["size"] > 60_000 and letters == []
    assert blobs.resolve(big)["item"] == whole
    stored = {row["url"]: row["record"] for row in rows(pg_table)}
    assert stored[site.url("/b/big")]["item"] == whole and stored[site.url("/b/ok")]["item"] == item["item"]
    assert dumped.returncode == 0, dumped.stderr
    assert whole in [json.loads(line)["item"] for line in dumped.stdout.splitlines()]
    assert "Traceback" not in log_of(sink) and "WARNING" not in log_of(sink), log_of(sink)
