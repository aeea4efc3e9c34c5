"""Frontier requests <-> Scrapy requests.

A popped :class:`~crawlhive.utils.frontier.FrontierRequest` becomes a ``scrapy.Request`` whose meta
carries its :class:`~crawlhive.crawler.runtime.LeaseContext` (:data:`CONTEXT`). A request a spider
yields becomes a child ``FrontierRequest`` that inherits its crawl's options (docs/contract.md §3): depth + 1,
priority - 10, ``GET`` without a body unless the spider built something else. Such a custom request
travels whole: ``scrapy.Request.to_dict`` made JSON-safe (bytes as latin-1 text) in
``FrontierRequest.scrapy_request`` and rebuilt with ``request_from_dict``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.utils.request import request_from_dict

from crawlhive.crawler.settings import FETCHED_SCHEMES
from crawlhive.utils.frontier import FrontierRequest
from crawlhive.utils.rules.domains import domain_of_url

if TYPE_CHECKING:
    from scrapy import Spider

    from crawlhive.crawler.leases import LeaseContext

CONTEXT = "crawlhive_lease"
"""Request meta key of the :class:`LeaseContext` of a request taken from the frontier."""

FAILURE = "crawlhive_failure"
"""Request meta key a crawlhive middleware sets to end a request for good: the ``error`` of its crawl
dead letter (``blocked network: …``, ``response too large: …``). Such a request is never retried."""

RETRY_AFTER = "crawlhive_retry_after"
"""Request meta key: seconds a response's ``Retry-After`` asked for (set by the Retry-After
middleware; a retry waits at least that long, docs/contract.md §14)."""

FRONTIER = "frontier"
"""Request meta key a spider may set on a request it yields, to override what the child inherits:
``{"attrs": {...}, "spiderid": "other", "priority": 5}`` (the wandering spider sets ``attrs``)."""

logger = logging.getLogger(__name__)

#: Meta keys already reported as not JSON values (one warning per key per process).
_DROPPED_META_KEYS: set[str] = set()

#: Meta keys Scrapy's own components set; never part of a serialised request.
_SCRAPY_META = frozenset(
    {
        CONTEXT,
        FAILURE,
        FRONTIER,
        RETRY_AFTER,
        "depth",
        "retry_times",
        "download_slot",
        "download_latency",
        "download_timeout",
        "redirect_times",
        "redirect_ttl",
        "redirect_urls",
        "redirect_reasons",
        "is_start_request",
        "_slot_request",
    }
)


def context_of(request: Request | None) -> LeaseContext | None:
    """The lease context of *request* (or of a response's request), if it came from the frontier."""
    if request is None:
        return None
    context: LeaseContext | None = request.meta.get(CONTEXT)
    return context


def end_for_good(request: Request, error: str) -> None:
    """Mark *request* as failed for good with dead-letter *error*: Scrapy's ``RetryMiddleware``
    leaves it alone (``dont_retry``) and the lease outcome uses *error* (:data:`FAILURE`)."""
    request.meta[FAILURE] = error
    request.meta["dont_retry"] = True


def unfetchable(url: str) -> str | None:
    """Why *url* must never be fetched (its scheme is not http or https, or it does not parse), or
    None. The reason names the scheme, cut short, never the whole URL (it can be megabytes)."""
    if url[:8].lower().startswith(("http://", "https://")):
        return None  # the common case, without parsing the URL
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:
        return "not a URL that parses"
    if scheme in FETCHED_SCHEMES:
        return None
    shown = repr(scheme[:20]) if scheme else "none"
    return f"not an http(s) URL (scheme {shown}): crawlers fetch http and https only"


#: HTTP methods a failed request may be sent again with: the idempotent ones (RFC 9110 §9.2.2).
#: A request with another method (``POST``, ``PATCH``…) is never retried, unless its Scrapy meta
#: says ``dont_retry: False`` (a user spider's request).
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})


def _user_meta(request: Request) -> dict[str, Any]:
    return {k: v for k, v in request.meta.items() if k not in _SCRAPY_META and not k.startswith("playwright")}


