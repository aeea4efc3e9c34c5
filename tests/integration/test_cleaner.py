"""The cleaning stage (docs/contract.md §13): ``crawlhive cleaner`` from ``crawled_firehose`` to
``cleaned`` through the real commands, on realistic pages the tests serve; garbage input; a
cleaner SIGKILLed mid-stream."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support.crawler import CLI, Collector, Crawler, TestSite, crawler_env, redis_for, seed

from crawlhive.cleaner.cleaner import COUNTERS
from crawlhive.utils.backends.kafka_clients import consumer_lag, ensure_topics, make_producer
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings

pytestmark = pytest.mark.timeout(120)

EN_ARTICLE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Rivers of the North | Daily Planet</title>
<meta name="description" content="A long walk along the rivers. Write to editor@planet.example.">
<meta property="article:published_time" content="2024-03-05T10:00:00Z">
<script>window.tracking = {id: 42}; function ad() { return "BUY NOW"; }</script>
<style>body { color: red; }</style></head>
<body>
<nav><a href="/">Home</a> | <a href="/news">News</a> | <a href="/sport">Sport</a> | <a href="/login">Log in</a></nav>
<div class="ad banner">BUY CHEAP WATCHES NOW - LIMITED OFFER</div>
<article><h1>Rivers of the North</h1>
<p>The rivers of the north run cold and clear through the valleys, and every spring the melting snow
<a href="/floods">turns them into torrents</a> that carry stones the size of houses down towards the sea.</p>
<p>Fishermen who have worked these waters for decades say the seasons are changing, and that the
salmon now return weeks earlier than their fathers remember. Call the river office on
+1 202-555-0143 or write to jane.doe@example.com for the fishing calendar.</p>
<p>Scientists from the university have been measuring the temperature of the water every hour for
ten years, and their data confirm what the fishermen say about the warming rivers.</p>
</article>
<footer>Copyright 2024 Daily Planet. All rights reserved. <a href="/privacy">Privacy</a></footer>
</body></html>"""

FR_ARTICLE = """<!DOCTYPE html>
<html lang="fr"><head><meta charset="iso-8859-1"><title>Les vignes de Bourgogne</title>
<script type="application/ld+json">{"@type": "NewsArticle", "datePublished": "2022-07-04"}</script></head>
<body><header><a href="/">Accueil</a> <a href="/contact">Contact</a></header>
<main><h1>Les vignes de Bourgogne</h1>
<p>Les vignerons de Bourgogne commencent les vendanges plus tôt chaque année, car les étés sont de
plus en plus chauds et les raisins mûrissent avant la fin du mois d'août.</p>
<p>Dans les caves, les anciens racontent que leurs parents vendangeaient en octobre, sous la pluie,
et que le vin de cette époque avait un goût bien différent de celui d'aujourd'hui.</p>
<p>Pour visiter le domaine, appelez le 01 42 68 53 00 ou écrivez à visites@domaine.example.</p></main>
<aside class="sidebar">Publicité : achetez nos bouteilles en ligne !</aside>
</body></html>"""


#: Publication dates as pages show them: visible text, a time element, a path-like date.
DATED = (
    '<p class="date">Published 14 February 2023</p>',
    '<time datetime="2021-11-30">30/11/2021</time>',
    "<span>Posted on 2020/06/15 by Ann</span>",
)


def _dated(date_html: str) -> str:
    paragraph = "<p>The harvest began early this year and the farmers were surprised by the heat of the summer.</p>"
    article = f"<article><h1>Harvest</h1>{date_html}{paragraph * 3}</article>"
    return f"<html><head><title>Harvest</title></head><body>{article}</body></html>"


def item(
    url: str, body: str, status: int = 200, content_type: str = "text/html; charset=utf-8", **extra: Any
) -> dict[str, Any]:
    """A crawled item (docs/contract.md §5) as a crawler sends it."""
    return {
        "appid": "capp",
        "crawlid": "c1",
        "url": url,
        "response_url": url,
        "status_code": status,
        "status_msg": "OK",
        "response_headers": {"Content-Type": [content_type]},
        "request_headers": {},
        "body": body,
        "encoding": "utf-8",
        "links": [],
        "attrs": {"tag": "t"},
        "timestamp": "2026-11-25T12:00:00.000000",
        **extra,
    }


