"""Safe defaults (docs/contract.md §10) that need no running service."""

from __future__ import annotations

import ipaddress
import json
import logging

import pytest

from crawlhive.crawler.netguard import NetworkPolicy
from crawlhive.rest.answers import dashboard_letter
from crawlhive.rest.server import check_exposure, is_loopback_host
from crawlhive.utils.config.errors import SettingsError, UnsafeSettings
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.encoding import encode
from crawlhive.utils.contract.fit import fit_message


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("10.1.2.3", False),
        ("192.168.0.7", False),
        ("no-such-host.invalid", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_rest_exposure_needs_a_key_or_an_explicit_insecure(caplog: pytest.LogCaptureFixture) -> None:
    assert Settings.from_overrides()["REST_HOST"] == "127.0.0.1"
    check_exposure(Settings.from_overrides())  # the default is safe
    with pytest.raises(UnsafeSettings, match="REST_API_KEY.*REST_INSECURE") as refused:
        check_exposure(Settings.from_overrides(REST_HOST="0.0.0.0"))
    assert refused.value.exit_code == 2
    with caplog.at_level(logging.WARNING):
        check_exposure(Settings.from_overrides(REST_HOST="0.0.0.0", REST_API_KEY="k"))
        assert not caplog.records
        check_exposure(Settings.from_overrides(REST_HOST="0.0.0.0", REST_INSECURE=True))
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "REST_INSECURE=true" in caplog.records[0].getMessage()


def test_dashboard_keeps_no_payload_of_a_dead_letter() -> None:
    letter = {
        "stage": "validation",
        "error": "x" * 10_000,
        "payload": {"headers": {"Authorization": "secret"}},
        "appid": "a",
        "retry_times": 2,
        "extra": "whatever",
    }
    kept = dashboard_letter(letter)
    assert set(kept) == {"stage", "error", "appid", "retry_times", "received"}
    assert len(kept["error"]) == 500


# --- network guard (docs/contract.md §10.2) ------------------------------------------------------------


def _policy(**overrides: object) -> NetworkPolicy:
    return NetworkPolicy.from_settings(Settings.from_overrides(**overrides))


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "::1",
        "fd00::1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "not-an-address",
    ],
)
def test_the_default_blocks_this_host_private_networks_and_cloud_metadata(address: str) -> None:
    assert _policy().blocking(address) is not None


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "172.32.0.1", "100.128.0.1"])
def test_the_default_allows_public_addresses(address: str) -> None:
    assert _policy().blocking(address) is None


def test_an_allowed_network_wins_over_a_blocked_one() -> None:
    policy = _policy(CRAWLER_ALLOWED_NETWORKS=["127.0.0.2/32", "10.5.0.0/16"])
    assert policy.blocking("127.0.0.2") is None and policy.blocking("10.5.9.9") is None
    assert str(policy.blocking("127.0.0.1")) == "127.0.0.0/8" and str(policy.blocking("10.6.0.1")) == "10.0.0.0/8"
    reason = policy.reason("localhost", "127.0.0.1", ipaddress.ip_network("127.0.0.0/8"))
    assert reason.startswith("blocked network: localhost (127.0.0.1) is in 127.0.0.0/8")
    assert "CRAWLER_BLOCKED_NETWORKS" in reason and "CRAWLER_ALLOWED_NETWORKS" in reason


def test_networks_that_do_not_parse_name_their_setting() -> None:
    with pytest.raises(SettingsError, match="CRAWLER_ALLOWED_NETWORKS: '300.0.0.0/8' is not a network"):
        _policy(CRAWLER_ALLOWED_NETWORKS=["300.0.0.0/8"])


def test_the_guard_is_every_crawler_s_resolver_and_cannot_be_replaced() -> None:
    from crawlhive.crawler.settings import scrapy_settings

    values = scrapy_settings(Settings.from_overrides(), "link")
    assert values["TWISTED_DNS_RESOLVER"] == "crawlhive.crawler.netguard.GuardedResolver"
    assert values["DOWNLOADER_MIDDLEWARES"]["crawlhive.crawler.netguard.NetworkGuardMiddleware"] > 550  # before retry
    for name in ("TWISTED_DNS_RESOLVER", "DNS_RESOLVER"):
        with pytest.raises(SettingsError, match=name):
            scrapy_settings(
                Settings.from_overrides(SCRAPY_SETTINGS={name: "scrapy.resolver.CachingThreadedResolver"}), "link"
            )


