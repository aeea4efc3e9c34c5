"""Validation of incoming requests: dispatch, defaults, causes exactly as docs/contract.md §2 and §6 word them."""

from __future__ import annotations

from typing import Any

import pytest

from crawlhive.kafka_monitor.plugins import IncomingPlugin
from crawlhive.kafka_monitor.plugins.action import ActionHandler
from crawlhive.kafka_monitor.plugins.crawl import ScraperHandler
from crawlhive.kafka_monitor.plugins.domain_config import DomainConfigHandler
from crawlhive.kafka_monitor.plugins.stats import StatsHandler
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.messages import ActionRequest, CrawlRequest, DomainConfigRequest, StatsRequest
from crawlhive.utils.contract.validation import Accepted, Rejected, RequestValidator
from crawlhive.utils.process.intake import plugin_classes, request_limits, request_validator


def accepted(validator: RequestValidator, message: Any) -> Accepted:
    outcome = validator.validate(message)
    assert isinstance(outcome, Accepted), outcome
    return outcome


def reason(validator: RequestValidator, message: Any) -> str:
    outcome = validator.validate(message)
    assert isinstance(outcome, Rejected), outcome
    return outcome.reason


_CRAWL = {"url": "http://example.com/", "appid": "testapp", "crawlid": "c1"}


def test_minimal_crawl_gets_every_default(validator: RequestValidator) -> None:
    out = accepted(validator, {"url": "http://example.com/", "appid": "testapp", "crawlid": "c1"})
    assert out.plugin is CrawlRequest
    assert out.message == {
        "url": "http://example.com/", "appid": "testapp", "crawlid": "c1", "spiderid": "link", "priority": 1,
        "maxdepth": 0, "domain_max_pages": None, "max_pages": None, "sitemap": False, "render": False,
        "recrawl": None, "allowed_domains": None,
        "allow_regex": None,
        "deny_regex": None, "deny_extensions": None, "expires": 0, "useragent": None, "cookie": None, "attrs": None,
        "method": "GET", "headers": None, "body": None, "cookies": None,
    }  # fmt: skip


def test_full_post_crawl_is_accepted(validator: RequestValidator) -> None:
    msg = {
        "url": "https://api.example.com/search", "appid": "testapp", "crawlid": "s1", "method": "POST",
        "headers": {"Content-Type": "application/json"}, "body": '{"q":"crawl"}', "cookies": {"session": "x1"},
        "maxdepth": 3, "priority": 100, "domain_max_pages": 2000, "allow_regex": ["^https://"],
        "deny_regex": [r"\.pdf$"], "attrs": {"job": 1}, "useragent": "bot/1", "cookie": "a=1; b=2", "expires": 5,
    }  # fmt: skip
    out = accepted(validator, msg)
    assert out.message["method"] == "POST" and out.message["cookies"] == {"session": "x1"}


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ({"action": "info", "appid": "testapp", "spiderid": "link", "uuid": "u1"}, ActionHandler),
        ({"action": "stop", "appid": "testapp", "spiderid": "link", "uuid": "u1", "crawlid": "c"}, ActionHandler),
        ({"appid": "testapp", "uuid": "s-1"}, StatsHandler),
        ({"appid": "testapp", "uuid": "s-1", "stats": "queue"}, StatsHandler),
        (
            {"uuid": "a", "appid": "madisonTest", "action": "domain-update", "domain": "dmoztools.net", "hits": 60,
             "window": 60, "scale": 0.9},
            DomainConfigHandler,
        ),
        ({"uuid": "a", "appid": "app", "action": "blacklist-update", "domain": "x.com"}, DomainConfigHandler),
    ],
)  # fmt: skip
def test_each_kind_dispatches_to_its_plugin(validator: RequestValidator, message: dict, kind: type) -> None:
    """The contract's validator answers with the kind (no kafka-monitor import); the kafka-monitor's,
    built on its plugins, with the plugin, which is that kind."""
    assert accepted(validator, message).plugin is KIND_OF[kind]
    settings = Settings.from_overrides()
    handlers = plugin_classes(settings, base=IncomingPlugin)
    assert handlers == [ScraperHandler, ActionHandler, StatsHandler, DomainConfigHandler]
    assert accepted(RequestValidator(handlers, request_limits(settings, handlers)), message).plugin is kind


KIND_OF = {
    ScraperHandler: CrawlRequest,
    ActionHandler: ActionRequest,
    StatsHandler: StatsRequest,
    DomainConfigHandler: DomainConfigRequest,
}