def _produce(settings: Settings, values: list[bytes]) -> None:
    producer = make_producer(settings)
    try:
        for value in values:
            producer.send(settings.topic("crawled_firehose"), value)
        producer.flush(timeout=10)
    finally:
        producer.close(timeout=5)


def _cleaner(settings: Settings, home: Path, name: str = "cleaner", **overrides: Any) -> subprocess.Popen[bytes]:
    """A ``crawlhive cleaner`` process logging to a file under *home* (named by its last argument)."""
    path = home / f"{name}-{time.monotonic_ns()}.log"
    with path.open("w") as log:
        command = [*CLI, "cleaner", "--log-file", str(path)]
        return subprocess.Popen(command, env=crawler_env(settings, **overrides), stdout=log, stderr=log)


#: Pages of the SIGKILL test: enough that the victim dies with work left.
PAGES = 400


def _stop(cleaner: subprocess.Popen[bytes], timeout: float = 30) -> int:
    """SIGTERM *cleaner* once it is consuming (its signal handlers are installed); its exit code."""
    log = Path(str(cleaner.args[-1]))
    deadline = time.monotonic() + timeout
    while "consuming" not in log.read_text() and cleaner.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    cleaner.send_signal(signal.SIGTERM)
    return cleaner.wait(20)


def _by_url(
    collector: Collector, crawlid: str, count: int, topic: str, timeout: float = 30
) -> dict[str, dict[str, Any]]:
    return {m["url"]: m for m in collector.wait_for(crawlid, count, timeout=timeout, topic=topic)}


