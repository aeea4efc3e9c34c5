"""Link extraction and the link filters of a crawl (docs/contract.md §3.5).

The links of a page are what Scrapy's ``LinkExtractor`` would find (``<a>``/``<area>`` ``href``,
``<base href>``, absolute URLs, ``deny_extensions`` on the path), computed here on the page's lxml
tree for a quarter of the CPU (:func:`extract_links` says how; a test pins the equality). The
crawl's options are applied on top: ``allow_regex``/``deny_regex`` matched on the absolute URL as
Scrapy's ``allow``/``deny`` would (search, deny wins) but with RE2 (:mod:`crawlhive.utils.rules.patterns`:
Scrapy compiles them with Python's backtracking ``re``, which a stranger's pattern can stall); only
``http``/``https`` links; ``allowed_domains`` on the host (Scrapy's ``allow_domains`` compares the
netloc, port included, so ``127.0.0.1`` would never match ``127.0.0.1:8080``); crawl traps dropped
(links too long, or whose path repeats a segment: :class:`LinkLimits`); each link canonicalised
(``w3lib``'s ``canonicalize_url``, which also drops the fragment) and kept once, in document order.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypedDict
from urllib.parse import urljoin, urlsplit

from lxml import etree
from scrapy.http import TextResponse
from scrapy.linkextractors import IGNORED_EXTENSIONS
from scrapy.utils.response import get_base_url
from w3lib.html import HTML5_WHITESPACE
from w3lib.url import canonicalize_url, safe_url_string

from crawlhive.utils.contract.hosts import host_problem
from crawlhive.utils.rules.patterns import DEFAULT_PATTERN_LIMITS, PatternLimits, search_any

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.http import Response

    from crawlhive.utils.frontier import FrontierRequest


@dataclass(frozen=True)
class LinkLimits:
    """The crawl-trap rules of the link filters (docs/contract.md §10.7), from the settings
    LINK_MAX_URL_LENGTH, LINK_MAX_SEGMENT_REPEATS and LINK_MAX_PER_PAGE (0 = rule off)."""

    max_url_length: int = 2083
    max_segment_repeats: int = 3
    max_per_page: int = 5000
    """LINK_MAX_PER_PAGE: links kept from one page (0 = no cap); :func:`extract_links` stops there."""
    #: The bounds a crawl's ``allow_regex`` / ``deny_regex`` are compiled within (SCHEMA_REGEX_*).
    patterns: PatternLimits = DEFAULT_PATTERN_LIMITS

    @classmethod
    def from_settings(cls, settings: Any) -> LinkLimits:
        """From crawlhive or Scrapy settings (both answer ``getint``)."""
        return cls(
            settings.getint("LINK_MAX_URL_LENGTH"),
            settings.getint("LINK_MAX_SEGMENT_REPEATS"),
            settings.getint("LINK_MAX_PER_PAGE"),
            PatternLimits.from_settings(settings),
        )

    def is_trap(self, url: str) -> bool:
        """*url* is longer than allowed, or its path holds one segment more than allowed."""
        if self.max_url_length and len(url) > self.max_url_length:
            return True
        if self.max_segment_repeats:
            if url.count("/") - 2 <= self.max_segment_repeats and url.startswith(("http://", "https://")):
                return False  # no more path segments than the limit (most links): no split needed
            try:
                path = urlsplit(url).path
            except ValueError:
                return True
            segments = [segment for segment in path.split("/") if segment]
            # (no segment can repeat too often in a path of that few: most links end here)
            if len(segments) > self.max_segment_repeats and len(set(segments)) < len(segments):
                return max(Counter(segments).values()) > self.max_segment_repeats
        return False


DEFAULT_LIMITS = LinkLimits()


class FoundLink(TypedDict):
    """One entry of an item's ``links`` (docs/contract.md §5)."""

    url: str
    text: str


def host_allowed(url: str, allowed: tuple[str, ...]) -> bool:
    """The host of *url* equals an entry of *allowed* or ends with ``.`` + entry (case-insensitive)."""
    try:
        host = (urlsplit(url).hostname or "").rstrip(".")
    except ValueError:
        return False
    return any(host == d or host.endswith("." + d) for d in allowed)