def test_stats_default_and_scheme_prepended_and_domain_normalised(validator: RequestValidator) -> None:
    assert accepted(validator, {"appid": "testapp", "uuid": "s"}).message["stats"] == "all"
    assert accepted(validator, {"url": "www.stuff.com", "appid": "app", "crawlid": "c"}).message["url"] == (
        "http://www.stuff.com"
    )
    msg = {"uuid": "a", "appid": "app", "action": "domain-remove", "domain": "WWW.Ebay.com"}
    assert accepted(validator, msg).message["domain"] == "ebay.com"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ([1, 2], "Invalid request: request must be a JSON object"),
        ("text", "Invalid request: request must be a JSON object"),
        ({"url": "http://x.com/", "appid": "testapp"}, "Invalid request: crawl: 'crawlid' is a required property"),
        (
            {"url": "http://example.com/", "appid": "testapp", "crawlid": "c1", "priority": 0},
            "Invalid request: crawl: 0 is less than the minimum of 1 (at /priority)",
        ),
        (
            {"url": "http://x.com/", "appid": "ab", "crawlid": "x"},
            "Invalid request: crawl: 'ab' is too short (at /appid)",
        ),
        (
            {"url": "http://x.com/", "appid": "app", "crawlid": "x", "maxdepth": 4},
            "Invalid request: crawl: 4 is greater than the maximum of 3 (at /maxdepth)",
        ),
        (
            {"url": "http://x.com/", "appid": "app", "crawlid": "x", "attrs": None},
            "Invalid request: crawl: None is not of type 'object' (at /attrs)",
        ),
        (
            {"url": "http://x.com/", "appid": "app", "crawlid": "x", "crazykey": 1},
            "Invalid request: crawl: Additional properties are not allowed ('crazykey' was unexpected)",
        ),
        (
            {"url": "ftp://x/", "appid": "app", "crawlid": "x"},
            "Invalid request: crawl: 'ftp://x/' is not an absolute http(s) URL (at /url)",
        ),
        (
            {"url": "http://", "appid": "app", "crawlid": "x"},
            "Invalid request: crawl: 'http://' is not an absolute http(s) URL (at /url)",
        ),
        (
            {"url": "http://x.com:99999999/", "appid": "app", "crawlid": "x"},
            "Invalid request: crawl: 'http://x.com:99999999/' is not an absolute http(s) URL (at /url)",
        ),
        (
            {"url": "http://x.com/", "appid": "app", "crawlid": "x", "allow_regex": ["ok", "(unclosed"]},
            "Invalid request: crawl: invalid regular expression: missing ): (unclosed (at /allow_regex/1)",
        ),
        (
            {"url": "http://x.com/", "appid": "app", "crawlid": "x", "headers": {"X-A": "a\r\nInjected: 1"}},
            "Invalid request: crawl: value does not match '^[^\\\\r\\\\n]*$' (at /headers/X-A)",  # never quoted
        ),
        (
            {"action": "expire", "appid": "testapp", "spiderid": "link", "uuid": "u"},
            "Invalid request: action: 'expire' is not one of ['stop', 'info'] (at /action)",
        ),
        (
            {"action": "stop", "appid": "testapp", "spiderid": "link", "uuid": "u"},
            "Invalid request: action: 'crawlid' is a required property",
        ),
        (
            {"uuid": "a", "appid": "app", "action": "domain-update", "domain": "x.com"},
            "Invalid request: domain-config: 'hits' is a required property",
        ),
        (
            {"uuid": "a", "appid": "app", "action": "domain-update", "domain": "x.com", "hits": 0, "window": 5},
            "Invalid request: domain-config: 0 is less than the minimum of 1 (at /hits)",
        ),
        (
            {"uuid": "a", "appid": "app", "action": "domain-remove", "domain": ""},
            "Invalid request: domain-config: '' is not a valid domain (at /domain)",
        ),
        (
            {"uuid": "a", "appid": "app", "action": "domain-remove", "domain": "http://x.com/"},
            "Invalid request: domain-config: 'http://x.com/' is not a valid domain (at /domain)",
        ),
        (
            {"uuid": "s", "appid": "testapp", "stats": "everything"},
            "Invalid request: stats: 'everything' is not one of ['kafka-monitor', 'redis-monitor', 'crawler',"
            " 'cleaner', 'spider', 'machine', 'queue', 'rest', 'proxies', 'fetch', 'sink', 'all'] (at /stats)",
        ),
        ({"uuid": "s"}, "Invalid request: stats: 'appid' is a required property"),
        (
            {"action": {"nested": 1}, "appid": "app", "uuid": "u", "spiderid": "link"},
            "Invalid request: action: {'nested': 1} is not of type 'string' (at /action)",
        ),
        ({"hello": "world"}, "Invalid request: crawl: 'appid' is a required property"),  # best_match's pick
        (
            {**_CRAWL, "render": True, "headers": {"Authorization": "Bearer x"}},
            "Invalid request: crawl: headers cannot be sent with render: true (use cookie or cookies) (at /headers)",
        ),
        ({**_CRAWL, "render": "yes"}, "Invalid request: crawl: 'yes' is not of type 'boolean' (at /render)"),
    ],
)
def test_rejections_name_kind_message_and_pointer(validator: RequestValidator, message: Any, expected: str) -> None:
    assert reason(validator, message) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"url": "x" "appid"}', "Unparseable JSON: Expecting ',' delimiter: line 1 column 13 (char 12)"),
        (b"\xff\xfe{}", "Unparseable JSON: invalid UTF-8: invalid start byte at byte 0"),
        (b"", "Unparseable JSON: Expecting value: line 1 column 1 (char 0)"),
        (b'{"a": NaN}', "Unparseable JSON: NaN is not valid JSON"),
        (b"[" * 100000 + b"]" * 100000, "Unparseable JSON: nesting too deep"),
        (
            b'{"url": "http://x.com/\\uDc00"}',
            "Unparseable JSON: a string holds an unpaired surrogate escape (\\ud800-\\udfff)",
        ),
        (None, "Unparseable JSON: Expecting value: line 1 column 1 (char 0)"),  # a Kafka record without a value
    ],
)
def test_unparseable_input(validator: RequestValidator, raw: bytes | None, expected: str) -> None:
    outcome = validator.validate_raw(raw)
    assert isinstance(outcome, Rejected) and outcome.reason == expected