def test_the_cleaner_builds_the_cleaned_record_and_handles_bad_input(settings: Settings, tmp_path: Path) -> None:
    """Every field of §13 on realistic pages; base64 and non-UTF-8 bodies; skips; duplicates;
    dead letters for missing text and for records that are not crawled items."""
    topics = [settings.topic(t) for t in ("crawled_firehose", "cleaned", "dead_letter")]
    ensure_topics(settings, topics)
    collector = Collector(settings, topics[1:])
    fr_latin1 = base64.b64encode(FR_ARTICLE.encode("iso-8859-1")).decode()
    records = [
        item("http://news.example/en", EN_ARTICLE),
        item("http://news.example/fr", fr_latin1, encoding="iso-8859-1", content_type="text/html; charset=iso-8859-1"),
        item("http://news.example/en-copy", EN_ARTICLE),  # the same content again: a duplicate
        item("http://news.example/empty", "<html><head><script>var a = 1;</script></head><body>  </body></html>"),
        item("http://news.example/missing", "<html><body><p>gone</p></body></html>", status=404),
        item("http://news.example/logo.png", "iVBORw0KGgo=", content_type="image/png"),
        item("http://news.example/broken", "<html><body><div><p>Unclosed tags everywhere <b>and <i>more text " * 30),
        *[item(f"http://news.example/dated-{i}", _dated(date_html)) for i, date_html in enumerate(DATED)],
    ]
    garbage = [b"not json at all", json.dumps({"foo": 1, "crawlid": "c1"}).encode(), json.dumps([1, 2]).encode()]
    _produce(settings, [json.dumps(r).encode() for r in records] + garbage)
    cleaner = _cleaner(settings, tmp_path)
    try:
        cleaned = _by_url(collector, "c1", 6, settings.topic("cleaned"))
        letters = collector.wait_for("c1", 2, timeout=30, topic=settings.topic("dead_letter"))
        anonymous = collector.wait_for("None", 2, timeout=30, topic=settings.topic("dead_letter"))
        time.sleep(1.0)
        cleaned = {m["url"]: m for m in collector.of("c1", settings.topic("cleaned"))}
    finally:
        code = _stop(cleaner)
        collector.close()
    assert code == 0
    # the same content twice in one crawl: whichever came first (partitions interleave) is emitted
    copies = [u for u in ("http://news.example/en", "http://news.example/en-copy") if u in cleaned]
    assert len(copies) == 1, sorted(cleaned)
    dated = {f"http://news.example/dated-{i}" for i in range(len(DATED))}
    assert set(cleaned) == {copies[0], "http://news.example/fr", "http://news.example/broken", *dated}
    # dates written in several ways, all normalised
    assert [cleaned[f"http://news.example/dated-{i}"]["published"] for i in range(len(DATED))] == [
        "2023-02-14",
        "2021-11-30",
        "2020-06-15",
    ]
    en = cleaned[copies[0]]
    assert set(en) >= {
        "appid", "crawlid", "url", "response_url", "status_code", "crawled_at", "cleaned_at", "title", "description",
        "text", "language", "published", "content_hash", "pii_masked", "attrs",
    }  # fmt: skip
    assert en["title"] == "Rivers of the North"
    assert en["description"] == "A long walk along the rivers. Write to [email]."
    assert "rivers of the north run cold" in en["text"] and "[phone]" in en["text"] and "[email]" in en["text"]
    for noise in ("BUY", "Copyright", "Log in", "tracking", "color: red", "jane.doe", "555-0143"):
        assert noise not in en["text"], noise
    assert en["language"] == "en" and en["published"] == "2024-03-05" and en["pii_masked"] == 3
    assert en["crawled_at"] == "2026-11-25T12:00:00.000000" and en["attrs"] == {"tag": "t"}
    import hashlib

    assert en["content_hash"] == hashlib.sha256(en["text"].encode()).hexdigest()
    # §20.6: the Markdown keeps the article's link, absolute; the navigation's stay out
    flat = " ".join(en["markdown"].split())
    assert "snow [turns them into torrents](http://news.example/floods) that" in flat, en["markdown"]
    assert "Log in" not in en["markdown"] and "/login" not in en["markdown"] and "Privacy" not in en["markdown"]
    fr = cleaned["http://news.example/fr"]
    assert fr["language"] == "fr" and fr["published"] == "2022-07-04"
    assert "vendanges plus tôt" in fr["text"] and "Publicité" not in fr["text"]
    assert "[phone]" in fr["text"] and "[email]" in fr["text"] and fr["pii_masked"] == 2
    errors = sorted(letter["error"] for letter in letters)
    assert errors == [
        "missing required field: text",  # the empty page
        "not a crawled item: no appid, url, status_code, response_headers, body, encoding, timestamp",
    ], errors
    assert sorted(letter["error"][:35] for letter in anonymous) == [
        "not a crawled item: not JSON (Expec",
        "not a crawled item: not a JSON obje",
    ]
    assert all(letter["stage"] == "clean" for letter in letters + anonymous)
    keys = keys_from_settings(settings)
    client = redis_for(settings["REDIS_URL"])
    counts = {n: int(client.get(keys.stats_lifetime("cleaner", n)) or 0) for n in COUNTERS}
    client.close()
    assert counts == {"cleaned": 6, "skipped": 2, "duplicates": 1, "dead_letters": 4, "near_duplicates": 0}, counts
    empty = next(letter for letter in letters if letter["error"].startswith("missing"))
    assert empty["url"] == "http://news.example/empty" and empty["appid"] == "capp" and "server_time" in empty


def test_a_cleaner_killed_mid_stream_and_restarted_cleans_every_page(settings: Settings, tmp_path: Path) -> None:
    """At least once (§13): offsets are committed only after the outputs were acknowledged."""
    topics = [settings.topic(t) for t in ("crawled_firehose", "cleaned", "dead_letter")]
    ensure_topics(settings, topics)
    collector = Collector(settings, topics[1:])
    pages = [
        item(f"http://many.example/{i}", EN_ARTICLE.replace("Rivers of the North", f"River number {i}"), crawlid="k1")
        for i in range(PAGES)
    ]
    _produce(settings, [json.dumps(p).encode() for p in pages])
    victim = _cleaner(settings, tmp_path, "victim", CLEANER_MAX_POLL_RECORDS=20)  # small batches
    survivor = None
    try:
        collector.wait_for("k1", 20, timeout=60, topic=settings.topic("cleaned"))
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        cleaned_by_victim = len({m["url"] for m in collector.of("k1", settings.topic("cleaned"))})
        survivor = _cleaner(settings, tmp_path, "survivor")
        deadline = time.monotonic() + 90
        urls: set[str] = set()
        while len(urls) < PAGES and time.monotonic() < deadline:
            urls = {m["url"] for m in collector.of("k1", settings.topic("cleaned"))}
            time.sleep(0.2)
    finally:
        if victim.poll() is None:
            victim.kill()
        if survivor is not None:
            assert _stop(survivor) == 0
        collector.close()
    assert len(urls) == PAGES
    assert cleaned_by_victim < PAGES  # it died with work left
    assert collector.of("k1", settings.topic("dead_letter")) == []


