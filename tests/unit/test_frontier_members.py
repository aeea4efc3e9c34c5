"""The compact frontier member (docs/contract.md §18.6): crawl options stored once per crawl as
option sets, queue members of URL + depth + option set id, leases that name their crawl."""

from __future__ import annotations

import json

import redis
import ujson
from scrapy import Request

from crawlhive.crawler.requests import child_request, link_children
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.frontier import (
    OPTIONS_LOST,
    WAKE_ANY,
    Frontier,
    FrontierLeaser,
    FrontierRequest,
    OptionSet,
    encode_score,
    lease_member,
    parse_lease_member,
    reclaim_expired_leases,
    seed_from_request,
    wake_message,
    woken_shards,
)
from crawlhive.utils.frontier.leasing import decode_lease, member_option_id

SEED_MESSAGE = {
    "url": "http://www.example.com/start",
    "appid": "app",
    "crawlid": "c1",
    "spiderid": "link",
    "priority": 50,
    "maxdepth": 3,
    "expires": 0,
    "method": "GET",
    "domain_max_pages": None,
    "allowed_domains": ["example.com", "example.org"],
    "allow_regex": [r"/news/\d+"],
    "deny_regex": None,
    "deny_extensions": None,
    "useragent": "crawlhive-test/1.0",
    "cookie": "a=1",
    "attrs": {"job": "nightly", "o": "not an option set id"},
    "headers": {"X-Token": "t"},
    "body": None,
    "cookies": None,
}


def push(frontier: Frontier, *requests: FrontierRequest) -> None:
    pipe = frontier.redis.pipeline(transaction=True)
    frontier.push(list(requests), pipe)
    pipe.execute()


def seed(**changes: object) -> FrontierRequest:
    return seed_from_request({**SEED_MESSAGE, **changes}, origin="t.incoming/0/7@1714563600000")


def option_sets(client: redis.Redis, keys: Keys) -> dict[bytes, bytes]:
    """The option sets stored for crawl app/c1, over every shard's part of its record."""
    found: dict[bytes, bytes] = {}
    for shard in range(keys.shards):
        part = client.hgetall(keys.crawl_shard("link", "app", "c1", shard))
        found.update((k, v) for k, v in part.items() if k.startswith(b"o:"))
    return found


def pop_all(worker: FrontierLeaser) -> list[FrontierRequest]:
    out = []
    while (outcome := worker.pop("link")).lease is not None:
        out.append(outcome.lease.request)
        assert worker.ack(outcome.lease, "crawled")
    return out


def test_a_link_member_is_its_url_depth_and_option_set_id() -> None:
    parent = seed()
    parent.option_set = OptionSet.of(parent)
    (child,) = link_children(parent, ["http://www.example.com/news/1"])
    member = child.member()
    # the URL without its scheme and its queue's domain (example.com), which the queue key names
    assert member == b"1 %s !/news/1" % parent.option_set.id.encode()
    assert len(member) <= len(child.url) - 10  # what §18.6's 300 bytes per URL rests on
    again = FrontierRequest.from_member(
        member, spiderid="link", appid="app", crawlid="c1", domain="example.com", priority=40, options=parent.option_set
    )
    assert again == child
    assert (again.allowed_domains, again.headers, again.attrs, again.maxdepth) == (
        ["example.com", "example.org"],
        {"X-Token": "t"},
        SEED_MESSAGE["attrs"],
        3,
    )


def test_members_with_more_than_a_link_are_json_led_by_the_option_set_id() -> None:
    parent = seed(method="POST", body='{"q": 1}')
    parent.option_set = OptionSet.of(parent)
    oid = parent.option_set.id
    member = parent.member()
    assert member.startswith(b'{"o":"%s",' % oid.encode())
    data = json.loads(member)
    assert data.pop("o") == oid
    assert data == {"body": '{"q": 1}', "method": "POST", "request_id": parent.request_id, "url": parent.url}
    # a spider's attrs override on a child is written inline; the option set stays the parent's
    child = child_request(parent, Request("http://example.org/x", meta={"frontier": {"attrs": {"step": 2}}}), None)  # type: ignore[arg-type]
    assert child.option_set is parent.option_set
    assert json.loads(child.member())["attrs"] == {"step": 2}
    for request in (parent, child):
        again = FrontierRequest.from_member(
            request.member(),
            spiderid=request.spiderid,
            appid="app",
            crawlid="c1",
            domain=request.domain,
            priority=request.priority,
            options=parent.option_set,
        )
        assert again == request
        assert member_option_id(request.member()) == oid


