"""Domain bucketing, with the table of docs/contract.md §3.2."""

from __future__ import annotations

import pytest

from crawlhive.utils.rules.domains import domain_of_host, domain_of_url


@pytest.mark.parametrize(
    ("url", "domain"),
    [
        ("http://books.toscrape.com/", "toscrape.com"),
        ("http://news.bbc.co.uk/x", "bbc.co.uk"),
        ("http://WWW.Example.COM./a", "example.com"),
        ("http://foo.github.io/", "github.io"),
        ("http://localhost:8000/", "localhost"),
        ("http://127.0.0.1:8080/", "127.0.0.1"),
        ("http://[::1]:8080/", "::1"),
        ("http://intranet/", "intranet"),
        ("http://a.b.unknowntld/", "a.b.unknowntld"),
        ("http://bücher.example.de/", "example.de"),
        ("http://www.münchen.de/", "xn--mnchen-3ya.de"),
        ("https://user:pw@shop.example.com:8443/p?q=1#f", "example.com"),
        ("not a url", ""),
    ],
)
def test_domain_of_url(url: str, domain: str) -> None:
    assert domain_of_url(url) == domain


def test_domain_of_host_normalises_like_urls() -> None:
    assert domain_of_host("www.ebay.com") == "ebay.com"
    assert domain_of_host("[::1]") == "::1"
    assert domain_of_host("  ") == ""