def test_crawled_pages_become_cleaned_records_through_the_real_commands(settings: Settings, tmp_path: Path) -> None:
    """crawler -> crawled_firehose -> cleaner -> cleaned, on pages a test site serves."""
    site = TestSite()
    site.start()
    site.page(
        "/n/", b"<html><body><a href='/n/en'>en</a><a href='/n/fr'>fr</a><a href='/n/gone'>gone</a></body></html>"
    )
    site.page("/n/en", EN_ARTICLE.encode())
    site.page("/n/fr", FR_ARTICLE.encode("iso-8859-1"), content_type="text/html; charset=iso-8859-1")
    site.page("/n/gone", b"<html><body>missing</body></html>", status=404)
    topics = [settings.topic(t) for t in ("crawled_firehose", "cleaned", "dead_letter")]
    ensure_topics(settings, topics)
    collector = Collector(settings, topics[1:])
    client = redis_for(settings["REDIS_URL"])
    crawler = Crawler(crawler_env(settings), tmp_path)
    cleaner = _cleaner(settings, tmp_path)
    try:
        crawler.wait_ready(client, settings["REDIS_KEY_PREFIX"])
        seed(settings, client, appid="napp", crawlid="n1", url=site.url("/n/"), maxdepth=1)
        cleaned = {m["url"]: m for m in collector.wait_for("n1", 3, timeout=60, topic=settings.topic("cleaned"))}
        time.sleep(1.0)
        cleaned = {m["url"]: m for m in collector.of("n1", settings.topic("cleaned"))}
    finally:
        assert crawler.terminate() == 0, crawler.output()
        assert _stop(cleaner) == 0
        collector.close()
        client.close()
        site.stop()
    assert set(cleaned) == {site.url(p) for p in ("/n/", "/n/en", "/n/fr")}  # the 404 is skipped
    assert cleaned[site.url("/n/en")]["title"] == "Rivers of the North"
    assert cleaned[site.url("/n/fr")]["language"] == "fr" and "vendanges" in cleaned[site.url("/n/fr")]["text"]
    assert cleaned[site.url("/n/en")]["appid"] == "napp" and cleaned[site.url("/n/en")]["status_code"] == 200


def test_the_cleaners_consumer_lag_is_what_their_group_has_not_committed(settings: Settings, tmp_path: Path) -> None:
    """What ``/metrics`` reports as crawlhive_cleaner_lag: positive while records wait, 0 once the
    cleaners committed them (the embedded broker counts record batches, Apache Kafka records)."""
    topic = settings.topic("crawled_firehose")
    ensure_topics(settings, [topic, settings.topic("cleaned"), settings.topic("dead_letter")])
    assert consumer_lag(settings, topic, settings.cleaner_group) == 0
    _produce(
        settings, [json.dumps(item(f"http://lag.example/{i}", EN_ARTICLE, crawlid="l1")).encode() for i in range(5)]
    )
    assert consumer_lag(settings, topic, settings.cleaner_group) > 0
    collector = Collector(settings, [settings.topic("cleaned")])
    cleaner = _cleaner(settings, tmp_path)
    try:
        collector.wait_for("l1", 1, timeout=30)
        deadline = time.monotonic() + 30
        while consumer_lag(settings, topic, settings.cleaner_group) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert consumer_lag(settings, topic, settings.cleaner_group) == 0
    finally:
        assert _stop(cleaner) == 0
        collector.close()


def _phone_page(size: int = 800_000) -> str:
    """A benign page of about *size* bytes that is nothing but a long list of phone numbers."""
    rows, n, i = [], 0, 0
    while n < size:
        row = f"<p>Office {i}: call +1 202-555-{i % 10000:04d} or (202) 555-{(i * 7) % 10000:04d}</p>\n"
        rows.append(row)
        n, i = n + len(row), i + 1
    return f"<html><head><title>Directory</title></head><body><article>{''.join(rows)}</article></body></html>"


