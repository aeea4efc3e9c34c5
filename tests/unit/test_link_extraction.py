"""crawler/links.py's extract_links against Scrapy's own LinkExtractor (docs/contract.md §3.5).

The reference is what crawlhive did before its own extractor: Scrapy's ``LinkExtractor(tags=("a",
"area"), attrs=("href",), deny_extensions=…)`` and then the crawl's filters and
``canonicalize_url``. Both run on a corpus of awkward HTML (malformed markup, ``<base href>``,
non-UTF-8 encodings, ``<area>``, fragments, ``javascript:`` and other schemes, whitespace in
attributes, protocol-relative and dot-segment URLs, IDN hosts, XHTML, a page of 5,000 links, the
repository's own sample sites) under several crawl options; the links, their order and their texts
must be equal.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy.http import HtmlResponse, Request, TextResponse
from scrapy.linkextractors import IGNORED_EXTENSIONS, LinkExtractor
from scrapy.utils.url import url_has_any_extension
from w3lib.url import canonicalize_url

from crawlhive.crawler.links import DEFAULT_LIMITS, LinkLimits, allowed_domains, extract_links, host_allowed
from crawlhive.utils.frontier import FrontierRequest
from crawlhive.utils.rules.patterns import search_any

ROOT = Path(__file__).resolve().parents[2]


def reference_links(response: Any, request: FrontierRequest, limits: LinkLimits = DEFAULT_LIMITS) -> list[dict]:
    """crawlhive's link extraction as it was, on Scrapy's LinkExtractor (the oracle)."""
    if not isinstance(response, TextResponse):
        return []
    deny_ext = request.deny_extensions
    extensions = None if deny_ext is None else [e.lstrip(".").lower() for e in deny_ext if e.strip(".")]
    extractor = LinkExtractor(deny_extensions=extensions, tags=("a", "area"), attrs=("href",), unique=True)
    allow, deny = tuple(request.allow_regex or ()), tuple(request.deny_regex or ())
    allowed = allowed_domains(request)
    found: dict[str, dict] = {}
    for link in extractor.extract_links(response):
        if not link.url.startswith(("http://", "https://")):
            continue
        if (allow and not search_any(allow, link.url)) or (deny and search_any(deny, link.url)):
            continue
        if allowed and not host_allowed(link.url, allowed):
            continue
        if limits.is_trap(link.url):
            continue
        url = canonicalize_url(link.url)
        if url not in found:
            found[url] = {"url": url, "text": (link.text or "").strip()}
    return list(found.values())


def page(body: str | bytes, url: str = "http://example.com/dir/page.html", encoding: str = "utf-8") -> HtmlResponse:
    raw = body.encode(encoding) if isinstance(body, str) else body
    headers = {"Content-Type": f"text/html; charset={encoding}"}
    return HtmlResponse(url, body=raw, headers=headers, request=Request(url))


AWKWARD = """<!DOCTYPE html><html><head><title>t</title></head><body>
<a href="/abs">absolute path</a> <a href="rel/x.html">relative</a> <a href="../up/y.html">up</a>
<a href="./same.html?b=2&a=1#frag">query and fragment</a> <a href="#top">fragment only</a>
<a href="">empty</a> <a>no href</a> <a href="   /spaced   ">  spaced  text  </a>
<a href="javascript:void(0)">js</a> <a href="mailto:x@example.com">mail</a> <a href="tel:+1">tel</a>
<a href="ftp://example.com/f">ftp</a> <a href="data:text/html,hi">data</a> <a href="file:///etc/passwd">file</a>
<a href="//cdn.example.org/lib.html">protocol-relative</a> <a href="HTTP://EXAMPLE.COM/Upper">upper scheme</a>
<A HREF="/caps">caps tag</A> <a href="/x.PDF">pdf upper</a> <a href="/y.pdf?x=1">pdf with query</a>
<a href="/archive.tar.gz">tarball</a> <a href="/dir.pdf/">pdf dir</a> <a href="/image.jpg">image</a>
<area href="/area-link" alt="a"> <a href="http://bücher.example/straße">idn</a>
<a href="/with space/and%20pct">spaces</a> <a href="/q?x=é&y=ü">unicode query</a>
<a href="/dup">first dup</a> <a href="/dup#other">second dup</a> <a href="/dup">third dup</a>
<a href="http://[::1]:8080/v6">ipv6</a> <a href="http://example.com:80/port">default port</a>
<a href="/nested"><span>nested <b>bold</b></span> text<!-- comment --></a>
<a href="/tail">tail</a> after tail
<p><a href="/unclosed">unclosed <a href="/second">second</p>
<table><tr><td><a href="/in-table">cell</td></tr></table>
<a href="https://other.example.net/page">other domain</a> <a href="https://sub.example.com/s">subdomain</a>
<a href="/a/b/a/b/a/b/a/b/">trap</a> <a href="/long/{long}">too long</a>
<a href="http://exa mple.com/bad host">bad host</a> <a href="http://example.com:99999/badport">bad port</a>
<a href="&#104;ttp://example.com/entity">entity</a> <a href="/\tcontrol\nchars">control chars</a>
</body></html>""".replace("{long}", "x" * 2100)

BASE = """<html><head><base href="http://base.example/root/sub/"><title>b</title></head><body>
<a href="rel">relative to base</a> <a href="/abs">absolute path on base</a> <a href="?q=1">query</a>
<base href="http://second.example/"><a href="later">second base ignored</a></body></html>"""

RELATIVE_BASE = """<html><head><base href="/other/"></head><body><a href="x">x</a></body></html>"""

MALFORMED = """<html><body><div><a href='/single'>single quotes</a><a href=/unquoted>unquoted</a>
<a href="/unterminated>broken</a><a href="/ok">ok</a></div></span></div><a href="/after">after</a>
<script>document.write('<a href="/in-script">')</script><noscript><a href="/noscript">ns</a></noscript>
<svg><a href="/svg-a">svg</a></svg><template><a href="/in-template">t</a></template>"""

XHTML = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Strict//EN" "http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd">
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>x</title></head>
<body><p><a href="/xhtml-a">xhtml</a><map name="m"><area href="/xhtml-area" /></map></p></body></html>"""

