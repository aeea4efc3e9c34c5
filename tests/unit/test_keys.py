"""The key module: formats, parsers, and docs/redis-keys.md kept current."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawlhive.utils.errors import KeyFormatError
from crawlhive.utils.keys import Keys, document, render_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_queue_key_round_trip_including_ipv6_domain() -> None:
    keys = Keys("ch")
    assert keys.queue("link", "example.com") == "ch:queue:link:example.com"
    assert keys.parse_queue("ch:queue:link:example.com") == ("link", "example.com")
    assert keys.parse_queue(keys.queue("link", "::1")) == ("link", "::1")


@pytest.mark.parametrize("bad", ["ch:queue:link", "other:queue:link:x.com", "ch:queue::x.com", "ch:throttle:x"])
def test_parser_rejects_other_keys(bad: str) -> None:
    with pytest.raises(KeyFormatError):
        Keys("ch").parse_queue(bad)


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