def _outputs_by_url(collector: Collector, settings: Settings, crawlid: str) -> dict[str, int]:
    """How many times each url of *crawlid* appeared on ``cleaned`` and ``dead_letter`` together."""
    counts: dict[str, int] = {}
    for topic in ("cleaned", "dead_letter"):
        for message in collector.of(crawlid, settings.topic(topic)):
            counts[message["url"]] = counts.get(message["url"], 0) + 1
    return counts


def _feed_big_then_normal(settings: Settings, crawlid: str, normal: int) -> list[str]:
    """An ~800 KB page of phone numbers, then *normal* ordinary pages; their urls in that order."""
    pages = [item("http://big.example/directory", _phone_page(), crawlid=crawlid)]
    pages += [
        item(f"http://big.example/{i}", EN_ARTICLE.replace("Rivers of the North", f"River {i}"), crawlid=crawlid)
        for i in range(normal)
    ]
    _produce(settings, [json.dumps(p).encode() for p in pages])
    return [p["url"] for p in pages]


@pytest.mark.timeout(180)
def test_a_slow_800kb_page_is_cleaned_once_and_never_replays_the_batch(settings: Settings, tmp_path: Path) -> None:
    """An 800 KB page of phone numbers once took 6-17 s to clean: the poll interval expired, the
    commit failed and the batch was re-emitted every ~12 s, forever. Now every page comes out
    exactly once (the big one cleaned or, past CLEANER_MAX_SECONDS, a dead letter)."""
    topics = [settings.topic(t) for t in ("crawled_firehose", "cleaned", "dead_letter")]
    ensure_topics(settings, topics)
    collector = Collector(settings, topics[1:])
    urls = _feed_big_then_normal(settings, "big1", normal=8)
    cleaner = _cleaner(settings, tmp_path)
    try:
        deadline = time.monotonic() + 60
        counts = _outputs_by_url(collector, settings, "big1")
        while set(counts) != set(urls) and time.monotonic() < deadline:
            time.sleep(0.3)
            counts = _outputs_by_url(collector, settings, "big1")
        assert set(counts) == set(urls), f"missing after 60 s: {sorted(set(urls) - set(counts))}"
        time.sleep(15)  # the old cleaner re-emitted the whole batch every ~12 s
        counts = _outputs_by_url(collector, settings, "big1")
    finally:
        code = _stop(cleaner)
        collector.close()
    assert code == 0
    assert counts == dict.fromkeys(urls, 1), counts
    log = Path(str(cleaner.args[-1])).read_text()
    assert "WARNING" not in log and "ERROR" not in log and "Traceback" not in log, log[-3000:]


def test_a_page_over_the_time_budget_is_a_dead_letter_and_the_rest_go_on(settings: Settings, tmp_path: Path) -> None:
    """CLEANER_MAX_SECONDS bounds the extraction itself (it runs in a child process that is killed
    at the deadline): the big page is a ``stage: clean`` dead letter naming the setting, and the
    pages after it are cleaned once each."""
    topics = [settings.topic(t) for t in ("crawled_firehose", "cleaned", "dead_letter")]
    ensure_topics(settings, topics)
    collector = Collector(settings, topics[1:])
    urls = _feed_big_then_normal(settings, "big2", normal=4)
    # 0.25 s: the ~800 KB page takes 0.5 s in a bare trafilatura call alone (1 s stopped being over
    # the budget once the cleaner got faster); an ordinary page takes 10-50 ms
    cleaner = _cleaner(settings, tmp_path, CLEANER_MAX_SECONDS=0.25)
    try:
        letters = collector.wait_for("big2", 1, timeout=60, topic=settings.topic("dead_letter"))
        cleaned = collector.wait_for("big2", 4, timeout=60, topic=settings.topic("cleaned"))
        time.sleep(2)
        counts = _outputs_by_url(collector, settings, "big2")
    finally:
        code = _stop(cleaner)
        collector.close()
    assert code == 0
    assert counts == dict.fromkeys(urls, 1), counts
    assert [(x["url"], x["stage"]) for x in letters] == [(urls[0], "clean")]
    assert letters[0]["error"] == "cleaning took too long (over CLEANER_MAX_SECONDS = 0.25 s)"
    assert {m["url"] for m in cleaned} == set(urls[1:])