LATIN1 = "<html><body><a href='/caf\xe9?q=\xe9'>caf\xe9</a><a href='/ok'>ok</a></body></html>"
CP1251 = (
    "<html><body><a href='/\u043f\u0443\u0442\u044c?\u0437=\u0434'>\u0442\u0435\u043a\u0441\u0442</a></body></html>"
)
SJIS = "<html><body><a href='/\u65e5\u672c?\u8a9e=\u8a9e'>\u65e5\u672c\u8a9e</a></body></html>"

MANY = (
    "<html><body>"
    + "".join(f'<a href="/p/{i % 4000}.html?x={i % 7}">link {i}</a>' for i in range(5000))
    + "</body></html>"
)


def _samples() -> list[tuple[str, HtmlResponse]]:
    samples = [
        ("awkward", page(AWKWARD)),
        ("base", page(BASE)),
        ("relative base", page(RELATIVE_BASE)),
        ("malformed", page(MALFORMED)),
        ("xhtml", page(XHTML)),
        ("latin-1", page(LATIN1, encoding="latin-1")),
        ("cp1251", page(CP1251, encoding="cp1251")),
        ("shift_jis", page(SJIS, encoding="shift_jis")),
        ("5000 links", page(MANY)),
        ("empty", page("")),
        ("not html", page("just text, no markup at all")),
        ("https page", page(AWKWARD, url="https://example.com/secure/")),
        ("port page", page(AWKWARD, url="http://127.0.0.1:8080/p/1.html")),
    ]
    for path in sorted((ROOT / "examples").rglob("*.html"))[:20]:
        samples.append((str(path.relative_to(ROOT)), page(path.read_bytes(), url="http://127.0.0.1:8001/x/")))
    return samples


SAMPLES = _samples()

OPTIONS: list[dict[str, Any]] = [
    {},
    {"deny_extensions": []},
    {"deny_extensions": ["html", ".PDF", "gz"]},
    {"allow_regex": [r"/p/\d+"], "deny_regex": [r"x=3"]},
    {"deny_regex": [r"%C3%A9", "caps"]},
    {"allowed_domains": ["example.com"]},
    {"allowed_domains": ["EXAMPLE.com.", "base.example"]},
]


@pytest.mark.parametrize("options", OPTIONS, ids=[str(o) or "defaults" for o in OPTIONS])
@pytest.mark.parametrize(("name", "response"), SAMPLES, ids=[name for name, _ in SAMPLES])
def test_the_same_links_as_scrapy_s_link_extractor(name: str, response: HtmlResponse, options: dict) -> None:
    request = FrontierRequest(url=response.url, appid="a", crawlid="c", **options)
    expected = reference_links(response, request)
    assert extract_links(response, request) == expected


def test_trap_limits_apply_as_before() -> None:
    response = page(AWKWARD)
    request = FrontierRequest(url=response.url, appid="a", crawlid="c")
    for limits in (LinkLimits(0, 0), LinkLimits(60, 1), LinkLimits(2083, 3)):
        assert extract_links(response, request, limits) == reference_links(response, request, limits)


def test_the_corpus_exercises_what_it_claims() -> None:
    """Guards the corpus itself: the cases it is meant to cover produce links, or none."""
    request = FrontierRequest(url="http://example.com/", appid="a", crawlid="c")
    urls = [link["url"] for link in extract_links(page(AWKWARD), request)]
    assert "http://example.com/area-link" in urls and "http://cdn.example.org/lib.html" in urls
    assert not any(u.startswith(("javascript", "mailto", "ftp", "file", "data")) for u in urls)
    assert "http://example.com/x.PDF" not in urls and "http://example.com/archive.tar.gz" not in urls
    assert [link["url"] for link in extract_links(page(BASE), request)][0] == "http://base.example/root/sub/rel"
    assert len(extract_links(page(MANY), request)) == 5000
    assert all(ext.isascii() for ext in IGNORED_EXTENSIONS)