def allowed_domains(request: FrontierRequest) -> tuple[str, ...]:
    """A crawl's ``allowed_domains`` as :func:`host_allowed` compares them (lower case, no final dot)."""
    return tuple(d.lower().rstrip(".") for d in request.allowed_domains or ())


def _tuple(values: list[str] | None) -> tuple[str, ...] | None:
    return None if values is None else tuple(values)


@lru_cache(maxsize=512)
def _denied_extensions(deny_extensions: tuple[str, ...] | None) -> frozenset[str]:
    """``.ext`` forms of a crawl's ``deny_extensions`` (``None``: Scrapy's default list), compared
    case-insensitively without their leading dot."""
    names = IGNORED_EXTENSIONS if deny_extensions is None else [e.lstrip(".").lower() for e in deny_extensions]
    return frozenset(f".{e}" for e in names if e)


def in_scope(url: str, request: FrontierRequest, limits: LinkLimits = DEFAULT_LIMITS) -> bool:
    """Whether *url* may be queued for *request*'s crawl at all: an http(s) URL, not longer than
    LINK_MAX_URL_LENGTH nor a crawl trap, whose host may be a host name (:func:`host_problem`,
    checked before any IDNA step), inside the crawl's ``allowed_domains`` when it has some. What
    every URL a crawl queues passes, sitemap documents included (docs/contract.md §10.7, §14)."""
    if not url.startswith(("http://", "https://")) or limits.is_trap(url):
        return False
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    if not host or host_problem(host):
        return False
    allowed = allowed_domains(request)
    return not allowed or host_allowed(url, allowed)


def link_allowed(url: str, request: FrontierRequest, limits: LinkLimits = DEFAULT_LIMITS) -> bool:
    """Whether a request a spider yields for *url* passes the link filters of *request*'s crawl,
    as :func:`extract_links` applies them to extracted links (docs/contract.md §11)."""
    if not in_scope(url, request, limits):
        return False
    allow, deny = request.allow_regex, request.deny_regex
    rules = limits.patterns  # compiled on the calling (reactor) thread: cheap within these bounds
    if (allow and not search_any(tuple(allow), url, rules)) or (deny and search_any(tuple(deny), url, rules)):
        return False
    denied = _denied_extensions(_tuple(request.deny_extensions))
    return not (denied and _has_extension(url, denied))


def extract_links(
    response: Response,
    request: FrontierRequest,
    limits: LinkLimits = DEFAULT_LIMITS,
    on_capped: Callable[[int], None] | None = None,
) -> list[FoundLink]:
    """The links of *response* that pass the filters of *request*'s crawl and the trap rules of
    *limits*, in document order: each canonical URL once, with the text of its first link; at most
    ``limits.max_per_page`` of them (the links after the last one kept are not examined, and
    *on_capped* is called with their number).

    A hostile page costs time linear in its size: an ``href`` longer than LINK_MAX_URL_LENGTH, or
    whose host cannot be a host name (:func:`~crawlhive.utils.contract.hosts.host_problem`: over 253
    characters or a label over 63), is dropped before any IDNA or w3lib step (IDNA-encoding an
    8,000-character Unicode label took 22 s); a page whose ``<base>`` names such a host has no
    links; links to more than MAX_IDN_HOSTS_PER_PAGE distinct non-ASCII hosts are dropped and
    counted with the links over the cap.

    Non-text responses have none. The same links as Scrapy's ``LinkExtractor(tags=("a", "area"),
    attrs=("href",))`` followed by the crawl's filters and ``canonicalize_url`` (what this module
    did until 2026-11; ``tests/unit/test_link_extraction.py`` pins the equality on a corpus of
    awkward HTML), for about a quarter of the CPU: the tree is walked for ``a`` and ``area`` only
    (lxml's C iteration, not a Python test per element), the common links (a simple path or
    absolute URL) are recognised by a regular expression instead of being joined, made safe and
    canonicalised (:func:`_resolve`; the others take Scrapy's steps), rejected links cost no text
    extraction, and ``deny_extensions`` is a set lookup on the path's suffixes rather than an
    ``endswith`` per extension (about 100 by default).
    """
    if not isinstance(response, TextResponse):
        return []
    if names_impossible_host(response.text[:_BASE_SCAN], "<base"):
        return []  # its <base> names no possible host (and reading it would cost IDNA)
    root = response.selector.root
    if not isinstance(root, etree._Element):
        return []
    base = get_base_url(response)
    encoding = response.encoding
    allow = tuple(request.allow_regex or ())
    deny = tuple(request.deny_regex or ())
    rules = limits.patterns  # compiled on the reactor thread: cheap within these bounds (utils/rules/patterns.py)
    allowed = allowed_domains(request)
    denied = _denied_extensions(_tuple(request.deny_extensions))
    origin = _simple_origin(base) if base == response.url else None  # a <base>: no shortcut
    found: dict[str, FoundLink] = {}
    cap = limits.max_per_page
    idn_hosts: set[str] = set()
    dropped = 0
    elements = root.iter(*_LINK_TAGS)
    for element in elements:
        href = element.get("href")
        if href is None:
            continue
        if cap and len(found) >= cap:
            dropped += 1 + sum(1 for rest in elements if rest.get("href") is not None)
            break
        resolved = _resolve(
            href.strip(HTML5_WHITESPACE), base, response.url, origin, encoding, limits.max_url_length, idn_hosts
        )
        if resolved is _OVER_BUDGET:
            dropped += 1
            continue
        if resolved is None:
            continue
        absolute, url = resolved
        if url in found:
            continue
        if denied and _canonical_has_extension(url, denied):
            continue
        if (allow and not search_any(allow, absolute, rules)) or (deny and search_any(deny, absolute, rules)):
            continue
        if allowed and not host_allowed(url, allowed):
            continue
        if limits.is_trap(url):
            continue
        found[url] = {"url": url, "text": (_text_of(element) or "").strip()}
    if dropped and on_capped is not None:
        on_capped(dropped)
    return list(found.values())


