"""The key module: formats, parsers, and docs/redis-keys.md kept current."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawlhive.utils.errors import KeyFormatError
from crawlhive.utils.keys import Keys, document, render_markdown

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
    assert committed == render_markdown(), "run: python -m crawlhive.utils.keys > docs/redis-keys.md"


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
