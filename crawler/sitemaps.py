"""Sitemaps (docs/contract.md §14): a crawl with ``sitemap: true`` also queues what its site lists.

For such a crawl the seed's fetch adds, beside the page's own links, a request for the seed host's
``robots.txt``; its ``Sitemap:`` lines become sitemap requests, a sitemap index's entries more
sitemap requests, and a sitemap's URLs requests of the crawl at depth 1, through the crawl's link
filters, caps and dedupe. A seed that is itself a sitemap or index (XML, or gzipped XML) is read the
same way. robots.txt and sitemap documents produce no item and do not count as crawled pages; they
bypass ``maxdepth`` and the link filters (a sitemap lives wherever the site puts it), but not the
crawl's scope: only http(s) URLs are ever listed here (a ``Sitemap: file:///etc/passwd`` or
``ftp://10.0.0.1/`` line is skipped), and the frontier spider middleware queues a sitemap only when
it passes :func:`~crawlhive.crawler.links.in_scope` (host length, trap rules, ``allowed_domains``).

Parsing is Scrapy's: :class:`scrapy.utils.sitemap.Sitemap` (lxml, entities not resolved) and
:func:`scrapy.utils.sitemap.sitemap_urls_from_robots`; recognising a sitemap body follows Scrapy's
``SitemapSpider`` (XML response, gzip magic number, ``.xml``/``.xml.gz`` URL). A gzipped sitemap is
inflated up to DOWNLOAD_MAXSIZE; a larger one is a crawl dead letter ``response too large: …``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.http import XmlResponse
from scrapy.utils._compression import _DecompressionMaxSizeExceeded
from scrapy.utils.gz import gunzip, gzip_magic_number
from scrapy.utils.sitemap import Sitemap, sitemap_urls_from_robots

from crawlhive.utils.frontier.recrawl import w3c_date

if TYPE_CHECKING:
    from scrapy.http import Response

#: Request meta key of a sitemap-discovery request: ``"robots"`` or ``"sitemap"``.
SITEMAP = "crawlhive_sitemap"
#: Most sitemap URLs taken from one robots.txt, and most entries taken from one sitemap (the
#: protocol's own limit is 50,000 URLs per sitemap).
MAX_ENTRIES = 50_000


class SitemapTooLarge(ValueError):
    """A gzipped sitemap inflates past DOWNLOAD_MAXSIZE."""


@dataclass
class Discovered:
    """What a robots.txt or sitemap document lists."""

    pages: list[str] = field(default_factory=list)
    """URLs to crawl (depth 1)."""
    sitemaps: list[str] = field(default_factory=list)
    """More sitemap documents to read."""
    lastmod: dict[str, int] = field(default_factory=dict)
    """Page URL -> its ``<lastmod>`` (epoch s), for the pages that have a readable one (§19.7)."""


def robots_request(seed_url: str) -> Request:
    """The request for the robots.txt of *seed_url*'s host, marked as sitemap discovery."""
    parts = urlsplit(seed_url)
    return Request(
        f"{parts.scheme}://{parts.netloc}/robots.txt",
        meta={SITEMAP: "robots", "dont_obey_robotstxt": True},
        dont_filter=False,
    )


def sitemap_request(url: str) -> Request:
    """The request for a sitemap document."""
    return Request(url, meta={SITEMAP: "sitemap"})


def sitemap_body(response: Response, max_size: int) -> bytes | None:
    """The XML of *response* if it is a sitemap (see the module docstring), else None.

    Raises:
        SitemapTooLarge: gzipped, and larger than *max_size* once inflated.
    """
    if gzip_magic_number(response):
        try:
            return gunzip(response.body, max_size=max_size)
        except _DecompressionMaxSizeExceeded as exc:
            raise SitemapTooLarge(f"more than {max_size} bytes once decoded") from exc
    if isinstance(response, XmlResponse) or response.url.endswith((".xml", ".xml.gz")):
        return response.body
    return None


def discover(response: Response, kind: str | None, max_size: int) -> Discovered | None:
    """What *response* lists: a robots.txt (*kind* ``"robots"``), or a sitemap or index (any
    *kind*, a seed included); None when it is neither (an ordinary page).

    Raises:
        SitemapTooLarge: see :func:`sitemap_body`.
    """
    if kind == "robots":
        sitemaps = []
        for url in sitemap_urls_from_robots(response.body, base_url=response.url):
            if url.startswith(("http://", "https://")):  # never ftp:, file:, data:… (module docstring)
                sitemaps.append(url)
                if len(sitemaps) >= MAX_ENTRIES:
                    break
        return Discovered(sitemaps=sitemaps)
    body = sitemap_body(response, max_size)
    if body is None:
        return None if kind is None else Discovered()
    try:
        document = Sitemap(body)
    except (StopIteration, ValueError, SyntaxError):  # empty or not XML at all
        return None if kind is None else Discovered()
    found = Discovered()
    if document.type not in ("urlset", "sitemapindex"):
        return None if kind is None else found
    target = found.pages if document.type == "urlset" else found.sitemaps
    for entry in document:
        location = str(entry.get("loc") or "").strip()
        if location.startswith(("http://", "https://")):
            target.append(location)
            modified = w3c_date(entry.get("lastmod")) if target is found.pages else 0
            if modified:
                found.lastmod[location] = modified
            if len(target) >= MAX_ENTRIES:
                break
    return found