#: Characters of a page Scrapy reads its ``<base>`` (and ``<meta http-equiv="refresh">``) from.
_BASE_SCAN = 4096
#: Distinct non-ASCII hosts one page's links may name. Even a host within the limits costs IDNA
#: up to ~4 ms a label (CPython's punycode is quadratic), so 5,000 links of distinct maximal
#: Unicode hosts would still hold the reactor for a minute; beyond this many, such links are
#: dropped and counted with the links over LINK_MAX_PER_PAGE (about 1.5 s at worst).
MAX_IDN_HOSTS_PER_PAGE = 100
#: What :func:`_resolve` answers for a link dropped for MAX_IDN_HOSTS_PER_PAGE.
_OVER_BUDGET: tuple[str, str] = ("", "")
#: The authority after ``//`` (or backslashes, which WHATWG parsing and w3lib read as slashes).
_AUTHORITY = re.compile(r"[/\\]{2}([^/\\?#\s\"'<>]*)")
_TAB_OR_NEWLINE = str.maketrans("", "", "\t\n\r")


def names_impossible_host(text: str, marker: str) -> bool:
    """Whether *text* (the start of a page) holds *marker* (``"<base"``, ``"refresh"``; any case)
    and a URL authority whose host cannot be a host name (:func:`host_problem`).

    Checked before Scrapy or w3lib read a ``<base href>`` or a meta refresh from *text*: they
    IDNA-encode its host, quadratic in the length of a label (a 4,000-character label in a
    ``<base>`` held the reactor for seconds). Linear in *text*.
    """
    if marker not in text.lower():
        return False
    for match in _AUTHORITY.finditer(text.translate(_TAB_OR_NEWLINE)):
        host = match.group(1).rpartition("@")[2]
        if host.startswith("["):
            continue  # an IPv6 literal: no IDNA
        host = host.partition(":")[0]
        if host and host_problem(host):
            return True
    return False


#: An absolute http(s) URL that ``canonicalize_url`` leaves as it is: lower-case host, a path of
#: characters it does not quote, no ``;`` (path parameters, which it rewrites), no query or
#: fragment (dot segments are excluded by the caller).
_SIMPLE_URL = re.compile(r"https?://[a-z0-9]+(?:[.-][a-z0-9]+)*(?::[1-9][0-9]{0,3})?/[A-Za-z0-9\-._~!$&'()*+,=:@/]*")
#: A path-absolute reference (``/x/y``, not ``//host``) made only of such characters.
_SIMPLE_PATH = re.compile(r"/(?!/)[A-Za-z0-9\-._~!$&'()*+,=:@/]*")
_SIMPLE_ORIGIN = re.compile(r"https?://[a-z0-9]+(?:[.-][a-z0-9]+)*(?::[1-9][0-9]{0,4})?")


