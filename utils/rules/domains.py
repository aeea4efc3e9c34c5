"""Domain bucketing (docs/contract.md §3.2): the domain a URL is queued, throttled and reported under.

tldextract is used with its **bundled** public-suffix snapshot only: no download is ever attempted
(``suffix_list_urls=()``), and no cache directory is written. It is imported on first use (it
brings requests and urllib3 along: a seventh of a second of the start of a process that never
buckets a URL, such as a cleaner).
"""

from __future__ import annotations

import ipaddress
from functools import cache, lru_cache
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from crawlhive.utils.contract.hosts import host_problem

if TYPE_CHECKING:
    import tldextract


@cache
def _extractor(private: bool) -> tldextract.TLDExtract:
    """The public suffix list's extractor; with *private*, the list with its private section
    (github.io, blogspot.com, …): who owns a site, as opposed to the bucket it is queued and
    throttled in (:func:`tenant_site`)."""
    import tldextract

    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None, include_psl_private_domains=private)


def normalise_host(host: str) -> str:
    """Lower-case, IDNA (punycode) form, no trailing dot, no IPv6 brackets; '' if unusable (an
    over-long host included: :func:`host_problem`)."""
    host = host.strip().rstrip(".").lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or host_problem(host):
        return ""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


@lru_cache(maxsize=65536)
def domain_of_host(host: str) -> str:
    """The bucket of a host name: an IP literal itself, else the registered domain, else the host."""
    host = normalise_host(host)
    if not host:
        return ""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    parts = _extractor(False)(host)
    if parts.domain and parts.suffix:
        return f"{parts.domain}.{parts.suffix}"
    return host


@lru_cache(maxsize=65536)
def tenant_site(host: str) -> str | None:
    """The site of *host* when it is one tenant among many of a shared private suffix, else None.

    Buckets ignore the public suffix list's private section (§3.2: ``mallory.github.io`` and
    ``alice.github.io`` share the bucket ``github.io``), but those are different owners' sites: what
    one of them asks for itself (``Retry-After``, ``Crawl-delay``) must not park its siblings. This
    names the site such a request speaks for (``mallory.github.io``); None when the host's site is
    its bucket (``www.example.com`` speaks for ``example.com``), which then applies to the bucket.
    """
    host = normalise_host(host)
    if not host:
        return None
    parts = _extractor(True)(host)
    if not (parts.domain and parts.suffix):
        return None
    site = f"{parts.domain}.{parts.suffix}"
    return None if site == domain_of_host(host) else site


def domain_of_url(url: str) -> str:
    """The bucket of an absolute URL (the port is ignored); '' when the URL has no host."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return ""
    return domain_of_host(host)


#: Ports a URL without one uses, by scheme.
DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(url: str) -> str:
    """``scheme://host:port`` of an absolute URL, lower case with the port always written: two URLs
    share an origin exactly when scheme, host and port are equal (docs/contract.md §10.6). '' when
    the URL has no host or a malformed port."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return ""
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".")
    if not host:
        return ""
    if port is None:
        port = DEFAULT_PORTS.get(scheme, 0)
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}"
