"""Link extraction and the link filters of a crawl (docs/contract.md §3.5).

Scrapy's ``LinkExtractor`` does the work (``<a>``/``<area>`` ``href``, absolute URLs,
``deny_extensions`` on the last path segment); this module maps a crawl's options onto it, matches
``allow_regex``/``deny_regex`` on the absolute URL as Scrapy's ``allow``/``deny`` would (search,
deny wins) but with RE2 (:mod:`crawlhive.utils.patterns`: Scrapy compiles them with Python's
backtracking ``re``, which a stranger's pattern can stall), keeps ``http``/``https`` links, applies
``allowed_domains`` to the host (Scrapy's ``allow_domains`` compares the netloc, port included, so
``127.0.0.1`` would never match ``127.0.0.1:8080``), drops crawl traps (links too long, or whose
path repeats a segment: :class:`LinkLimits`), canonicalises them (``w3lib``'s ``canonicalize_url``,
which also drops the fragment) and keeps each canonical URL once, in document order. Extractors
are cached per filter combination, since all pages of a crawl share one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypedDict
from urllib.parse import urlsplit

from scrapy.http import TextResponse
from scrapy.linkextractors import IGNORED_EXTENSIONS, LinkExtractor
from scrapy.utils.url import url_has_any_extension
from w3lib.url import canonicalize_url

from crawlhive.utils.patterns import search_any

if TYPE_CHECKING:
    from scrapy.http import Response

    from crawlhive.utils.frontier import FrontierRequest


@dataclass(frozen=True)
class LinkLimits:
    """The crawl-trap rules of the link filters (docs/contract.md §10.7), from the settings
    LINK_MAX_URL_LENGTH and LINK_MAX_SEGMENT_REPEATS (0 = rule off)."""

    max_url_length: int = 2083
    max_segment_repeats: int = 3

    @classmethod
    def from_settings(cls, settings: Any) -> LinkLimits:
        """From crawlhive or Scrapy settings (both answer ``getint``)."""
        return cls(settings.getint("LINK_MAX_URL_LENGTH"), settings.getint("LINK_MAX_SEGMENT_REPEATS"))

    def is_trap(self, url: str) -> bool:
        """*url* is longer than allowed, or its path holds one segment more than allowed."""
        if self.max_url_length and len(url) > self.max_url_length:
            return True
        if self.max_segment_repeats:
            try:
                path = urlsplit(url).path
            except ValueError:
                return True
            counts = Counter(segment for segment in path.split("/") if segment)
            if counts and max(counts.values()) > self.max_segment_repeats:
                return True
        return False


DEFAULT_LIMITS = LinkLimits()


class FoundLink(TypedDict):
    """One entry of an item's ``links`` (docs/contract.md §5)."""

    url: str
    text: str


@lru_cache(maxsize=512)
def link_extractor(deny_extensions: tuple[str, ...] | None) -> LinkExtractor:
    """The extractor for a crawl's ``deny_extensions`` (``None`` = the option is unset).

    Entries are compared case-insensitively without their leading dot; ``None`` keeps Scrapy's
    default list of ignored extensions and ``()`` denies none.
    """
    extensions = None if deny_extensions is None else [e.lstrip(".").lower() for e in deny_extensions if e.strip(".")]
    return LinkExtractor(
        deny_extensions=extensions,
        tags=("a", "area"),
        attrs=("href",),
        unique=True,
    )


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
    """``.ext`` forms of a crawl's ``deny_extensions`` (``None``: Scrapy's default list), as
    :func:`link_extractor` reads them."""
    names = IGNORED_EXTENSIONS if deny_extensions is None else [e.lstrip(".").lower() for e in deny_extensions]
    return frozenset(f".{e}" for e in names if e)


def link_allowed(url: str, request: FrontierRequest, limits: LinkLimits = DEFAULT_LIMITS) -> bool:
    """Whether a request a spider yields for *url* passes the link filters of *request*'s crawl,
    as :func:`extract_links` applies them to extracted links (docs/contract.md §11)."""
    if not url.startswith(("http://", "https://")) or limits.is_trap(url):
        return False
    allow, deny = request.allow_regex, request.deny_regex
    if (allow and not search_any(tuple(allow), url)) or (deny and search_any(tuple(deny), url)):
        return False
    allowed = allowed_domains(request)
    if allowed and not host_allowed(url, allowed):
        return False
    denied = _denied_extensions(_tuple(request.deny_extensions))
    return not (denied and url_has_any_extension(url, denied))


def extract_links(response: Response, request: FrontierRequest, limits: LinkLimits = DEFAULT_LIMITS) -> list[FoundLink]:
    """The links of *response* that pass the filters of *request*'s crawl and the trap rules of
    *limits*, in document order.

    Non-text responses have none.
    """
    if not isinstance(response, TextResponse):
        return []
    extractor = link_extractor(_tuple(request.deny_extensions))
    allow = tuple(request.allow_regex or ())
    deny = tuple(request.deny_regex or ())
    allowed = allowed_domains(request)
    found: dict[str, FoundLink] = {}
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