def _simple_origin(base: str) -> str | None:
    """``scheme://host[:port]`` of *base* when a simple path joined to it is already canonical."""
    parts = urlsplit(base)
    origin = f"{parts.scheme}://{parts.netloc}"
    return origin if _SIMPLE_ORIGIN.fullmatch(origin) else None


def _resolve(
    href: str,
    base: str,
    page_url: str,
    origin: str | None,
    encoding: str,
    max_length: int = 0,
    idn_hosts: set[str] | None = None,
) -> tuple[str, str] | None:
    """``(absolute URL, canonical URL)`` of the link *href* on the page *page_url* whose base URL is
    *base*, or None when it is not an http(s) link or does not parse, when *href* is longer than
    *max_length* (0: no limit), or when its host cannot be a host name (checked on the joined URL
    before any IDNA step, whose cost is the square of a label's length). A non-ASCII host is added
    to *idn_hosts*; once that holds MAX_IDN_HOSTS_PER_PAGE, a link to another one is
    :data:`_OVER_BUDGET`.

    The steps of Scrapy's extractor (join to the base, make safe in the page's encoding, join to
    the page's URL), then ``canonicalize_url``; except for the common links whose result is known
    without them (a simple path on a simple origin, a simple absolute URL), which one regular
    expression recognises instead of about 15 µs of URL parsing and quoting.
    """
    if max_length and len(href) > max_length:
        return None
    if "/." not in href:  # dot segments need resolving
        if origin is not None and _SIMPLE_PATH.fullmatch(href):
            return origin + href, origin + href
        if _SIMPLE_URL.fullmatch(href):
            netloc = href.split("/", 3)[2]
            return None if host_problem(netloc.partition(":")[0]) else (href, href)
    try:
        joined = urljoin(base, href)
        host = urlsplit(joined.replace("\\", "/")).hostname  # w3lib reads a backslash as a slash
        if host and host_problem(host):
            return None
        if host and idn_hosts is not None and not host.isascii() and host not in idn_hosts:
            if len(idn_hosts) >= MAX_IDN_HOSTS_PER_PAGE:
                return _OVER_BUDGET
            idn_hosts.add(host)
        absolute = urljoin(page_url, safe_url_string(joined, encoding=encoding))
    except ValueError:
        return None  # a bogus link, as Scrapy skips it
    if not absolute.startswith(("http://", "https://")):
        return None
    try:
        return absolute, canonicalize_url(absolute)
    except ValueError:
        return None


#: The elements whose ``href`` is a link (with the XHTML namespace too, as Scrapy strips it).
_LINK_TAGS = ("a", "area", "{http://www.w3.org/1999/xhtml}a", "{http://www.w3.org/1999/xhtml}area")
_text_of = etree.XPath("string()")


def _has_extension(url: str, extensions: frozenset[str]) -> bool:
    """Scrapy's ``url_has_any_extension`` (the lower-cased path ends with one of *extensions*,
    each ``.ext``) as set lookups: only a suffix starting at a dot of the last segment can match."""
    path = urlsplit(url).path.lower()
    return _segment_has_extension(path[path.rfind("/") + 1 :], extensions)


def _canonical_has_extension(url: str, extensions: frozenset[str]) -> bool:
    """:func:`_has_extension` of a canonical URL (:func:`_resolve`'s): ``scheme://authority``, then
    the path up to a ``?`` (no fragment, no white space), so the path's last segment is found by
    slicing rather than ``urlsplit`` (4 % of the crawler's CPU on the crawl bench)."""
    end = url.find("?")
    if end == -1:
        end = len(url)
    slash = url.rfind("/", 0, end)
    if slash < url.find("//") + 2:  # no path: the last "/" is the scheme's
        return False
    return _segment_has_extension(url[slash + 1 : end].lower(), extensions)


def _segment_has_extension(segment: str, extensions: frozenset[str]) -> bool:
    """Whether the last path *segment* ends with one of *extensions*. Its parameters (from a
    ``;``) are not part of it, as Scrapy's ``urlparse`` reads a path (``/a;b.pdf`` is ``/a``)."""
    segment = segment.partition(";")[0]
    start = segment.find(".")
    while start != -1:
        if segment[start:] in extensions:
            return True
        start = segment.find(".", start + 1)
    return False