#: The README tour's own site (README "A five-minute tour"): short pages, some without main text.
TOUR = {
    "http://127.0.0.1:8000/": '<h1>Home</h1> <p>Welcome to a tiny site.</p> <a href="about.html">About</a> '
    '<a href="blog/first.html">First post</a>',
    "http://127.0.0.1:8000/about.html": '<h1>About</h1> <a href="index.html">Home</a>',
    "http://127.0.0.1:8000/blog/first.html": '<h1>First post</h1> <a href="../index.html">Home</a> '
    '<a href="../about.html">About</a>',
}
TOUR["http://127.0.0.1:8000/index.html"] = TOUR["http://127.0.0.1:8000/"]


def test_the_tour_pages_are_cleaned_with_their_visible_text_and_no_warning(settings: Settings, tmp_path: Path) -> None:
    """A page without main text is normal: its text is its visible text, not a dead letter; and
    trafilatura's chatter about such pages is DEBUG, so the cleaner's log has no WARNING."""
    topics = [settings.topic(t) for t in ("crawled_firehose", "cleaned", "dead_letter")]
    ensure_topics(settings, topics)
    collector = Collector(settings, topics[1:])
    # /index.html is / again: in one crawl it would be a duplicate of it (§13), so it has a crawl of its own
    crawls = {url: "tour2" if url.endswith("/index.html") else "tour1" for url in TOUR}
    _produce(settings, [json.dumps(item(url, body, crawlid=crawls[url])).encode() for url, body in TOUR.items()])
    cleaner = _cleaner(settings, tmp_path)
    try:
        cleaned = _by_url(collector, "tour1", len(TOUR) - 1, settings.topic("cleaned"), timeout=60)
        cleaned.update(_by_url(collector, "tour2", 1, settings.topic("cleaned"), timeout=30))
        time.sleep(1.0)
        letters = collector.of("tour1", settings.topic("dead_letter")) + collector.of(
            "tour2", settings.topic("dead_letter")
        )
    finally:
        code = _stop(cleaner)
        collector.close()
    assert code == 0
    assert letters == []
    assert set(cleaned) == set(TOUR)
    assert cleaned["http://127.0.0.1:8000/"]["text"] == "Welcome to a tiny site.\nAbout First post"
    assert cleaned["http://127.0.0.1:8000/index.html"]["text"] == "Welcome to a tiny site.\nAbout First post"
    assert cleaned["http://127.0.0.1:8000/about.html"]["text"] == "About\nHome"
    assert cleaned["http://127.0.0.1:8000/blog/first.html"]["text"] == "First post\nHome About"
    log = Path(str(cleaner.args[-1])).read_text()
    assert "WARNING" not in log and "ERROR" not in log, log


