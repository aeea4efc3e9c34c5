"""The fetch modes (docs/contract.md §25): the request field's validation, the settings' checks,
the profiles, and the parts of the ladder that need no network (walls, the pin entries)."""

from __future__ import annotations

from typing import Any

import pytest
from scrapy.http import HtmlResponse, Request

from crawlhive.crawler.fetch import Walls, check_fetch_settings
from crawlhive.crawler.impersonate import PROFILES, _resolve_entry, curl_target
from crawlhive.utils.config.defaults import crawler as crawler_defaults
from crawlhive.utils.config.errors import SettingsError
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.validation import Accepted, Rejected, RequestValidator

_CRAWL = {"url": "http://example.com/", "appid": "testapp", "crawlid": "c1"}


def _outcome(validator: RequestValidator, message: dict[str, Any]) -> Accepted | Rejected:
    outcome = validator.validate(message)
    assert isinstance(outcome, Accepted | Rejected)
    return outcome


@pytest.mark.parametrize("mode", ["plain", "impersonate", "auto"])
def test_a_crawl_may_name_its_fetch(validator: RequestValidator, mode: str) -> None:
    outcome = _outcome(validator, {**_CRAWL, "fetch": mode})
    assert isinstance(outcome, Accepted) and outcome.message["fetch"] == mode and outcome.message["render"] is False


def test_fetch_render_is_render_true_and_the_two_may_not_disagree(validator: RequestValidator) -> None:
    outcome = _outcome(validator, {**_CRAWL, "fetch": "render"})
    assert isinstance(outcome, Accepted) and outcome.message["render"] is True
    refused = _outcome(validator, {**_CRAWL, "fetch": "plain", "render": True})
    assert isinstance(refused, Rejected)
    assert refused.reason == (
        "Invalid request: crawl: fetch: plain and render: true disagree (render is fetch: render) (at /fetch)"
    )
    unknown = _outcome(validator, {**_CRAWL, "fetch": "stealth"})
    assert isinstance(unknown, Rejected) and "(at /fetch)" in unknown.reason


def test_a_domain_update_may_set_the_domain_s_fetch(validator: RequestValidator) -> None:
    update = {"uuid": "u1", "appid": "testapp", "domain": "example.com", "action": "domain-update", "hits": 5}
    outcome = _outcome(validator, {**update, "window": 60, "fetch": "auto"})
    assert isinstance(outcome, Accepted) and outcome.message["fetch"] == "auto"
    refused = _outcome(validator, {**update, "window": 60, "fetch": "render"})  # a crawl's choice only
    assert isinstance(refused, Rejected) and "(at /fetch)" in refused.reason


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"FETCH": "stealth"}, "FETCH: 'stealth' is not one of plain, impersonate, auto"),
        ({"FETCH": "render"}, "FETCH: 'render'"),
        ({"FETCH_PROFILE": "netscape4"}, "FETCH_PROFILE: 'netscape4' is not a browser profile"),
        ({"FETCH_LADDER_TTL": 0}, "FETCH_LADDER_TTL: must be positive"),
        ({"FETCH_SESSION_PROFILES": ["chrome", "mosaic"]}, "FETCH_SESSION_PROFILES: 'mosaic' is not a browser profile"),
        ({"FETCH_WALL_STATUSES": [403, 1000]}, "FETCH_WALL_STATUSES"),
        ({"FETCH_WALL_PATTERNS": ["(unclosed"]}, "FETCH_WALL_PATTERNS: invalid regular expression"),
    ],
)
def test_wrong_fetch_settings_name_the_setting(overrides: dict[str, Any], named: str) -> None:
    with pytest.raises(SettingsError, match=named.replace("(", r"\(")):
        check_fetch_settings(Settings.from_overrides(**overrides))


def test_the_defaults_pass_and_every_profile_is_a_target_curl_cffi_has() -> None:
    check_fetch_settings(Settings.from_overrides())
    for name, target in PROFILES.items():
        assert curl_target(name) == target
    assert curl_target("chrome146") == "chrome146"  # a curl_cffi target by its own name


def test_pin_entries_bracket_ipv6() -> None:
    assert _resolve_entry("a.example", 443, "192.0.2.7") == "a.example:443:192.0.2.7"
    assert _resolve_entry("a.example", 80, "2001:db8::1") == "a.example:80:[2001:db8::1]"


@pytest.mark.parametrize(
    ("status", "body", "walled"),
    [
        (403, b"<html>forbidden</html>", True),
        (429, b"", True),
        (200, b"<html><head><title>Just a moment...</title></head></html>", True),
        (200, b"<div id='px-captcha'></div>", True),
        (200, b"<html><body>Incapsula incident ID: 123</body></html>", True),
        (200, b"<html><head><title>Just a page</title></head></html>", False),
        (404, b"<html>not here</html>", False),
    ],
)
def test_what_is_a_wall(status: int, body: bytes, walled: bool) -> None:
    walls = Walls.from_settings(Settings.from_overrides())
    response = HtmlResponse("https://a.example/", status=status, body=body, request=Request("https://a.example/"))
    assert walls.walled(response) is walled
    assert crawler_defaults.FETCH_WALL_STATUSES == [403, 429, 503]


def test_a_pin_compares_addresses_whatever_their_spelling() -> None:
    """The pre-request check (§25.4): IPv6 brackets and scopes, IPv4-mapped forms and the port."""
    import ipaddress

    from crawlhive.crawler.impersonate import Pin, normal_address
    from crawlhive.crawler.netguard import NetworkPolicy

    assert normal_address("::ffff:192.0.2.7") == ipaddress.ip_address("192.0.2.7")
    assert normal_address("[2001:db8::1]") == normal_address("2001:0db8:0:0::1%eth0")
    assert normal_address("not an address") is None
    pin = Pin("a.example", "192.0.2.7", 443, None)
    assert pin.check("::ffff:192.0.2.7", 443) is None and pin.check("192.0.2.7", 443) is None
    assert pin.refused is None
    refused = pin.check("192.0.2.7", 8443) or ""
    assert refused.endswith("not to the checked 192.0.2.7:443 (the address pin did not hold)"), refused
    assert pin.refused == refused and refused.startswith("blocked network: a.example was connected to 192.0.2.7:8443")
    assert Pin("a.example", "2001:db8::1", 80, None).check("2001:db8:0::1", 80) is None
    assert Pin("a.example", "2001:db8::1", 80, None).check("", 0) is not None  # no address: refused
    # the guard's policy once more, on the connected address (an IPv4-mapped form is its IPv4)
    policy = NetworkPolicy([ipaddress.ip_network("127.0.0.0/8")], [])
    reason = Pin("b.example", "::ffff:127.0.0.1", 80, policy).check("127.0.0.1", 80)
    assert reason is not None and reason.startswith("blocked network: b.example (127.0.0.1) is in 127.0.0.0/8")