# --- answers always fit (docs/contract.md §10.5) --------------------------------------------------------


def test_a_message_that_fits_is_left_alone() -> None:
    message = {"uuid": "u", "crawlids": {"c1": {"total": 1}}}
    assert fit_message(message, 1000) == encode(message)


def test_the_largest_map_keeps_its_first_entries_and_the_message_says_truncated() -> None:
    domains = {f"site{i}.com": {"total": i} for i in range(2000)}
    message = {"uuid": "u", "spiderid": "link", "queues": {"link": {"domains": domains, "total": 2000}}}
    data = fit_message(message, 4096)
    assert data is not None and len(data) <= 4096
    cut = json.loads(data)
    assert cut["truncated"] is True and cut["uuid"] == "u" and cut["queues"]["link"]["total"] == 2000
    kept = list(cut["queues"]["link"]["domains"])
    assert 0 < len(kept) < 2000 and kept == list(domains)[: len(kept)]
    assert (
        len(
            encode(
                {
                    **cut,
                    "queues": {
                        "link": {**cut["queues"]["link"], "domains": dict(list(domains.items())[: len(kept) + 1])}
                    },
                }
            )
        )
        > 4096
    )  # as many as fit, not fewer
    assert "truncated" not in message  # the original is untouched


def test_a_message_that_cannot_be_cut_enough_is_none() -> None:
    assert fit_message({"uuid": "u", "error": "x" * 10_000}, 4096) is None


def test_only_records_kafka_refuses_for_good_are_never_sendable() -> None:
    from crawlhive.utils.contract.kafka_errors import (
        KafkaConnectionError,
        KafkaTimeoutError,
        MessageSizeTooLargeError,
        RecordListTooLargeError,
    )
    from crawlhive.utils.contract.produce import never_sendable
    from crawlhive.utils.process.loop import is_transient

    assert never_sendable(MessageSizeTooLargeError()) and never_sendable(RecordListTooLargeError())
    assert not never_sendable(KafkaTimeoutError()) and not never_sendable(KafkaConnectionError())
    assert is_transient(KafkaTimeoutError())


# --- secrets stay with their crawl (docs/contract.md §10.6) ---------------------------------------------


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("http://Example.COM/a?b", "http://example.com:80"),
        ("http://example.com:80/", "http://example.com:80"),
        ("HTTPS://example.com/", "https://example.com:443"),
        ("https://example.com:8443/", "https://example.com:8443"),
        ("http://[::1]:8080/", "http://[::1]:8080"),
        ("http://example.com./", "http://example.com:80"),
        ("http:///nohost", ""),
        ("http://example.com:99999/", ""),
    ],
)
def test_origins(url: str, origin: str) -> None:
    from crawlhive.utils.rules.domains import origin_of

    assert origin_of(url) == origin


def test_a_seed_remembers_its_origin_and_old_requests_still_decode() -> None:
    from crawlhive.utils.frontier import FrontierRequest, seed_from_request

    message = {"url": "https://Shop.example.com:8443/x", "appid": "a", "crawlid": "c", "spiderid": "link"}
    message |= dict.fromkeys(("priority", "maxdepth", "expires"), 0) | {"method": "GET"}
    for name in ("headers", "body", "cookies", "domain_max_pages", "allowed_domains", "allow_regex", "deny_regex"):
        message[name] = None
    message |= {"deny_extensions": None, "useragent": None, "cookie": None, "attrs": None}
    seed = seed_from_request(message, "origin")
    assert seed.seed_origin == "https://shop.example.com:8443"
    legacy = json.loads(seed.encode())
    legacy.pop("seed_origin")
    legacy["seed_domain"] = "example.com"  # written by 1.x
    assert FrontierRequest.decode(json.dumps(legacy)).seed_origin == ""  # no credentials for its links
