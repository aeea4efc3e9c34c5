"""Continuous crawling's schedule (docs/contract.md §19) on a real Redis: validation of ``recrawl``,
the visit decision, the packed state, release into the frontier, no overlapping visits, purge."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import pytest
import redis

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.recrawl import RecrawlConfig
from crawlhive.utils.contract.validation import Accepted, Rejected, RequestValidator
from crawlhive.utils.frontier import Frontier, FrontierLeaser, FrontierReader, FrontierRequest
from crawlhive.utils.frontier.recrawl import (
    Observation,
    PageState,
    Schedule,
    SlotEntry,
    body_hash,
    http_date,
    next_visit,
    slot_start,
)
from crawlhive.utils.process.intake import request_validator
from crawlhive.utils.rules.budgets import Limit

_CRAWL = {"url": "http://example.com/", "appid": "testapp", "crawlid": "c1"}


def validate(message: dict[str, Any], **settings: Any) -> Accepted | Rejected:
    return request_validator(Settings.from_overrides(**settings)).validate(message)


# --- §19.1 the request field ----------------------------------------------------------------------


def test_recrawl_defaults_are_filled_in(validator: RequestValidator) -> None:
    out = validator.validate({**_CRAWL, "recrawl": {"every": 3600}})
    assert isinstance(out, Accepted), out
    assert out.message["recrawl"] == {"every": 3600, "adaptive": True, "min": 450, "max": 28800, "until": 0}


@pytest.mark.parametrize(
    ("recrawl", "expected"),
    [
        ({"every": 59}, "recrawl.every must be 60-31536000 seconds (RECRAWL_MIN_EVERY), got 59"),
        ({"every": 31_536_001}, "/recrawl/every"),
        ({"every": 600, "min": 30}, "recrawl.min must be 60-31536000"),
        ({"every": 600, "min": 700}, "recrawl.min (700) must not exceed recrawl.every (600)"),
        ({"every": 600, "max": 500}, "recrawl.max (500) must not be below recrawl.every (600)"),
        ({"adaptive": True}, "'every' is a required property"),
        ({"every": 600, "often": True}, "often"),
        ({"every": "600"}, "/recrawl/every"),
        ({"every": 600, "until": -1}, "/recrawl/until"),
    ],
)
def test_out_of_range_recrawl_is_a_dead_letter(validator: RequestValidator, recrawl: dict, expected: str) -> None:
    out = validator.validate({**_CRAWL, "recrawl": recrawl})
    assert isinstance(out, Rejected), out
    assert expected in out.reason


def test_recrawl_min_every_is_a_setting() -> None:
    out = validate({**_CRAWL, "recrawl": {"every": 2}}, RECRAWL_MIN_EVERY=1)
    assert isinstance(out, Accepted), out
    assert out.message["recrawl"] == {"every": 2, "adaptive": True, "min": 1, "max": 16, "until": 0}


# --- §19.2-§19.4 the visit decision ---------------------------------------------------------------

CONFIG = RecrawlConfig(every=100, adaptive=True, min=20, max=300, until=0, priority=5)


def seen(status: int = 200, body: bytes = b"a", etag: bytes = b"", modified: int = 0, at: int = 1000) -> Observation:
    return Observation(status, body_hash(body), etag, modified, at)


def test_first_visit_then_adaptive_intervals() -> None:
    first = next_visit(None, seen(etag=b'"v1"'), CONFIG, gone_after=2)
    assert (first.visit, first.changed, first.outcome) == (1, True, "first")
    assert first.state is not None and first.state.interval == 100 and first.state.next_due == 1100
    same = next_visit(first.state, seen(body=b"a", at=1100), CONFIG, 2)
    assert (same.visit, same.changed, same.previous_fetch, same.outcome) == (2, False, 1000, "unchanged")
    assert same.state is not None and same.state.interval == 150
    assert same.state.etag == b""  # the server no longer sends one: none kept
    grown = same.state
    for _ in range(5):
        grown = next_visit(grown, seen(at=2000), CONFIG, 2).state
        assert grown is not None
    assert grown.interval == 300  # at most max
    changed = next_visit(grown, seen(body=b"b", at=3000), CONFIG, 2)
    assert changed.changed and changed.state is not None and changed.state.interval == 150
    shrunk = changed.state
    for i in range(5):
        shrunk = next_visit(shrunk, seen(body=bytes([i]), at=4000), CONFIG, 2).state
        assert shrunk is not None
    assert shrunk.interval == 20  # at least min
    fixed = RecrawlConfig(every=100, adaptive=False, min=20, max=300)
    assert next_visit(shrunk, seen(body=b"z", at=5000), fixed, 2).state.interval == 100  # type: ignore[union-attr]


def test_not_modified_keeps_the_validators_and_is_unchanged() -> None:
    first = next_visit(None, seen(etag=b'"e"', modified=500), CONFIG, 2).state
    assert first is not None
    assert first.conditional_headers() == {"If-None-Match": '"e"', "If-Modified-Since": "Thu, 01 Jan 1970 00:08:20 GMT"}
    again = next_visit(first, seen(status=304, body=b"", at=1200), CONFIG, 2)
    assert not again.changed and again.state is not None
    assert (again.state.etag, again.state.last_modified, again.state.status) == (b'"e"', 500, 200)
    assert again.state.body_hash == first.body_hash


def test_gone_pages_are_changed_once_then_leave() -> None:
    page = next_visit(None, seen(), CONFIG, 2).state
    gone = next_visit(page, seen(status=404, body=b"not here"), CONFIG, 2)
    assert gone.changed and gone.outcome == "gone" and gone.state is not None and gone.state.gone == 1
    second = next_visit(gone.state, seen(status=404, body=b"not here"), CONFIG, 2)
    assert not second.changed and second.state is None  # leaves, emits nothing
    failed = next_visit(page, Observation(0, b"\0" * 8, b"", 0, 1000), CONFIG, 1)
    assert failed.changed and failed.state is None  # RECRAWL_GONE_AFTER 1: the first failure
    back = next_visit(gone.state, seen(), CONFIG, 2)
    assert back.changed and back.state is not None and back.state.gone == 0  # in a row only


def test_no_visit_is_scheduled_after_until() -> None:
    ending = RecrawlConfig(every=100, min=20, max=300, until=1050)
    assert next_visit(None, seen(at=1000), ending, 2).state is None


def test_state_and_slot_entries_pack_compactly() -> None:
    state = PageState(100, 40, 60, 4, b"123456", 5, 6, 200, b'"' + b"e" * 30 + b'"', visiting=True)
    assert PageState.unpack(state.pack()) == state
    assert len(state.pack()) <= 64  # a listpack value (hash-max-listpack-value)
    entry = SlotEntry(7, b"f" * 8, -20, True, "example.com", b"1 AbCdEfGh +/a")
    assert SlotEntry.unpack(entry.pack()) == entry
    assert SlotEntry.unpack(SlotEntry(7, b"f" * 8, -(10**6), False, "a.b", b"m").pack()).priority == -32767
    assert http_date("Wed, 21 Oct 2015 07:28:00 GMT") == 1445412480
    assert http_date("yesterday") == 0 and http_date(None) == 0


def test_slots_are_a_timing_wheel() -> None:
    assert slot_start(1030, 1000) == 1030  # within 64 s: one second wide
    assert slot_start(1000 + 100, 1000) == 1100 - 1100 % 2
    far = slot_start(1000 + 86400, 1000)
    assert 1000 + 86400 - far < 2048 and far <= 1000 + 86400


# --- the schedule on Redis ------------------------------------------------------------------------


def crawl_seed(url: str = "http://example.com/a", **kw: Any) -> FrontierRequest:
    recrawl = {"every": 60, "adaptive": True, "min": 10, "max": 600, "until": 0}
    return FrontierRequest(url=url, appid="app", crawlid="c1", priority=5, recrawl=recrawl, **kw)


def finish_visit(schedule: Schedule, request: FrontierRequest, fp: bytes, due: int, now: int) -> None:
    state = PageState(due, 60, now - 60, 0, b"h" * 6, 1, 0, 200)
    config = RecrawlConfig(every=60, min=10, max=600, priority=5)
    entry = SlotEntry(due, fp, config.priority - 10 * request.depth, False, request.domain, request.member())
    result = next_visit(None, seen(at=now - 60), config, 2)
    pipe = schedule.redis.pipeline(transaction=True)
    schedule.queue_visit(
        pipe,
        spider="link",
        appid="app",
        crawlid="c1",
        shard=schedule.keys.shard_of(request.domain),
        fingerprint=fp,
        result=type(result)(result.visit, result.changed, result.previous_fetch, state, result.outcome),
        entry=entry,
        now=now,
    )
    pipe.execute()


def test_due_pages_reenter_the_frontier_once(
    redis_client: redis.Redis, keys: Keys, frontier: Frontier, worker: FrontierLeaser, reader: FrontierReader
) -> None:
    schedule = Schedule(redis_client, keys, buckets=64, record_ttl_s=3600)
    schedule.scripts.load()  # queue_visit queues EVALSHA on a pipeline, as the crawler does
    pipe = redis_client.pipeline(transaction=True)
    frontier.push([crawl_seed()], pipe)
    pipe.execute()
    record = keys.crawl("link", "app", "c1")
    assert redis_client.hget(record, "recurring") == b"1"
    outcome = worker.pop("link", shard=keys.shard_of("example.com"))
    assert outcome.lease is not None
    request = outcome.lease.request
    assert request.recrawl is not None and request.recrawl["every"] == 60
    now = int(time.time())
    fp = b"\x01" * 8
    finish_visit(schedule, request, fp, due=now - 1, now=now)
    shard = keys.shard_of("example.com")
    assert schedule.counts("link", "app", "c1")["scheduled"] == 1
    # a recurring crawl is never complete, even with nothing queued or in flight
    worker.ack(outcome.lease, "crawled")
    reader.scan_complete()
    assert redis_client.sismember(keys.active_crawls(), keys.crawl_ref("link", "app", "c1"))

    assert schedule.release(shard, 100) == [("link", False, 1)]
    again = worker.pop("link", shard=shard)
    assert again.lease is not None
    assert (again.lease.request.url, again.lease.request.depth) == (request.url, request.depth)
    assert again.lease.request.priority == 5
    assert schedule.release(shard, 100) == []  # released once: its visit is on, never twice
    raw = redis_client.hget(schedule.state_key("link", "app", "c1", fp, shard), fp)
    assert raw is not None and PageState.unpack(raw).visiting and PageState.unpack(raw).next_due == now - 1
    # a crawler killed mid-visit: its lease is reclaimed and the page queued again, still visiting
    from crawlhive.utils.frontier import reclaim_expired_leases

    redis_client.zadd(keys.leases("link", shard), {again.lease.member: 1})  # the lease expired long ago
    assert reclaim_expired_leases(worker, "link", max_retries=5).requeued == 1
    assert schedule.release(shard, 100) == []  # not released a second time meanwhile
    revisit = worker.pop("link", shard=shard)
    assert revisit.lease is not None and revisit.lease.request.url == request.url
    again = revisit
    counts = schedule.counts("link", "app", "c1")
    assert counts["due"] == 1 and counts["scheduled"] == 1

    # stop purges the schedule and the queue
    purged = reader.purge("link", "app", "c1")
    assert purged == 1  # the one scheduled page (the queue was empty: the page is in flight)
    assert redis_client.hget(record, "recurring") is None
    assert schedule.counts("link", "app", "c1")["scheduled"] == 0
    # the visit in flight ends after the stop: nothing is scheduled again
    finish_visit(schedule, request, fp, due=now - 1, now=now)
    assert schedule.release(shard, 100) == []
    assert schedule.counts("link", "app", "c1")["scheduled"] == 0


def test_a_page_not_due_yet_stays_in_a_finer_slot(redis_client: redis.Redis, keys: Keys, frontier: Frontier) -> None:
    schedule = Schedule(redis_client, keys, buckets=64, record_ttl_s=3600)
    schedule.scripts.load()  # queue_visit queues EVALSHA on a pipeline, as the crawler does
    pipe = redis_client.pipeline(transaction=True)
    frontier.push([crawl_seed()], pipe)
    pipe.execute()
    request = crawl_seed()
    now = int(time.time())
    # put the entry in a slot that has already started although the page is due in 30 s
    state = PageState(now + 30, 60, now, 0, b"h" * 6, 1, 0, 200)
    entry = SlotEntry(now + 30, b"\x02" * 8, 5, False, request.domain, request.member())
    shard = keys.shard_of(request.domain)
    bucket = schedule.state_key("link", "app", "c1", b"\x02" * 8, shard)
    redis_client.hset(bucket, b"\x02" * 8, state.pack())
    slot = keys.recrawl_slot("link", "app", "c1", now - 5, shard)
    redis_client.rpush(slot, entry.pack())
    redis_client.zadd(keys.recrawl_slots("link", "app", "c1", shard), {str(now - 5): now - 5})
    redis_client.zadd(keys.recrawl_due(shard), {keys.crawl_ref("link", "app", "c1"): now - 5})
    assert schedule.release(shard, 100) == []
    assert redis_client.zscore(keys.recrawl_due(shard), keys.crawl_ref("link", "app", "c1")) == now + 30
    assert redis_client.lrange(keys.recrawl_slot("link", "app", "c1", now + 30, shard), 0, -1) == [entry.pack()]


def test_ten_thousand_pages_release_in_batches(redis_client: redis.Redis, keys: Keys, frontier: Frontier) -> None:
    """Correctness at 10k scheduled pages (the size per page is bench/recrawl_memory.py's)."""
    schedule = Schedule(redis_client, keys, buckets=256, record_ttl_s=3600)
    schedule.scripts.load()  # queue_visit queues EVALSHA on a pipeline, as the crawler does
    pipe = redis_client.pipeline(transaction=True)
    frontier.push([crawl_seed()], pipe)
    pipe.execute()
    now = int(time.time())
    pipe = redis_client.pipeline(transaction=False)
    for i in range(10_000):
        request = crawl_seed(f"http://site{i % 50}.example/page/{i}", depth=1)
        request.option_set = None
        fp = i.to_bytes(8, "big")
        state = PageState(now - 1, 60, now - 61, 0, b"h" * 6, 1, 0, 200, b'"' + b"e" * 30 + b'"')
        from crawlhive.utils.frontier.model import OptionSet

        request.option_set = OptionSet.of(request)
        entry = SlotEntry(now - 1, fp, -5, False, request.domain, request.member())
        result = next_visit(None, seen(), RecrawlConfig(every=60, min=10, max=600), 2)
        schedule.queue_visit(
            pipe,
            spider="link",
            appid="app",
            crawlid="c1",
            shard=keys.shard_of(request.domain),
            fingerprint=fp,
            result=type(result)(1, True, 0, state, "first"),
            entry=entry,
            now=now,
        )
    pipe.execute()
    assert schedule.counts("link", "app", "c1")["scheduled"] == 10_000
    from crawlhive.redis_monitor.plugins.recrawl import RecrawlReleaser

    # one batch per shard says whether the limit was reached (more is due) ...
    released = 0
    for shard in range(keys.shards):
        lanes, more = schedule.release_due(shard, 1000)
        count = sum(n for _s, _r, n in lanes)
        released += count
        assert more == (count == 1000), (shard, count)
    # ... and one tick of the redis-monitor's releaser drains the rest, batch after batch
    releaser = RecrawlReleaser(redis_client, keys, schedule, batch=1000, record_ttl_s=3600, budget_s=60)
    releaser.tick()
    assert released + releaser.released == 10_000
    assert all(schedule.release_due(shard, 1000) == ([], False) for shard in range(keys.shards))
    queued = sum(redis_client.zcard(keys.crawl_queue("link", "app", "c1", f"site{i}.example")) for i in range(50))
    assert queued == 10_000


def test_script_prefixes_build_the_keys_of_their_methods() -> None:
    for keys in (Keys("ch"), Keys("ch", shards=4)):
        for shard in range(keys.shards):
            prefixes = keys.recrawl_prefixes(shard)
            ref = keys.crawl_ref("link", "app", "c1")
            assert prefixes["state"] + ref + ":7" == keys.recrawl_state("link", "app", "c1", 7, shard)
            assert prefixes["slots"] + ref == keys.recrawl_slots("link", "app", "c1", shard)
            assert prefixes["slot"] + ref + ":99" == keys.recrawl_slot("link", "app", "c1", 99, shard)
            head = keys.head(shard)
            assert (
                head + "cq:link:app:c1:example.com"
                == keys.crawl_queue("link", "app", "c1", "example.com")[: len(head) + 26]
                or keys.shard_of("example.com") != shard
            )
            assert head + "crawl:" + ref == keys.crawl_shard("link", "app", "c1", shard)


# --- §19.7 sitemaps --------------------------------------------------------------------------------


def test_sitemap_lastmod_is_read() -> None:
    from scrapy.http import XmlResponse

    from crawlhive.crawler.sitemaps import discover
    from crawlhive.utils.frontier.recrawl import w3c_date

    body = b"""<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
      <url><loc>http://example.com/a</loc><lastmod>2024-05-01T10:00:00+02:00</lastmod></url>
      <url><loc>http://example.com/b</loc><lastmod>yesterday</lastmod></url>
      <url><loc>http://example.com/c</loc><lastmod>2024-05-01</lastmod></url>
    </urlset>"""
    found = discover(XmlResponse("http://example.com/sitemap.xml", body=body), "sitemap", 10**6)
    assert found is not None and found.pages == ["http://example.com/a", "http://example.com/b", "http://example.com/c"]
    assert found.lastmod == {"http://example.com/a": 1714550400, "http://example.com/c": 1714521600}
    assert w3c_date("2024-05-01T08:00:00Z") == 1714550400 and w3c_date(None) == 0 and w3c_date("x" * 100) == 0


def test_a_newer_lastmod_makes_a_scheduled_page_due_at_once(
    redis_client: redis.Redis, keys: Keys, frontier: Frontier, worker: FrontierLeaser
) -> None:
    schedule = Schedule(redis_client, keys, buckets=64, record_ttl_s=3600)
    schedule.scripts.load()
    pipe = redis_client.pipeline(transaction=True)
    frontier.push([crawl_seed()], pipe)
    pipe.execute()
    request = crawl_seed()
    now = int(time.time())
    shard = keys.shard_of(request.domain)
    fp = b"\x03" * 8
    finish_visit(schedule, request, fp, due=now + 3000, now=now)  # fetched at now - 60, due in 50 minutes

    def touch(lastmod: int) -> None:
        entry = SlotEntry(now, fp, 5, False, request.domain, request.member())
        pipe = redis_client.pipeline(transaction=True)
        schedule.queue_touch(
            pipe, spider="link", appid="app", crawlid="c1", shard=shard, entry=entry, lastmod=lastmod, now=now
        )
        pipe.execute()

    touch(now - 100)  # modified before the last fetch: nothing to do
    assert schedule.release(shard, 100) == []
    touch(now - 10)  # modified since: due at once
    assert schedule.release(shard, 100) == [("link", False, 1)]
    popped = worker.pop("link", shard=shard)
    assert popped.lease is not None and popped.lease.request.url == request.url
    touch(now)  # a visit is on: nothing
    assert schedule.release(shard, 100) == []


# --- §19.6 until and expiry end a recurring crawl ----------------------------------------------------


def test_a_crawl_past_until_with_an_empty_schedule_completes(
    redis_client: redis.Redis, keys: Keys, frontier: Frontier, worker: FrontierLeaser, reader: FrontierReader
) -> None:
    from crawlhive.redis_monitor.plugins.recrawl import RecrawlReleaser
    from crawlhive.utils.state.control import ControlQueue

    until = int(time.time()) + 3600
    seed = FrontierRequest(
        url="http://example.com/u",
        appid="app",
        crawlid="c1",
        recrawl={"every": 60, "adaptive": True, "min": 10, "max": 600, "until": until},
    )
    pipe = redis_client.pipeline(transaction=True)
    frontier.push([seed], pipe)
    pipe.execute()
    lease = worker.pop("link", shard=keys.shard_of("example.com")).lease
    assert lease is not None
    worker.ack(lease, "crawled")
    schedule = Schedule(redis_client, keys, buckets=64, record_ttl_s=3600)
    releaser = RecrawlReleaser(redis_client, keys, schedule, batch=100, record_ttl_s=3600)
    record = keys.crawl("link", "app", "c1")
    releaser.walk_crawls()  # until not reached: still recurring, never complete
    reader.scan_complete()
    assert redis_client.hget(record, "recurring") == b"1"
    assert not [e for e in ControlQueue(redis_client, keys).pending() if e[0] == "complete"]

    config = json.loads(redis_client.hget(record, "recrawl"))  # type: ignore[arg-type]
    config["until"] = int(time.time()) - 1
    redis_client.hset(record, "recrawl", json.dumps(config))
    releaser.walk_crawls()  # past until, nothing scheduled: it ends
    assert redis_client.hget(record, "recurring") is None
    reader.scan_complete()
    completes = [e for e in ControlQueue(redis_client, keys).pending() if e[0] == "complete"]
    assert [e[1]["crawlid"] for e in completes] == ["c1"]


def test_a_revisit_queues_only_links_new_to_the_crawl(redis_client: redis.Redis, keys: Keys) -> None:
    """crawler_admit.lua: a page's first fetch owns the links it queued, and a refetch of it (a
    lost lease) queues them again; a revisit (its own 4 owner bytes after the fingerprint,
    ``LeaseContext.link_owner``) queues only links the crawl has not seen."""
    from crawlhive.utils.backends.scripts import scripts

    admit = scripts(redis_client)["crawler_admit"]
    shard = 0
    lease = b"lease-1"
    leases = keys.leases("link", shard)
    redis_client.zadd(leases, {lease: time.time() + 60})
    page = b"P" * 12
    known, fresh = b"K" * 12, b"N" * 12
    script_keys = [leases, keys.crawl_stopped("link", "app", "c1", shard), keys.dupefilter("link", "app", "c1", shard)]

    def call(page_arg: bytes, *links: bytes) -> list[int]:
        args: list[Any] = [lease, 60_000_000, 600_000, page_arg, 0, 0, 1, 0, "", 1]
        for link in links:
            args += [link, 3, 0, 0]
        return [int(x) for x in admit(keys=script_keys, args=args)]

    assert call(page, known) == [1, 1]  # first fetch: queued, owned by the page
    assert call(page, known) == [1, 1]  # the same fetch again (a lost lease): queued again
    revisit = page + b"\x01\x02\x03\x04"
    assert call(revisit, known, fresh) == [1, 0, 1]  # a revisit: only the new link
    assert redis_client.hget(script_keys[2], fresh) == b"\x01\x02\x03\x04"
    assert call(revisit, fresh) == [1, 1]  # that revisit fetched again: its own new link again


def test_the_admit_with_a_budget_takes_the_first_links_of_a_page_and_counts_each_once(
    redis_client: redis.Redis, keys: Keys
) -> None:
    """crawler_admit.lua under a page budget (§10.7; every crawl has one by default) and a page
    cap: links are read in one HMGET, admitted in the page's order until the budget is used (the
    page's own entry counts), a link the page queued before is queued again, one queued by
    another page is not, and a cap set admits its first links only."""
    from crawlhive.utils.backends.scripts import scripts

    admit = scripts(redis_client)["crawler_admit"]
    lease = b"lease-b"
    leases = keys.leases("link", 0)
    redis_client.zadd(leases, {lease: time.time() + 60})
    filters = [keys.dupefilter("link", "app", "b1", shard) for shard in range(keys.shards)]
    caps = keys.page_caps("link", "app", "b1", "example.com")
    script_keys = [leases, keys.crawl_stopped("link", "app", "b1", 0), *filters, caps]
    cap_index = len(script_keys)

    def call(page: bytes, budget: int, *links: bytes, capped: int = 0) -> list[int]:
        args: list[Any] = [lease, 60_000_000, 600_000, page, 0, budget, len(filters), 0, "", 1]
        for link in links:  # a link's dupefilter is its domain's shard's: here its first byte's
            args += [link, 3 + link[0] % len(filters), cap_index if capped else 0, capped]
        return [int(x) for x in admit(keys=script_keys, args=args)]

    a, b, c, d, e, f = (bytes([65 + n]) * 12 for n in range(6))
    assert call(b"P" * 12, 4, a, b, c, d, e) == [1, 1, 1, 1, 0, 0]  # the page and its first 3 links
    assert sum(redis_client.hlen(k) for k in filters) == 4
    assert call(b"P" * 12, 4, a, b, c, d) == [1, 1, 1, 1, 0]  # refetched: its own links again, no more
    assert call(b"Q" * 12, 9, a, f, f) == [1, 0, 1, 1]  # A is P's; F new, once (twice on the page)
    assert sum(redis_client.hlen(k) for k in filters) == 6
    g, h = b"G" * 12, b"H" * 12
    assert call(b"R" * 12, 0, g, h, capped=1) == [1, 1, 0]  # the cap's first link only
    assert redis_client.scard(caps) == 1


def test_a_redirect_hop_carries_no_validators_of_the_page_it_comes_from() -> None:
    """§19.3: a revisit's If-None-Match / If-Modified-Since name the stored version of its own URL.
    Scrapy copies every header to a redirect hop, so another host was told the page's ETag, and a
    304 it answered made the page "unchanged"; both redirect middlewares now drop them (other
    headers stay)."""
    from scrapy import Request
    from scrapy.http import HtmlResponse, Response
    from scrapy.utils.test import get_crawler

    from crawlhive.crawler.middlewares.redirects import FrontierMetaRefreshMiddleware, FrontierRedirectMiddleware

    crawler = get_crawler()
    page, target = "http://a.example/page", "http://b.example/elsewhere"
    refresh = f'<html><head><meta http-equiv="refresh" content="0;url={target}"></head></html>'.encode()
    cases = [
        (FrontierRedirectMiddleware, Response(page, status=302, headers={"Location": target})),
        (FrontierMetaRefreshMiddleware, HtmlResponse(page, body=refresh, encoding="utf-8")),
    ]
    for cls, response in cases:
        middleware = cls.from_crawler(crawler)
        headers = {"If-None-Match": '"v1"', "If-Modified-Since": "Wed, 21 Oct 2015 07:28:00 GMT", "X-Kept": "yes"}
        request = Request(page, headers=headers)
        hop = middleware.process_response(request, response)
        assert isinstance(hop, Request) and hop.url == target, (cls, hop)
        assert b"If-None-Match" not in hop.headers and b"If-Modified-Since" not in hop.headers, (cls, hop.headers)
        assert hop.headers.get("X-Kept") == b"yes"
        assert request.headers.get("If-None-Match") == b'"v1"'  # the page's own request is untouched


# --- §19.1 limits on the schedule: a crawl's cap, an appid's ceiling --------------------------------


def test_schedule_limits_count_per_appid_cluster_wide(
    redis_client: redis.Redis, keys: Keys, frontier: Frontier, reader: FrontierReader
) -> None:
    """The count a crawl's cap and its appid's ceiling are checked against: a join counts unless a
    limit refuses it (the crawl record then names the limit), a join that did not land is given
    back, pages that left (counted by the shards) come off once, a stop forgets the crawl's pages."""
    schedule = Schedule(redis_client, keys, buckets=64, record_ttl_s=3600)
    schedule.scripts.load()
    pipe = redis_client.pipeline(transaction=True)
    frontier.push([crawl_seed(), dataclasses.replace(crawl_seed(), crawlid="c2")], pipe)
    pipe.execute()
    cap, ceiling = Limit(2, "RECRAWL_MAX_PAGES_DEFAULT"), Limit(3, "APPID_MAX_SCHEDULED_PAGES")
    count = keys.app_scheduled("app")

    def join(crawlid: str) -> int:
        script_keys, args = schedule.join_call("link", "app", crawlid, cap, ceiling)
        return int(schedule.scripts["recrawl_join"](keys=script_keys, args=args))

    assert [join("c1"), join("c1"), join("c1")] == [1, 1, 0]  # the crawl's cap
    assert schedule.counts("link", "app", "c1")["schedule_stopped"] == "RECRAWL_MAX_PAGES_DEFAULT"
    assert [join("c2"), join("c2")] == [1, -1]  # the appid's ceiling: 2 + 1 pages
    assert schedule.counts("link", "app", "c2")["schedule_stopped"] == "APPID_MAX_SCHEDULED_PAGES"
    assert redis_client.hget(count, "*") == b"3"

    pipe = redis_client.pipeline(transaction=True)  # a counted page that did not join after all
    schedule.queue_give(pipe, "link", "app", "c1")
    pipe.execute()
    assert (redis_client.hget(count, keys.crawl_ref("link", "app", "c1")), redis_client.hget(count, "*")) == (
        b"1",
        b"2",
    )

    # a scheduled page of c1 leaves its schedule (its shard counts it): it comes off the count once
    request = crawl_seed()
    fp = b"\x02" * 8
    now = int(time.time())
    finish_visit(schedule, request, fp, due=now + 60, now=now)
    assert schedule.counts("link", "app", "c1")["scheduled"] == 1
    pipe = redis_client.pipeline(transaction=True)
    shard = keys.shard_of(request.domain)
    schedule.queue_visit(
        pipe, spider="link", appid="app", crawlid="c1", shard=shard, fingerprint=fp, result=None, entry=None, now=now
    )
    pipe.execute()
    assert schedule.counts("link", "app", "c1")["scheduled"] == 0
    assert schedule.sync_count("link", "app", "c1") == 0
    assert schedule.sync_count("link", "app", "c1") == 0  # idempotent: several redis-monitors may sync
    assert redis_client.hget(count, "*") == b"1"
    assert join("c2") == 1  # room under the ceiling again

    # First visits counted that never ended (a crawler killed mid-visit, a retried first visit):
    # the redis-monitor's sync writes the true count, so they do not fill the cap for ever.
    assert [join("c1"), join("c1")] == [1, -1]  # c2's 2 and c1's 1: the ceiling
    assert schedule.sync_count("link", "app", "c1") == 0
    assert redis_client.hget(count, keys.crawl_ref("link", "app", "c1")) == b"0"
    assert redis_client.hget(count, "*") == b"2" and join("c1") == 1  # room for c1 again
    schedule.sync_count("link", "app", "c1")

    reader.purge("link", "app", "c2")  # stop: the crawl's pages leave the count
    assert redis_client.hget(count, "*") == b"0"
    assert redis_client.hget(count, keys.crawl_ref("link", "app", "c2")) is None
    assert "schedule_stopped" not in schedule.counts("link", "app", "c2")
    # a first visit that joins after the stop (it was in flight) is not counted: nothing would
    # ever take it off again
    assert join("c2") == -2 and redis_client.hget(count, keys.crawl_ref("link", "app", "c2")) is None