def test_option_sets_are_named_by_their_content() -> None:
    a, b = seed(), seed()
    assert OptionSet.of(a).id == OptionSet.of(b).id
    assert OptionSet.of(seed(maxdepth=4)).id != OptionSet.of(a).id
    assert ujson.loads(OptionSet.of(a).json)["seed_origin"] == "http://www.example.com:80"


def test_leases_name_crawl_domain_and_priority_even_with_separators_in_ids() -> None:
    member = b'{"o":"abc","url":"http://[::1]:8080/a:b"}'
    for appid, crawlid, domain in (("app", "c1", "example.com"), ("a:p%p", "c:1%3A", "::1"), ("x y", "{z}", "1.2.3.4")):
        lease = lease_member(b"%d" % encode_score(50, 7), appid, crawlid, domain, member)
        assert parse_lease_member(lease) == (50, appid, crawlid, domain, member)
    assert parse_lease_member(b'{"appid":"a","crawlid":"c","url":"http://e.com/"}') is None


def test_push_pop_keeps_every_option_of_two_seeds_of_one_crawl(
    frontier: Frontier, worker: FrontierLeaser, redis_client: redis.Redis, keys: Keys
) -> None:
    first, second = seed(), seed(url="http://example.org/other", maxdepth=1, allowed_domains=None)
    for r in (first, second):
        push(frontier, r)
    sets = option_sets(redis_client, keys)
    assert len(sets) == 2  # one per distinct option set, not one per request
    popped = {r.url: r for r in pop_all(worker)}
    assert popped[first.url] == first and popped[second.url] == second
    # their links, pushed by a crawler, inherit each parent's options through the set's id
    links = [
        *link_children(popped[first.url], ["http://www.example.com/news/2"]),
        *link_children(popped[second.url], ["http://example.org/l"]),
    ]
    push(frontier, *links)
    again = {r.url: r for r in pop_all(worker)}
    assert again["http://www.example.com/news/2"] == links[0] and again["http://example.org/l"] == links[1]
    assert again["http://example.org/l"].maxdepth == 1 and again["http://example.org/l"].allowed_domains is None
    # the queued members hold no option: a link costs its URL and a few bytes
    assert option_sets(redis_client, keys) == sets


def test_attrs_with_an_o_key_do_not_confuse_the_pop_script(frontier: Frontier, worker: FrontierLeaser) -> None:
    parent = seed(method="POST")  # a JSON member whose attrs hold {"o": ...} (sorted before "o")
    push(frontier, parent)
    (popped,) = pop_all(worker)
    assert popped == parent and popped.attrs == SEED_MESSAGE["attrs"]


def test_members_queued_before_the_compact_encoding_still_pop_and_requeue(
    frontier: Frontier, worker: FrontierLeaser, redis_client: redis.Redis, keys: Keys
) -> None:
    legacy = seed()
    legacy.option_set = None
    # as releases before 2.1 queued it: self-contained, indexed as push indexes it
    push(frontier, seed(url="http://www.example.com/index-only"))
    redis_client.zadd(keys.crawl_queue("link", "app", "c1", "example.com"), {legacy.encode(): -(2**40)})
    outcome = worker.pop("link")
    assert outcome.lease is not None and outcome.lease.request == legacy
    assert outcome.lease.request.option_set is None
    assert worker.requeue(outcome.lease.member, outcome.lease.request)  # written back self-contained
    assert legacy.encode() in redis_client.zrange(keys.crawl_queue("link", "app", "c1", "example.com"), 0, -1)
    assert {r.url for r in pop_all(worker)} == {legacy.url, "http://www.example.com/index-only"}
    # a lease taken before 2.1 (the bare member) decodes as well
    assert decode_lease(legacy.encode(), "link", None) == legacy


def test_a_requeue_writes_the_option_set_back(
    frontier: Frontier, worker: FrontierLeaser, redis_client: redis.Redis, keys: Keys
) -> None:
    push(frontier, seed())
    outcome = worker.pop("link")
    assert outcome.lease is not None
    record = keys.crawl_shard("link", "app", "c1", keys.shard_of(outcome.lease.request.domain))
    field = outcome.lease.request.option_set.field  # type: ignore[union-attr]
    redis_client.hdel(record, field)
    assert worker.requeue(outcome.lease.member, outcome.lease.request)
    assert redis_client.hexists(record, field)
    assert pop_all(worker) == [seed()]