@pytest.mark.parametrize(
    "url",
    ["http://x/a.pdf", "http://x/a.PDF", "http://x/a.tar.gz", "http://x/a.pdf/", "http://x/pdf", "http://x/a.b.c",
     "http://x/.hidden", "http://x/a.", "http://x/dir.pdf/file", "http://x/a.pdf?x=.html", "http://x/",
     "http://x/a.pdf#f", "http://x/a#b.pdf", "http://x.pdf", "http://x.pdf?a.pdf", "https://u:p@x:81/a.b/c.gz",
     "http://x/a;b.pdf", "http://x/%2Ea.pdf?"],
)  # fmt: skip
def test_the_extension_check_is_scrapy_s(url: str) -> None:
    """Both checks are Scrapy's: any URL (a spider's request), and the canonical URLs of extracted
    links by slicing (each URL here made canonical first, as extract_links has it)."""
    from crawlhive.crawler.links import _canonical_has_extension, _denied_extensions, _has_extension

    canonical = canonicalize_url(url)
    for extensions in (None, ("gz", "c", "hidden", ""), ("tar.gz",)):
        denied = _denied_extensions(extensions)
        assert _has_extension(url, denied) == url_has_any_extension(url, denied), (url, extensions)
        assert _canonical_has_extension(canonical, denied) == url_has_any_extension(canonical, denied), (
            canonical,
            extensions,
        )


_PIECES = ["/", "a", "B", "0", ".", "..", "-", "_", "~", "%41", "%zz", "?", "#", "&", "=", ";", ":", "@", "!", "é", " "]
_PIECES += ["\t", "//", "http:", "https:", "HTTP:", "javascript:", "x.pdf", ":8080", ":99999", "[::1]", "xn--"]


@settings(max_examples=400, deadline=None)
@given(
    href=st.lists(st.sampled_from(_PIECES), max_size=8).map("".join),
    host=st.sampled_from(["example.com", "127.0.0.1:8080", "a-b.example:8443", "EXAMPLE.com", "ex..ample.com"]),
)
def test_any_href_resolves_as_scrapy_resolves_it(href: str, host: str) -> None:
    """The shortcuts of crawler/links.py's _resolve never change a link: generated hrefs (paths,
    absolute URLs, odd hosts and ports, dot segments, escapes) on pages of several origins."""
    response = page(f'<html><body><a href="{href}">x</a><a href="http://{host}/{href}">y</a></body></html>',
                    url=f"http://{host}/dir/page.html")  # fmt: skip
    request = FrontierRequest(url=response.url, appid="a", crawlid="c", deny_extensions=[])
    found = extract_links(response, request)
    assert found == reference_links(response, request)
    from scrapy.utils.request import fingerprint

    from crawlhive.crawler.requests import url_fingerprint

    for link in found:
        assert url_fingerprint(link["url"]) == fingerprint(Request(link["url"])).hex()


@pytest.mark.parametrize(("name", "response"), SAMPLES, ids=[name for name, _ in SAMPLES])
def test_a_link_s_fingerprint_is_scrapy_s_fingerprint_of_its_request(name: str, response: HtmlResponse) -> None:
    """The link spider hands its links to the frontier as URLs (crawler/requests.py FrontierLinks)
    and fingerprints them without a Request: the same fingerprint as Scrapy's, so the dupefilter
    sees no difference, and the same frontier request as a yielded ``Request(url)`` gave."""
    from scrapy.utils.request import fingerprint

    from crawlhive.crawler.requests import link_children, url_fingerprint

    parent = FrontierRequest(url=response.url, appid="a", crawlid="c", maxdepth=3, attrs={"k": 1})
    for link in extract_links(response, FrontierRequest(url=response.url, appid="a", crawlid="c", deny_extensions=[])):
        request = Request(link["url"])
        assert request.url == link["url"]  # already safe: a Request would not change it
        assert url_fingerprint(link["url"]) == fingerprint(request).hex()
        (child,) = link_children(parent, [link["url"]])
        assert (child.url, child.depth, child.priority, child.attrs, child.scrapy_request) == (
            link["url"], 1, parent.priority - 10, {"k": 1}, None,
        )  # fmt: skip
        reference = dataclasses.replace(
            parent, url=link["url"], priority=parent.priority - 10, request_id="", method="GET", body=None,
            depth=parent.depth + 1, retry_times=0, domain="", scrapy_request=None,
        )  # fmt: skip
        assert child == reference and child.encode() == reference.encode()
