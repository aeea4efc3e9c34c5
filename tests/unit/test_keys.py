"""The key module: formats, parsers, and docs/redis-keys.md kept current."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.crc import key_slot

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.keys_doc import document, render_markdown
from crawlhive.utils.config.errors import KeyFormatError

ROOT = Path(__file__).resolve().parents[2]


def test_crawl_queue_key_round_trip_including_ipv6_domain_and_odd_ids() -> None:
    keys = Keys("ch")
    assert keys.crawl_queue("link", "app", "c1", "example.com") == "ch:cq:link:app:c1:example.com"
    assert keys.parse_crawl_queue("ch:cq:link:app:c1:example.com") == ("link", "app", "c1", "example.com")
    odd = keys.crawl_queue("li:nk", "a%3Ap", "c:1:", "::1")
    assert keys.parse_crawl_queue(odd) == ("li:nk", "a%3Ap", "c:1:", "::1")


def test_crawl_members_and_refs_round_trip() -> None:
    keys = Keys("ch")
    assert keys.parse_crawl_member(keys.crawl_member("a:b", "c%d")) == ("a:b", "c%d")
    assert keys.parse_crawl_ref(keys.crawl_ref("link", "a:b", "::")) == ("link", "a:b", "::")
    with pytest.raises(KeyFormatError):
        keys.parse_crawl_ref("link:app")


@pytest.mark.parametrize("bad", ["ch:cq:link:a:c", "other:cq:link:a:c:x.com", "ch:cq::a:c:x.com", "ch:dq:x:y"])
def test_parser_rejects_other_keys(bad: str) -> None:
    with pytest.raises(KeyFormatError):
        Keys("ch").parse_crawl_queue(bad)


def test_prefix_must_not_contain_separator() -> None:
    with pytest.raises(KeyFormatError, match="REDIS_KEY_PREFIX"):
        Keys("a:b")


def test_every_key_format_is_documented() -> None:
    rows = document()
    assert rows and all(r.doc and r.redis_type for r in rows)
    assert len({r.pattern for r in rows}) == len(rows)


def test_docs_redis_keys_md_is_current() -> None:
    committed = (ROOT / "docs" / "redis-keys.md").read_text()
    assert committed == render_markdown(), "run: python -m crawlhive.utils.backends.keys_doc > docs/redis-keys.md"


@pytest.mark.parametrize(
    ("spider", "appid", "crawlid", "domain"), [("link", "app", "c1", "x.com"), ("a:b", "%", ":", "::1")]
)
@pytest.mark.parametrize("render", [False, True])
def test_script_prefixes_complete_to_the_real_keys(
    spider: str, appid: str, crawlid: str, domain: str, render: bool
) -> None:
    keys = Keys("ch")
    p = keys.script_prefixes(spider, render)
    member = keys.crawl_member(appid, crawlid)
    assert p["crawl_queue"] + member + ":" + domain == keys.crawl_queue(spider, appid, crawlid, domain, render)
    assert p["domain_crawls"] + domain == keys.domain_crawls(spider, domain, render)
    assert p["crawl_domains"] + member == keys.crawl_domains(spider, appid, crawlid, render)
    assert p["crawl"] + member == keys.crawl(spider, appid, crawlid)  # one record for both lanes
    assert p["crawl_leases"] + member == keys.crawl_leases(spider, appid, crawlid)


def test_the_rendering_lane_never_shares_a_queue_key_with_the_plain_one() -> None:
    keys = Keys("ch")
    pairs = [
        (keys.crawl_queue("link", "a", "c", "x.com"), keys.crawl_queue("link", "a", "c", "x.com", render=True)),
        (keys.domain_crawls("link", "x.com"), keys.domain_crawls("link", "x.com", render=True)),
        (keys.domains("link"), keys.domains("link", render=True)),
        (keys.crawl_domains("link", "a", "c"), keys.crawl_domains("link", "a", "c", render=True)),
        (keys.wake_channel("link"), keys.wake_channel("link", render=True)),
    ]
    for plain, render in pairs:
        assert plain != render and "-render:" in render and "-render" not in plain


@pytest.mark.parametrize(("spider", "egress"), [(None, None), ("link", None), ("link", "2001:db8::1")])
def test_throttle_prefix_completes_to_the_throttle_key(spider: str | None, egress: str | None) -> None:
    keys = Keys("ch")
    for domain in ("example.com", "::1"):
        expected = keys.throttle(keys.throttle_key(domain, spider, egress))
        assert keys.throttle_prefix(spider, egress) + domain == expected


def test_one_shard_keeps_the_layout_of_earlier_releases() -> None:
    keys = Keys("ch")
    assert keys.crawl_queue("link", "app", "c1", "example.com") == "ch:cq:link:app:c1:example.com"
    assert keys.domains("link") == "ch:domains:link" and keys.leases("link") == "ch:leases:link"
    assert keys.crawl("link", "app", "c1") == keys.crawl_shard("link", "app", "c1") == "ch:crawl:link:app:c1"
    assert keys.throttle(keys.throttle_key("example.com", "link")) == "ch:throttle:link::example.com"
    assert keys.control_stream() == "ch:control" and keys.dupefilter("link", "a", "c") == "ch:dupefilter:link:a:c"
    assert {keys.shard_of(f"site{i}.com") for i in range(100)} == {0}


def slot(key: str) -> int:
    return int(key_slot(key.encode()))


@pytest.mark.parametrize(("appid", "crawlid"), [("app", "c1"), ("{evil}", "c{1}"), ("a:b", "%{x}")])
def test_with_shards_every_key_a_script_touches_shares_one_slot(appid: str, crawlid: str) -> None:
    keys = Keys("ch", shards=16)
    domains = [f"site{i}.com" for i in range(200)] + ["::1", "127.0.0.1", "xn--bcher-kva.example"]
    shards = {keys.shard_of(d) for d in domains}
    assert shards == set(range(16))  # the domains spread over every shard
    for domain in domains:
        k = keys.shard_of(domain)
        p = keys.script_prefixes("link", shard=k)
        member = keys.crawl_member(appid, crawlid)
        touched = [
            keys.domains("link", shard=k),
            keys.leases("link", shard=k),
            keys.domain_config(k),
            keys.domain_blacklist(k),
            keys.crawl_queue("link", appid, crawlid, domain),
            keys.domain_crawls("link", domain),
            keys.crawl_domains("link", appid, crawlid, shard=k),
            keys.crawl_shard("link", appid, crawlid, k),
            keys.crawl_leases("link", appid, crawlid, k),
            keys.crawl_stopped("link", appid, crawlid, k),
            keys.dupefilter("link", appid, crawlid, k),
            keys.dupefilter_bloom("link", appid, crawlid, k),
            keys.dupefilter_bloom_layer("link", appid, crawlid, 3, k),
            keys.dupefilter_bloom("link", appid, crawlid, k) + ":7",  # as crawler_admit.lua builds a layer's
            keys.dupefilter_bloom_page("link", appid, crawlid, b"P" * 12, k),
            keys.page_caps("link", appid, crawlid, domain),
            keys.throttle(keys.throttle_key(domain, "link")),
            keys.throttle_prefix("link", None, k) + domain,
            keys.crawl_delay(domain),
            keys.crawl_delay_prefix(k) + domain,
            keys.queue_sequence(k),
            keys.seed_origin("t/0/1", k),
            p["crawl_queue"] + member + ":" + domain,
            p["domain_crawls"] + domain,
            p["crawl_domains"] + member,
            p["crawl"] + member,
            p["crawl_leases"] + member,
        ]
        assert {slot(t) for t in touched} == {slot(keys.leases("link", shard=k))}
        assert keys.parse_crawl_queue(keys.crawl_queue("link", appid, crawlid, domain)) == (
            "link",
            appid,
            crawlid,
            domain,
        )
    # cluster-wide keys share a slot of their own, whatever the ids
    cluster_wide = [
        keys.crawl("link", appid, crawlid),
        keys.app_crawls("link", appid),
        keys.active_crawls(),
        keys.finished_crawls(),
        keys.expiries(),
        keys.control_stream(),
        keys.control_origin("t/0/1"),
        keys.stats_window("crawler", "total"),
        keys.heartbeat("crawler", "n1"),
        keys.heartbeat_index("crawler"),
        keys.poll_result("u{1}"),
        keys.poll_origin("t/0/1"),
        keys.poll_waiter("u{1}"),
    ]
    assert len({slot(t) for t in cluster_wide}) == 1
    assert slot(cluster_wide[0]) not in {slot(keys.leases("link", shard=k)) for k in range(16)}
    # the stored shard count has one name whatever the count, so any component finds it
    assert keys.frontier_shards() == Keys("ch").frontier_shards() == "ch:frontier-shards"


def test_shards_are_a_pure_function_of_the_domain_and_the_count() -> None:
    a, b = Keys("ch", shards=64), Keys("other", shards=64)
    assert [a.shard_of(f"d{i}.org") for i in range(50)] == [b.shard_of(f"d{i}.org") for i in range(50)]
    assert a.head(3) == "ch:{ch.3}:" and b.head(3) == "other:{other.3}:"
    with pytest.raises(KeyFormatError, match="FRONTIER_SHARDS"):
        Keys("ch", shards=0)
    with pytest.raises(KeyFormatError, match="REDIS_KEY_PREFIX"):
        Keys("c{h}")