def is_plain(request: Request, spider: Spider) -> bool:
    """True if *request* is a bare ``GET`` of its URL handled by ``spider.parse``: then the child
    needs no serialised request, only its URL."""
    return (
        request.method == "GET"
        and not request.body
        and not request.headers
        and not request.cookies
        and (request.callback is None or getattr(request.callback, "__name__", None) == "parse")
        and request.errback is None
        and not request.cb_kwargs
        and not request.flags
        and not _user_meta(request)
        and type(request) is Request
    )


class CannotTravel(ValueError):
    """A request a spider yielded cannot be stored in the frontier (docs/contract.md §11), or must
    never be fetched (:func:`unfetchable`)."""


class Unfetchable(CannotTravel):
    """A request a spider yielded is not an http(s) request: it is dropped, never queued."""


def _json_safe(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return False
    return True


def request_to_json(request: Request, spider: Spider) -> dict[str, Any]:
    """``request.to_dict`` without Scrapy's own meta keys, with bytes as latin-1 text (JSON-safe).

    A ``meta`` entry that is not a JSON value is left out (logged once per key); ``cb_kwargs``
    that are not JSON values, or a callback that is not a method of the spider, raise.

    Raises:
        CannotTravel: the request cannot be serialised (the message says why).
    """
    meta = _user_meta(request)
    for key in [k for k, v in meta.items() if not _json_safe(v)]:
        del meta[key]
        if key not in _DROPPED_META_KEYS:
            _DROPPED_META_KEYS.add(key)
            logger.warning("request meta %r is not a JSON value: left out of frontier requests (§11)", key)
    if request.cb_kwargs and not _json_safe(request.cb_kwargs):
        raise CannotTravel(f"{request.url}: cb_kwargs are not JSON values")
    try:
        clean = request.replace(meta=meta)
        data = clean.to_dict(spider=spider)
    except ValueError as exc:  # Scrapy: a callback that is not a method of the spider
        raise CannotTravel(f"{request.url}: {exc}") from exc
    data = clean.to_dict(spider=spider)
    data["headers"] = {
        k.decode("latin-1"): [v.decode("latin-1") for v in values] for k, values in data.get("headers", {}).items()
    }
    data["body"] = data.get("body", b"").decode("latin-1")
    return data


def request_from_json(data: dict[str, Any], spider: Spider) -> Request:
    """Inverse of :func:`request_to_json`."""
    restored = dict(data)
    restored["headers"] = {
        k.encode("latin-1"): [v.encode("latin-1") for v in values] for k, values in data.get("headers", {}).items()
    }
    restored["body"] = data.get("body", "").encode("latin-1")
    restored["meta"] = dict(data.get("meta") or {})
    return request_from_dict(restored, spider=spider)


def cookie_pairs(request: FrontierRequest) -> dict[str, str]:
    """A crawl's cookies (docs/contract.md §3.7): ``cookie`` split on ``;`` into ``name=value``
    pairs (pieces without ``=`` ignored), merged with ``cookies`` (which wins a clash)."""
    pairs: dict[str, str] = {}
    for piece in (request.cookie or "").split(";"):
        name, sep, value = piece.strip().partition("=")
        if sep and name.strip():
            pairs[name.strip()] = value.strip()
    pairs.update(request.cookies or {})
    return pairs


def is_seed(request: FrontierRequest) -> bool:
    """A seed (or its retry): depth 0 and not made by a spider."""
    return request.depth == 0 and request.scrapy_request is None


def scrapy_request(request: FrontierRequest, spider: Spider, context: LeaseContext) -> Request:
    """The Scrapy request that fetches the frontier *request*.

    A seed gets its ``method`` and ``body`` (UTF-8); crawl headers, cookies and user agent are added
    per fetch by :class:`~crawlhive.crawler.middlewares.shaping.RequestShapingMiddleware`. A request whose
    method is not idempotent (:data:`IDEMPOTENT_METHODS`: a ``POST``, say) is never retried
    (``dont_retry``): a failed one ends as its response's item or a dead letter, never replayed.
    """
    if request.scrapy_request is not None:
        built = request_from_json(request.scrapy_request, spider)
    elif is_seed(request):
        body = request.body.encode("utf-8") if request.body is not None else b""
        built = Request(request.url, method=request.method, body=body, dont_filter=True)
    else:
        built = Request(request.url, dont_filter=True)
    built.meta[CONTEXT] = context
    if built.method.upper() not in IDEMPOTENT_METHODS:
        # never replayed by Scrapy's RetryMiddleware (a user spider's explicit meta wins)
        built.meta.setdefault("dont_retry", True)
    built.meta["retry_times"] = request.retry_times
    built.meta["depth"] = request.depth
    built.priority = request.priority
    return built


class FrontierLinks:
    """What a built-in spider yields for its page's links instead of one ``scrapy.Request`` each:
    their canonical URLs, already through the crawl's filters (``crawler/links.py``). The frontier
    spider middleware (nearest the spider) turns them into frontier requests with
    :func:`link_children` and :func:`url_fingerprint`; no other middleware sees them. A ``Request``
    per link cost its URL made safe again, and its fingerprint canonicalised it once more: about a
    fifth of a crawler's CPU on the bench site."""

    __slots__ = ("urls",)

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls


def link_children(parent: FrontierRequest, urls: list[str]) -> list[FrontierRequest]:
    """:func:`child_request` of a plain ``GET`` of each of *urls*, the links of *parent*'s page.

    Each is a copy of one set of fields made once for the page (the parent's, with what every
    link changes), given its URL and queue bucket (looked up by the URL's host), without running
    the constructor (``dataclasses.replace`` runs it whole, 8 µs a link): 0.6 µs a link, against
    1.5 when each link copied and updated the parent's fields itself; a page has dozens."""
    fields = dict(parent.__dict__)
    fields.update(
        priority=parent.priority - 10,
        request_id="",
        method="GET",
        body=None,
        depth=parent.depth + 1,
        retry_times=0,
        scrapy_request=None,
    )
    new = FrontierRequest.__new__
    children = []
    for url in urls:
        own = fields.copy()
        own["url"] = url
        own["domain"] = (
            _domain_of_netloc(url.split("/", 3)[2]) if url.startswith(("http://", "https://")) else domain_of_url(url)
        )
        child = new(FrontierRequest)
        child.__dict__ = own
        children.append(child)
    return children


@functools.lru_cache(maxsize=4096)
def _domain_of_netloc(netloc: str) -> str:
    """The queue bucket (docs/contract.md §3.2) of URLs with authority *netloc*."""
    return domain_of_url(f"http://{netloc}/")


def url_fingerprint(url: str) -> str:
    """Scrapy's request fingerprint (``scrapy.utils.request.fingerprint``, hex) of ``Request(url)``
    for a URL that ``canonicalize_url`` and ``safe_url_string`` leave as it is (every URL
    ``crawler/links.py`` returns: a test checks both), without building the request."""
    # json.dumps({"body": "", "headers": {}, "method": "GET", "url": url}, sort_keys=True), written
    # out: the encoder's machinery cost more than the hash.
    data = '{"body": "", "headers": {}, "method": "GET", "url": ' + encode_basestring_ascii(url) + "}"
    return hashlib.sha1(data.encode()).hexdigest()  # noqa: S324 - Scrapy's fingerprint is SHA-1


def child_request(parent: FrontierRequest, request: Request, spider: Spider) -> FrontierRequest:
    """The frontier request of *request*, yielded by a spider on a page of *parent* (docs/contract.md §3).

    Raises:
        CannotTravel: *request* is not an http(s) request (:func:`unfetchable`), or cannot be
            serialised.
    """
    problem = unfetchable(request.url)
    if problem is not None:
        raise Unfetchable(problem)
    overrides: dict[str, Any] = dict(request.meta.get(FRONTIER) or {})
    plain = is_plain(request, spider)
    return dataclasses.replace(
        parent,
        url=request.url,
        spiderid=str(overrides.get("spiderid", parent.spiderid)),
        priority=int(overrides.get("priority", parent.priority - 10)),
        request_id="",
        method="GET",
        body=None,
        depth=parent.depth + 1,
        retry_times=0,
        attrs=overrides.get("attrs", parent.attrs),
        domain="",  # recomputed from the URL
        scrapy_request=None if plain else request_to_json(request, spider),
    )
