"""Proxy pools (docs/contract.md §21.1): settings, the pools file read again on change, URL checks,
and a crawl's or a domain-update's unknown pool as a validation dead letter."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.validation import Accepted, Rejected, RequestValidator
from crawlhive.utils.frontier import seed_from_request
from crawlhive.utils.process.intake import request_validator
from crawlhive.utils.rules import proxy_pools as proxies
from crawlhive.utils.rules.proxy_pools import ProxyConfigError, ProxyPools, parse_pools, parse_proxy_url

POOLS = {"res": ["http://alice:s3cret-pw@10.1.2.3:3128", "https://proxy.example:8443"], "dc": "http://127.0.0.1:8080"}


def test_a_proxy_is_named_host_port_and_keeps_its_credentials_for_the_connection_only() -> None:
    pools = parse_pools(POOLS, "PROXY_POOLS")
    assert [p.id for p in pools["res"]] == ["10.1.2.3:3128", "proxy.example:8443"]
    assert pools["res"][0].url == "http://alice:s3cret-pw@10.1.2.3:3128"
    assert [p.id for p in pools["dc"]] == ["127.0.0.1:8080"]
    assert parse_proxy_url("http://[::1]", "X").id == "[::1]:80"


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("socks5://u:s3cret-pw@h:1080", "not an http:// or https:// proxy URL"),
        ("http://u:s3cret-pw@h:1080/path", "scheme, credentials, host and port only"),
        ("http://u:s3cret-pw@h:99999", "is not a proxy URL"),
        ("http://:8080", "names no proxy host"),
        ("ftp://h", "not an http:// or https:// proxy URL"),
    ],
)
def test_a_bad_proxy_url_is_refused_naming_the_setting_and_never_showing_its_password(url: str, words: str) -> None:
    with pytest.raises(ProxyConfigError) as caught:
        parse_pools({"p": [url]}, "PROXY_POOLS")
    assert words in str(caught.value)
    assert "PROXY_POOLS (pool p)" in str(caught.value)
    assert "s3cret-pw" not in str(caught.value)


def test_bad_pools_are_refused() -> None:
    with pytest.raises(ProxyConfigError, match="pool name"):
        parse_pools({"bad name": ["http://h:1"]}, "PROXY_POOLS")
    with pytest.raises(ProxyConfigError, match="non-empty list"):
        parse_pools({"p": []}, "PROXY_POOLS")
    with pytest.raises(ProxyConfigError, match="names h:1 more than once"):
        parse_pools({"p": ["http://h:1", "http://u:p@h:1"]}, "PROXY_POOLS")
    with pytest.raises(ProxyConfigError, match="PROXY_POOL_DEFAULT"):
        ProxyPools.from_settings(Settings.from_overrides(PROXY_POOLS=POOLS, PROXY_POOL_DEFAULT="nope"))


def test_the_pools_file_is_read_again_when_it_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxies, "FILE_CHECK_S", 0.0)
    path = tmp_path / "pools.txt"
    path.write_text("# pools\nres http://u:pw-one@127.0.0.1:1\nres http://127.0.0.1:2  # second\n\n")
    pools = ProxyPools.from_settings(Settings.from_overrides(PROXY_POOLS=POOLS, PROXY_POOLS_FILE=str(path)))
    assert [p.id for p in pools.get("res") or ()] == ["127.0.0.1:1", "127.0.0.1:2"]  # the file's wins
    assert pools.get("dc") is not None
    generation = pools.generation
    path.write_text("res http://127.0.0.1:3\nnew http://127.0.0.1:4\n")
    os.utime(path, (time.time() + 5, time.time() + 5))
    assert [p.id for p in pools.get("res") or ()] == ["127.0.0.1:3"]
    assert pools.get("new") is not None and pools.generation == generation + 1
    # a file that no longer reads keeps the pools last read
    path.write_text("res socks5://127.0.0.1:9\n")
    os.utime(path, (time.time() + 10, time.time() + 10))
    assert [p.id for p in pools.get("res") or ()] == ["127.0.0.1:3"]


def test_a_pools_file_line_that_is_not_name_url_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "pools.txt"
    path.write_text("res http://127.0.0.1:1\nres\n")
    with pytest.raises(ProxyConfigError, match=r"pools.txt, line 2: expected `name url`"):
        ProxyPools.from_settings(Settings.from_overrides(PROXY_POOLS_FILE=str(path)))


@pytest.fixture(scope="module")
def pooled_validator() -> RequestValidator:
    return request_validator(Settings.from_overrides(PROXY_POOLS=POOLS))


def test_a_crawl_naming_an_unknown_pool_is_a_validation_dead_letter(pooled_validator: RequestValidator) -> None:
    base = {"url": "http://x.com/", "appid": "app", "crawlid": "c"}
    verdict = pooled_validator.validate({**base, "proxy_pool": "nope"})
    assert isinstance(verdict, Rejected)
    assert "unknown proxy pool 'nope'" in verdict.reason and "/proxy_pool" in verdict.reason
    assert "s3cret-pw" not in verdict.reason
    accepted = pooled_validator.validate({**base, "proxy_pool": "res", "sticky": "domain", "ban_regex": ["captcha"]})
    assert isinstance(accepted, Accepted)
    seed = seed_from_request(accepted.message, "t/0/1")
    assert (seed.proxy_pool, seed.sticky, seed.ban_regex) == ("res", "domain", ["captcha"])
    refused = pooled_validator.validate({**base, "ban_regex": ["(unclosed"]})
    assert isinstance(refused, Rejected) and "/ban_regex/0" in refused.reason
    assert isinstance(pooled_validator.validate({**base, "sticky": "forever"}), Rejected)


def test_a_domain_update_naming_a_pool_is_a_dead_letter_unless_the_operator_allows_it(
    pooled_validator: RequestValidator,
) -> None:
    """A domain's pool applies to every client's crawl of it: by default only the operator sets it
    (PROXY_DOMAIN_POOLS); a domain-update naming one is a validation dead letter saying so."""
    base = {"uuid": "u1", "appid": "app", "domain": "x.com", "action": "domain-update", "hits": 5, "window": 60}
    refused = pooled_validator.validate({**base, "proxy_pool": "dc"})
    assert isinstance(refused, Rejected)
    assert "PROXY_POOL_DOMAIN_UPDATES is off" in refused.reason and "/proxy_pool" in refused.reason
    assert isinstance(pooled_validator.validate(base), Accepted)  # the throttle part stays the client's
    allowed = Settings.from_overrides(PROXY_POOLS=POOLS, PROXY_POOL_DOMAIN_UPDATES=True)
    allowing = request_validator(allowed)
    refused = allowing.validate({**base, "proxy_pool": "nope"})
    assert isinstance(refused, Rejected) and "unknown proxy pool 'nope'" in refused.reason
    assert isinstance(allowing.validate({**base, "proxy_pool": "dc"}), Accepted)


def test_the_pools_a_request_may_name_are_the_operator_s_choice() -> None:
    base = {"url": "http://x.com/", "appid": "app", "crawlid": "c"}
    none = request_validator(Settings.from_overrides(PROXY_POOLS=POOLS, PROXY_CLIENT_POOLS=[]))
    refused = none.validate({**base, "proxy_pool": "res"})
    assert isinstance(refused, Rejected)
    assert "PROXY_CLIENT_POOLS" in refused.reason and "/proxy_pool" in refused.reason
    assert isinstance(none.validate(base), Accepted)
    some = request_validator(Settings.from_overrides(PROXY_POOLS=POOLS, PROXY_CLIENT_POOLS="dc"))
    refused = some.validate({**base, "proxy_pool": "res"})
    assert isinstance(refused, Rejected) and "'res' may not be named" in refused.reason and "dc" in refused.reason
    assert isinstance(some.validate({**base, "proxy_pool": "dc"}), Accepted)
    update = {"uuid": "u1", "appid": "app", "domain": "x.com", "action": "domain-update", "hits": 5, "window": 60}
    both = Settings.from_overrides(PROXY_POOLS=POOLS, PROXY_CLIENT_POOLS="dc", PROXY_POOL_DOMAIN_UPDATES=True)
    refused = request_validator(both).validate({**update, "proxy_pool": "res"})
    assert isinstance(refused, Rejected) and "PROXY_CLIENT_POOLS" in refused.reason


def test_the_operator_pins_domains_to_pools() -> None:
    pins = {"WWW.Example.com.": "dc", "alice.github.io": "res", "github.io": "dc"}
    pools = ProxyPools.from_settings(Settings.from_overrides(PROXY_POOLS=POOLS, PROXY_DOMAIN_POOLS=pins))
    assert pools.pin("example.com") == "dc"
    assert pools.pin("github.io", "alice.github.io") == "res"  # the tenant site's own wins
    assert pools.pin("github.io", "bob.github.io") == "dc"
    assert pools.pin("other.com") is None
    with pytest.raises(ProxyConfigError, match=r"PROXY_DOMAIN_POOLS: no pool named 'nope' \(for x.com\)"):
        ProxyPools.from_settings(Settings.from_overrides(PROXY_POOLS=POOLS, PROXY_DOMAIN_POOLS={"x.com": "nope"}))
    with pytest.raises(ProxyConfigError, match="PROXY_DOMAIN_POOLS: .* is not a domain"):
        ProxyPools.from_settings(Settings.from_overrides(PROXY_POOLS=POOLS, PROXY_DOMAIN_POOLS={"a" * 300: "dc"}))


def test_without_pools_a_named_pool_is_unknown(validator: RequestValidator) -> None:
    verdict = validator.validate({"url": "http://x.com/", "appid": "app", "crawlid": "c", "proxy_pool": "res"})
    assert isinstance(verdict, Rejected)
    assert "none is configured" in verdict.reason
    assert json.dumps(verdict.reason)


def test_proxy_passwords_are_among_the_secrets_no_log_line_shows() -> None:
    secrets = Settings.from_overrides(PROXY_POOLS=POOLS).secrets()
    assert "s3cret-pw" in secrets


def test_pools_file_passwords_are_masked_at_start_and_after_the_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PROXY_POOLS_FILE's credentials are secrets like PROXY_POOLS' (§21.5): in Settings.secrets()
    (what the log handler is configured with), and a proxy the file gains later is masked from the
    moment the file is read again."""
    import logging

    from crawlhive.utils.config.log import configure_logging

    monkeypatch.setattr(proxies, "FILE_CHECK_S", 0.0)
    path = tmp_path / "pools.txt"
    path.write_text("res http://carol:file-s3cret-one@127.0.0.1:1\n")
    settings = Settings.from_overrides(PROXY_POOLS_FILE=str(path))
    assert "file-s3cret-one" in settings.secrets()
    log = tmp_path / "log.txt"
    configure_logging("INFO", file=str(log), secrets=settings.secrets())
    try:
        pools = ProxyPools.from_settings(settings)
        path.write_text("res http://dave:file-s3cret-two@127.0.0.1:2\n")
        os.utime(path, (time.time() + 5, time.time() + 5))
        assert [p.id for p in pools.get("res") or ()] == ["127.0.0.1:2"]
        logging.getLogger("test").warning("proxies: %s and %s", "file-s3cret-one", "http://dave:file-s3cret-two@x")
    finally:
        configure_logging("INFO")
    text = log.read_text()
    assert "proxies: *** and http://dave:***@x" in text
    assert "s3cret" not in text
