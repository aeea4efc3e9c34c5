"""Near-duplicates found by the cleaners (docs/contract.md §26.1), through the real ``crawlhive cleaner``.

An article and its near-duplicates (other boilerplate around it, a date added, a few words changed,
the same page under tracking parameters) are flagged with ``near_duplicate_of`` and ``similarity``;
articles on the same topic with their own text are not; NEAR_DUPLICATES ``drop`` emits none of the
near-duplicates and counts them; the crawl's ``near_duplicates`` is in its record for ``info``.
The false-positive rate on the extraction corpus and the SimHash's equality with trafilatura's are
in ``tests/unit/test_simhash.py``.
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path
from typing import Any

import pytest
from support.crawler import Collector, redis_for
from support.sinks import start_sink, stop_sink, wait_until
from test_cleaner import _cleaner, _produce, _stop, item

from crawlhive.utils.backends.kafka_clients import ensure_topics
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.state.stats import CLEANER, Stats

pytestmark = pytest.mark.timeout(180)

BODY = """<p>The city council voted on Tuesday evening to extend the tram line from the central station
to the new hospital on the eastern edge of town, ending a debate that had divided residents for more
than three years.</p>
<p>Supporters of the plan argued that thousands of nurses, doctors and patients travel to the hospital
every day, and that the buses serving the area are crowded and slow during the morning rush hour.</p>
<p>Opponents said the construction would close the old market street for at least eighteen months,
and that the shopkeepers there had not been offered any compensation for the loss of their customers.</p>
<p>The mayor promised that the works would be carried out in stages, so that at least one lane of the
market street stays open, and that a fund for the affected businesses would be discussed next month.</p>
<p>Engineers expect the first trams to run on the extended line in the spring of the year after next,
if the national government confirms its share of the funding before the end of the summer.</p>"""

#: Other articles on the same topic (trams, councils, hospitals), each with its own text.
OTHERS = (
    """<p>Residents of the northern district gathered outside the town hall on Monday to protest against
the council's decision to cut two bus routes that connect their neighbourhood with the university.</p>
<p>Students who live in the district said that without the buses they would have to cycle for forty
minutes along a busy road, and several parents worried about children travelling to school alone.</p>
<p>A council spokesperson said that the routes carried very few passengers outside term time and that
the savings would pay for more frequent services on the main lines through the city centre.</p>
<p>The protesters handed over a petition with more than two thousand signatures and asked the council
to reconsider the cuts before the new timetable takes effect at the beginning of the autumn.</p>""",
    """<p>The regional hospital opened its new emergency department this week, doubling the number of beds
