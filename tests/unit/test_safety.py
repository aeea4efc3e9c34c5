"""Safe defaults (docs/contract.md §10) that need no running service."""

from __future__ import annotations

import logging

import pytest

from crawlhive.rest.answers import dashboard_letter
from crawlhive.rest.server import check_exposure, is_loopback_host
from crawlhive.utils.errors import UnsafeSettings
from crawlhive.utils.settings import Settings


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