def test_escaped_surrogate_pairs_are_fine(validator: RequestValidator) -> None:
    out = validator.validate_raw(b'{"url": "http://x.com/\\ud83d\\ude00", "appid": "app", "crawlid": "c"}')
    assert isinstance(out, Accepted) and out.message["url"] == "http://x.com/\U0001f600"


def test_limits_come_from_settings() -> None:
    strict = request_validator(
        Settings.from_overrides(
            SCHEMA_PRIORITY_MAX=10, SCHEMA_MAXDEPTH_MAX=1, SCHEMA_DOMAIN_MAX_PAGES_MAX=5, SCHEMA_MAX_PAGES_MAX=100
        )
    )
    base = {"url": "http://x.com/", "appid": "app", "crawlid": "c"}
    assert reason(strict, {**base, "priority": 11}).endswith("11 is greater than the maximum of 10 (at /priority)")
    assert reason(strict, {**base, "maxdepth": 2}).endswith("(at /maxdepth)")
    assert reason(strict, {**base, "domain_max_pages": 6}).endswith("(at /domain_max_pages)")
    assert reason(strict, {**base, "max_pages": 101}).endswith("(at /max_pages)")
    assert reason(strict, {**base, "max_pages": 0}).endswith("0 is less than the minimum of 1 (at /max_pages)")
    accepted = strict.validate({**base, "max_pages": 100})
    assert isinstance(accepted, Accepted) and accepted.message["max_pages"] == 100
    assert isinstance(strict.validate({**base, "priority": 10}), Accepted)
    put = request_validator(Settings.from_overrides(SCHEMA_ALLOWED_METHODS=["GET", "PUT"]))
    assert isinstance(put.validate({**base, "method": "PUT"}), Accepted)
    assert reason(put, {**base, "method": "POST"}).endswith("'POST' is not one of ['GET', 'PUT'] (at /method)")


def test_catastrophic_patterns_are_accepted_and_cost_linear_time() -> None:
    """``(a+)+$`` froze Python's re on a long link; RE2 accepts it and answers at once (§10.4)."""
    import time

    from crawlhive.utils.rules.patterns import search_any

    validator = request_validator(Settings.from_overrides())
    message = {"url": "http://x.com/", "appid": "app", "crawlid": "c", "allow_regex": ["(a+)+$"]}
    assert isinstance(validator.validate(message), Accepted)
    started = time.perf_counter()
    assert not search_any(("(a+)+$",), "http://x.com/" + "a" * 50_000 + "!")
    assert time.perf_counter() - started < 0.5  # Python's re would take longer than the universe's age


def test_disabled_plugin_kind_is_rejected() -> None:
    no_stats = request_validator(
        Settings.from_overrides(KAFKA_MONITOR_PLUGINS={"crawlhive.kafka_monitor.plugins.stats.StatsHandler": None})
    )
    assert isinstance(no_stats.validate({"appid": "testapp", "uuid": "s"}), Rejected)