available for patients who arrive by ambulance and shortening the waiting times in its corridors.</p>
<p>Doctors had complained for years that the old department, built in the nineteen seventies, was far
too small for a region whose population has grown by almost a third since it was designed.</p>
<p>The building cost more than forty million and was paid for jointly by the region and a foundation
set up by a local family whose grandfather had worked at the hospital as a surgeon for decades.</p>
<p>Nurses welcomed the brighter wards and the modern equipment but warned that the department would
need more staff, not only more space, if the waiting times are to fall as the managers promised.</p>""",
)


def page(body: str, *, before: str = "", after: str = "", date: str = "") -> str:
    nav = '<nav><a href="/">Home</a> <a href="/news">News</a> <a href="/city">City</a></nav>'
    return (
        f"<html><head><title>Tram line extended</title></head><body>{nav}"
        f"<article><h1>Council extends the tram line</h1>{before}{date}{body}{after}</article>"
        "<footer>Copyright The City Paper</footer></body></html>"
    )


def variants() -> dict[str, str]:
    """URL -> HTML: the original, its near-duplicates, and the other articles."""
    # a few words changed: 4 of the ~90 tokens the SimHash samples (3 bits of 64 here; a third
    # change made it 4: beyond NEAR_DUPLICATE_DISTANCE's default, docs/operations.md)
    changed = BODY.replace("Tuesday evening", "Wednesday morning").replace("three years", "four years")
    return {
        "http://news.example/tram": page(BODY),
        "http://print.example/tram?print=1": page(
            BODY,
            before="<p>By our city reporter</p>",
            after="<p>Printed from the City Paper website. Share this article with your friends.</p>",
        ),
        "http://news.example/tram?utm_source=feed&utm_medium=rss": page(
            BODY, date="<p>Updated 12 March 2026, 10:42</p>"
        ),
        "http://mirror.example/2026/03/tram": page(changed),
        "http://news.example/bus-protest": page(OTHERS[0]),
        "http://news.example/hospital": page(OTHERS[1]),
    }


NEAR = {
    "http://print.example/tram?print=1",
    "http://news.example/tram?utm_source=feed&utm_medium=rss",
    "http://mirror.example/2026/03/tram",
}


def run_cleaner(
    settings: Settings, tmp_path: Path, crawlid: str, **overrides: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Clean the variants (the original first, in a batch of its own) with a real cleaner; returns
    the cleaned records by URL and every record of the topic (to count them)."""
    topics = [settings.topic(t) for t in ("crawled_firehose", "cleaned", "dead_letter")]
    ensure_topics(settings, topics)
    collector = Collector(settings, topics[1:])
    pages = variants()
    urls = list(pages)
    cleaner = _cleaner(settings, tmp_path, **overrides)
    try:
        _produce(settings, [json.dumps(item(urls[0], pages[urls[0]], crawlid=crawlid)).encode()])
        collector.wait_for(crawlid, 1, timeout=60, topic=settings.topic("cleaned"))
        _produce(settings, [json.dumps(item(u, pages[u], crawlid=crawlid)).encode() for u in urls[1:]])
        expected = len(urls) - (len(NEAR) if overrides.get("NEAR_DUPLICATES") == "drop" else 0)
        collector.wait_for(crawlid, expected, timeout=60, topic=settings.topic("cleaned"))
        time.sleep(2)  # a record that should not come would come by now
        records = collector.of(crawlid, settings.topic("cleaned"))
    finally:
        assert _stop(cleaner) == 0
        collector.close()
    return {r["url"]: r for r in records}, records


def test_near_duplicates_are_flagged_and_other_articles_are_not(settings: Settings, tmp_path: Path) -> None:
    by_url, records = run_cleaner(settings, tmp_path, "nd 1")  # a crawlid may hold a space
    assert len(records) == len(variants())
    original = "http://news.example/tram"
    for url, record in by_url.items():
        assert len(record["simhash"]) == 16
        if url in NEAR:
            assert record["near_duplicate_of"] == {"url": original, "crawlid": "nd 1"}, (url, record)
            assert 61 / 64 <= record["similarity"] <= 1.0
        else:
            assert "near_duplicate_of" not in record and "similarity" not in record, (url, record)
    client = redis_for(settings["REDIS_URL"])
    keys = keys_from_settings(settings)
    assert int(client.hget(keys.crawl("link", "capp", "nd 1"), "near_duplicates")) == len(NEAR)
    stats = Stats(client, keys, settings.STATS_TIMES)
    assert stats.read(CLEANER, "near_duplicates")["lifetime"] == len(NEAR)

    # a files sink with SINK_SKIP_NEAR_DUPLICATES stores only the other three
    out = tmp_path / "out"
    sink = start_sink(
        settings, tmp_path, f"file://{out}/?format=jsonl", SINK_SKIP_NEAR_DUPLICATES="true", SINK_ROLL_SECONDS=1
    )
    try:
        wait_until("the files", lambda: len(_stored(out)) >= len(records) - len(NEAR), process=sink)
        time.sleep(3)  # past two rolls: a near-duplicate written would be in a file by now
    finally:
        stop_sink(sink)
    assert sorted(_stored(out)) == sorted(set(variants()) - NEAR)


def _stored(root: Path) -> list[str]:
    """The URLs of the records in the sink's JSON Lines files under *root*."""
    return [
        json.loads(line)["url"]
        for path in root.rglob("*.jsonl.gz")
        for line in gzip.decompress(path.read_bytes()).decode().splitlines()
    ]


def test_near_duplicates_dropped_are_counted_not_emitted(settings: Settings, tmp_path: Path) -> None:
    by_url, records = run_cleaner(settings, tmp_path, "nd2", NEAR_DUPLICATES="drop")
    assert set(by_url) == set(variants()) - NEAR
    assert len(records) == len(by_url)  # each once
    client = redis_for(settings["REDIS_URL"])
    keys = keys_from_settings(settings)
    assert int(client.hget(keys.crawl("link", "capp", "nd2"), "near_duplicates")) == len(NEAR)