def test_a_poll_interval_a_batch_of_slow_pages_would_exceed_is_refused(settings: Settings) -> None:
    """A cleaner whose CLEANER_MAX_POLL_INTERVAL_MS a batch of pages using their whole budget would
    exceed (the 5 s of the kafka-monitor's, that caused the livelock) does not start; it says why."""
    env = crawler_env(settings, CLEANER_MAX_POLL_INTERVAL_MS=5000, CLEANER_MAX_SECONDS=10, CLEANER_MAX_POLL_RECORDS=50)
    done = subprocess.run([*CLI, "cleaner"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().endswith(
        "CLEANER_MAX_POLL_INTERVAL_MS (5000) must exceed CLEANER_MAX_SECONDS × CLEANER_MAX_POLL_RECORDS "
        "(500000 ms): a batch of slow pages would lose the group"
    ), done.stderr


def test_a_cleaned_record_too_large_to_produce_is_a_dead_letter_not_a_replayed_batch(
    settings: Settings, tmp_path: Path
) -> None:
    """A record over KAFKA_PRODUCER_MAX_REQUEST_SIZE was refused by the producer (a Kafka error):
    the batch was rewound and failed again, forever. It is a dead letter saying so instead."""
    topics = [settings.topic(t) for t in ("crawled_firehose", "cleaned", "dead_letter")]
    ensure_topics(settings, topics)
    collector = Collector(settings, topics[1:])
    paragraphs = "".join(
        f"<p>Paragraph {i} of a very long report about the rivers of the north.</p>" for i in range(3000)
    )
    big = item("http://huge.example/report", f"<html><body><article>{paragraphs}</article></body></html>", crawlid="h1")
    normal = [
        item(f"http://huge.example/{i}", EN_ARTICLE.replace("Rivers", f"Lakes {i}"), crawlid="h1") for i in range(3)
    ]
    hostile = {"url": "http://huge.example/" + "x" * 200_000, "crawlid": "h1"}  # not an item, a huge url
    _produce(settings, [json.dumps(p).encode() for p in [big, hostile, *normal]])
    cleaner = _cleaner(settings, tmp_path, KAFKA_PRODUCER_MAX_REQUEST_SIZE=100_000)
    try:
        letters = collector.wait_for("h1", 2, timeout=60, topic=settings.topic("dead_letter"))
        collector.wait_for("h1", 3, timeout=60, topic=settings.topic("cleaned"))
        time.sleep(2)
        counts = _outputs_by_url(collector, settings, "h1")
    finally:
        code = _stop(cleaner)
        collector.close()
    assert code == 0
    cut_url = hostile["url"][:4096]
    assert counts == dict.fromkeys([big["url"], cut_url] + [p["url"] for p in normal], 1), counts
    letter = next(x for x in letters if x["url"] == big["url"])
    assert letter["stage"] == "clean" and letter["error"].startswith("cleaned record too large: "), letter
    assert letter["error"].endswith(" bytes (KAFKA_PRODUCER_MAX_REQUEST_SIZE is 100000)"), letter
    assert next(x["error"] for x in letters if x["url"] == cut_url).startswith("not a crawled item: no appid")


#: A cleaner step (CLEANER_PLUGINS) that holds its first batch past the poll interval, once.
SLOW_ONCE = """
import os, time
from crawlhive.cleaner.plugins import CleanerPlugin

class SlowOnce(CleanerPlugin):
    name = "slow-once"

    def process_batch(self, pages):
        flag = os.environ["SLOW_ONCE_FLAG"]
        if pages and not os.path.exists(flag):
            open(flag, "w").close()
            time.sleep(float(os.environ["SLOW_ONCE_SECONDS"]))
        return pages
"""


def test_a_batch_whose_commit_failed_is_not_emitted_again(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch that outlived the poll interval (here a step holds it, once) cannot commit: the
    group has evicted the cleaner. Its outputs were acknowledged already, so the cleaner does not
    rewind and emit them again; it rejoins and goes on."""
    (tmp_path / "slow_once_step.py").write_text(SLOW_ONCE)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{__import__('os').environ.get('PYTHONPATH', '')}")
    topics = [settings.topic(t) for t in ("crawled_firehose", "cleaned", "dead_letter")]
    ensure_topics(settings, topics)
    collector = Collector(settings, topics[1:])
    pages = [
        item(f"http://once.example/{i}", EN_ARTICLE.replace("Rivers", f"Ponds {i}"), crawlid="o1") for i in range(6)
    ]
    _produce(settings, [json.dumps(p).encode() for p in pages])
    cleaner = _cleaner(
        settings,
        tmp_path,
        CLEANER_PLUGINS={"slow_once_step.SlowOnce": 650},
        CLEANER_MAX_SECONDS=0.2,
        CLEANER_MAX_POLL_RECORDS=6,
        CLEANER_MAX_POLL_INTERVAL_MS=1500,
        SLOW_ONCE_FLAG=str(tmp_path / "slowed"),
        SLOW_ONCE_SECONDS=8,
    )
    try:
        collector.wait_for("o1", len(pages), timeout=60, topic=settings.topic("cleaned"))
        time.sleep(8)
        counts = _outputs_by_url(collector, settings, "o1")
    finally:
        code = _stop(cleaner)
        collector.close()
    assert code == 0
    assert (tmp_path / "slowed").exists()
    log = Path(str(cleaner.args[-1])).read_text()
    assert "had left its Kafka group when it committed" in log, log  # the situation this test is about did happen
    assert counts == {p["url"]: 1 for p in pages}, counts