def test_a_request_whose_option_set_is_gone_is_never_fetched_and_ends_as_a_dead_letter(
    frontier: Frontier, worker: FrontierLeaser, redis_client: redis.Redis, keys: Keys
) -> None:
    push(frontier, seed())
    record = keys.crawl_shard("link", "app", "c1", keys.shard_of("example.com"))
    for field in [f for f in redis_client.hkeys(record) if f.startswith(b"o:")]:
        redis_client.hdel(record, field)  # as if the crawl record had expired (CRAWL_RECORD_TTL)
    outcome = worker.pop("link")
    assert outcome.lease is not None
    request = outcome.lease.request
    assert request.option_set is not None and request.option_set.lost
    assert request.allowed_domains is None  # what the crawler must not fetch with (it checks .lost)
    # the lease expires; the reaper ends it with a dead letter instead of requeueing it
    redis_client.zadd(keys.leases("link", keys.shard_of("example.com")), {outcome.lease.member: 1})
    result = reclaim_expired_leases(worker, "link", max_retries=3)
    assert (result.requeued, result.failed) == (0, 1)
    (entry,) = redis_client.xrange(keys.control_stream())
    letter = json.loads(entry[1][b"request"])
    assert letter["url"] == SEED_MESSAGE["url"] and letter["error"].startswith(OPTIONS_LOST)
    assert worker.pop("link").lease is None


def test_expired_leases_come_back_with_their_options(
    frontier: Frontier, worker: FrontierLeaser, redis_client: redis.Redis, keys: Keys
) -> None:
    push(frontier, seed())
    outcome = worker.pop("link")
    assert outcome.lease is not None
    redis_client.zadd(keys.leases("link", keys.shard_of("example.com")), {outcome.lease.member: 1})
    ((member, request),) = worker.expired_leases("link")
    assert member == outcome.lease.member and request == seed() and request.option_set is not None
    assert not request.option_set.lost
    assert reclaim_expired_leases(worker, "link", max_retries=3).requeued == 1
    (retry,) = pop_all(worker)
    assert (retry.retry_times, retry.priority, retry.allowed_domains) == (1, 40, ["example.com", "example.org"])


def test_a_wake_up_names_the_shards_its_work_went_to() -> None:
    """Crawlers ask again at once only the shards a wake-up names (crawler/runtime.py)."""
    assert wake_message([7, 3, 7]) == b"3,7"
    assert wake_message([]) == WAKE_ANY
    assert woken_shards(b"3,7") == {3, 7}
    assert woken_shards(WAKE_ANY) is None  # any shard
    assert woken_shards(b"junk") is None


def test_a_link_member_keeps_any_url_exactly_and_reads_members_written_in_full() -> None:
    """The URL of a link member is written without its scheme and its queue's domain when it can be
    (compact_url), else in full; either way it decodes to the URL character for character, and
    members written before (the URL in full) still decode."""
    parent = seed()
    options = parent.option_set = OptionSet.of(parent)
    urls = {
        "http://www.example.com/news/a.html": b"!/news/a.html",
        "https://www.example.com": b"~",
        "https://example.com:8443/": b"+:8443/",
        "http://example.com/": b"*/",
        "http://a.b.example.com?x=1#y": b"^a.b|?x=1#y",
        "https://news.example.com/": b"$news|/",
        "http://127.0.0.1:4000/p/1": b"*:4000/p/1",
        "http://user@example.com/": None,  # user info: in full
        "http://[::1]:8080/": None,
        "https://WWW.Example.COM/": None,  # not the bucket's spelling
        "http://www.xn--bcher-kva.de/": b"!/",
        "http://www.example.com/a|b c": b"!/a|b c",
        "http://wwww.example.com/": b"^wwww|/",
    }
    for url, compact in urls.items():
        (child,) = link_children(parent, [url])
        member = child.member()
        assert member.split(b" ", 2)[2] == (compact or url.encode()), url
        for written in (member, b"1 %s %s" % (options.id.encode(), url.encode())):  # new and in full
            again = FrontierRequest.from_member(
                written, spiderid="link", appid="app", crawlid="c1", domain=child.domain, priority=40, options=options
            )
            assert again.url == url and again == child, (url, written)
