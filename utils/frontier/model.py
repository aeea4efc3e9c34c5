"""The frontier's data: a queued request, its score, and the shapes derived from it.

A request's score in its crawl queue packs its priority and an arrival sequence, so that
``ZPOPMIN`` serves the highest priority first and, among equal priorities, the oldest push first
(docs/contract.md §3.1)::

    score = -priority * 2**32 + (seq mod 2**32)

``seq`` comes from the cluster-wide counter ``keys.queue_sequence()`` (``INCRBY`` by the batch size
in ``Frontier.reserve_sequence``, ``INCR`` in ``lib/requeue.lua``), so pushes from any number of
processes are ordered by when Redis ran them. Every score is an integer of magnitude below 2**53,
hence exact in the double Redis stores, and the priority comes back as ``-floor(score / 2**32)``
(:func:`decode_priority`).

Bounds: priorities are clamped to ``[PRIORITY_MIN, PRIORITY_MAX]`` = ±2**20 (±1,048,576; real ones
run from ``SCHEMA_PRIORITY_MAX`` down by 10 per depth level or retry, about -1000 for a very long
wandering crawl), so a clamped request only loses its order against other clamped ones. The
sequence wraps every 2**32 (about 4.3 billion) pushes cluster-wide; at the wrap, requests of equal
priority pushed just after it may be served before those pushed just before it. Nothing else
depends on the sequence.

(Scrapy-redis's queue scores ``-priority`` alone, so equal priorities pop in byte order, not
arrival order, and it pickles requests: not reused.) ``utils/backends/lua/lib/score.lua`` is the Lua twin of
:func:`encode_score`.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import math
import random
from dataclasses import dataclass, field
from typing import Any, Self

import ujson

from crawlhive.utils.backends.keys import Keys, unescape
from crawlhive.utils.contract.records import CrawlDeadLetter, crawl_dead_letter
from crawlhive.utils.rules.domains import domain_of_url, origin_of

SEQ_BITS = 32
"""Bits of the score that hold the arrival sequence."""
SEQ_SPAN: int = 2**SEQ_BITS
PRIORITY_MAX = 2**20
"""Largest priority stored as such; higher ones are clamped to it."""
PRIORITY_MIN = -(2**20)
"""Smallest priority stored as such; lower ones are clamped to it."""


def clamp_priority(priority: int) -> int:
    """*priority* limited to ``[PRIORITY_MIN, PRIORITY_MAX]``, the range the score encodes exactly."""
    return max(PRIORITY_MIN, min(PRIORITY_MAX, int(priority)))


def encode_score(priority: int, seq: int) -> int:
    """The score of a request of *priority* pushed as number *seq* (what the scripts compute)."""
    return -clamp_priority(priority) * SEQ_SPAN + seq % SEQ_SPAN


def decode_priority(score: float) -> int:
    """The (clamped) priority that :func:`encode_score` packed into *score*."""
    return -math.floor(score / SEQ_SPAN)


@dataclass
class FrontierRequest:
    """One request in the frontier, with every option of its crawl (docs/contract.md §2.2, §3).

    ``request_id`` makes the encoding unique per accepted submission: for a seed it is derived
    from the Kafka record, so a redelivered record encodes identically (and ``ZADD NX`` ignores
    it) while a deliberate resubmission of the same URL is a new request.
    """

    url: str
    appid: str
    crawlid: str
    spiderid: str = "link"
    priority: int = 1
    request_id: str = ""
    method: str = "GET"
    headers: dict[str, str] | None = None
    body: str | None = None
    cookies: dict[str, str] | None = None
    depth: int = 0
    retry_times: int = 0
    maxdepth: int = 0
    domain_max_pages: int | None = None
    max_pages: int | None = None
    """The crawl's page budget across all domains (§10.7); None = none."""
    sitemap: bool = False
    """Also queue what the seed host's sitemaps list (§14)."""
    render: bool = False
    """Load the page in a browser (§15): queued in the rendering lane, popped only by rendering crawlers."""
    fetch: str | None = None
    """How a plain crawler fetches the crawl's pages (§25): ``plain``, ``impersonate`` or ``auto``;
    None = the domain's default, else FETCH."""
    recrawl: dict[str, Any] | None = None
    """The crawl's ``recrawl`` object (§19), defaults filled in: its pages are kept on a schedule
    (``utils/frontier/recrawl.py``); the crawl record holds the settings in force."""
    allowed_domains: list[str] | None = None
    allow_regex: list[str] | None = None
    deny_regex: list[str] | None = None
    deny_extensions: list[str] | None = None
    expires: int = 0
    useragent: str | None = None
    cookie: str | None = None
    attrs: dict[str, Any] | None = None
    proxy_pool: str | None = None
    """The crawl's proxy pool (§21.1); None: a domain's pool, else PROXY_POOL_DEFAULT, else direct."""
    ban_regex: list[str] | None = None
    """RE2 patterns whose match in a body counts as a ban of the proxy that fetched it (§21.3)."""
    sticky: str | None = None
    """``"domain"``: one proxy and one cookie jar per crawl and domain, a session (§21.2)."""
    seed_origin: str = ""
    """``scheme://host:port`` of the crawl's seed: its ``headers`` and cookies go only there (§10.6)."""
    domain: str = ""
    """The queue bucket of ``url`` (docs/contract.md §3.2); filled in from ``url`` when empty."""
    extra: dict[str, Any] = field(default_factory=dict)
    scrapy_request: dict[str, Any] | None = None
    """A followed request that is more than a plain GET of ``url`` (its own method, body, headers,
    cookies, callback, meta or cb_kwargs) as ``scrapy.Request.to_dict`` made JSON-safe by
    ``crawlhive.crawler.requests``; None for a seed or a plain link."""
    trace: str | None = None
    """The page's trace context while tracing is on (docs/contract.md §26.3,
    :func:`crawlhive.utils.backends.tracing.frontier_trace`): the span its page's spans continue
    (a seed's: the kafka-monitor's; a reclaimed request's: the redis-monitor's reclaim) or link to
    (a link's: the page that found it), and when it was queued. None (and no byte of the queue
    member) while tracing is off; a retry keeps it (queued again: ``tracing.requeued``), a link
    gets its own."""
    option_set: OptionSet | None = field(default=None, compare=False, repr=False)
    """The crawl options this request's queue member refers to (:meth:`member`); children inherit
    their parent's. None until :meth:`Frontier.push` (or a legacy member's decode) sets it."""

    def __post_init__(self) -> None:
        if not self.domain:
            self.domain = domain_of_url(self.url)

    def member(self) -> bytes:
        """The queue member of this request in its crawl's queue (``Keys.crawl_queue``), which names
        the spider, appid, crawlid, domain and lane, and whose score holds the priority: none of
        them is written again. The crawl options (:data:`OPTION_FIELDS`) are written once per crawl
        as an :class:`OptionSet` in the crawl record, and the member names it by id, so a plain
        link is ``b"<depth> <option set id> <url>"`` (~20 bytes beside its URL). Anything else that
        differs from the option set or from the defaults (a seed's ``request_id``, ``retry_times``,
        a spider's ``attrs`` or ``scrapy_request``) makes the member JSON with those fields, led by
        ``"o"`` (the pop script reads the id from either form, ``utils/backends/lua/frontier_pop.lua``).
        Deterministic, so an equal request is an equal member (``ZADD NX``).

        A request without an option set (decoded from a member queued before 2.1) keeps the old
        self-contained JSON (:meth:`encode`), so a requeue never needs an option set it lacks.
        """
        options = self.option_set
        if options is None:
            return self.encode()
        values = options.values
        defaults = _ENCODE_DEFAULTS
        inline: dict[str, Any] = {}
        for k, v in self.__dict__.items():
            if k in _NOT_IN_MEMBER:
                continue
            if k in _OPTION_FIELD_SET:
                if v != values.get(k, defaults[k]):
                    inline[k] = v
            elif k not in defaults or v != defaults[k]:
                inline[k] = v
        depth = inline.pop("depth", 0)
        url = inline.pop("url")
        if not inline:
            return b"%d %s %s" % (depth, options.id.encode(), compact_url(url, self.domain).encode())
        inline["url"] = url
        if depth:
            inline["depth"] = depth
        data = ujson.dumps(inline, sort_keys=True, ensure_ascii=False, escape_forward_slashes=False).encode()
        # "o" first, so the pop script finds the id with an anchored match (not inside attrs)
        return b'{"o":"%s",%s' % (options.id.encode(), data[1:])

    @classmethod
    def from_member(
        cls,
        member: bytes,
        *,
        spiderid: str,
        appid: str,
        crawlid: str,
        domain: str,
        priority: int,
        options: OptionSet | None,
    ) -> Self:
        """The request of a queue *member* (:meth:`member`) of the crawl queue named by *spiderid*,
        *appid*, *crawlid* and *domain*, popped with *priority*, whose option set is *options* (as
        the crawl record holds it; None if it holds none).

        A member whose option set is not *options* (the crawl record that held it expired:
        CRAWL_RECORD_TTL) gets an :attr:`OptionSet.lost` stand-in: such a request can only be
        ended with a dead letter, never fetched or requeued with default options.
        """
        if member[:1] == b"{":
            data = ujson.loads(member)
            if "appid" in data:  # self-contained, queued before 2.1 (see encode)
                return cls.decode(member)
            oid = data.pop("o")
        else:
            depth, oid_raw, url = member.split(b" ", 2)
            oid = oid_raw.decode()
            data = {"depth": int(depth), "url": expand_url(url.decode(), domain)}
        if options is None or options.id != oid:
            options = OptionSet.missing(oid)
        fields = dict(_ENCODE_DEFAULTS)
        fields["extra"] = {}
        fields.update(options.values)
        fields.update(data)
        fields.update(spiderid=spiderid, appid=appid, crawlid=crawlid, domain=domain, priority=priority)
        fields["option_set"] = options
        request = cls.__new__(cls)
        request.__dict__.update(fields)
        return request

    def encode(self) -> bytes:
        """Self-contained deterministic JSON (sorted keys), fields at their default value left out:
        the queue member of releases before 2.1, still decoded (:meth:`decode`) and written back
        by a requeue of such a member; new members are :meth:`member`."""
        defaults = _ENCODE_DEFAULTS
        compact = {
            k: v for k, v in self.__dict__.items() if k != "option_set" and (k not in defaults or v != defaults[k])
        }
        data: bytes = ujson.dumps(compact, sort_keys=True, ensure_ascii=False, escape_forward_slashes=False).encode()
        return data

    @classmethod
    def decode(cls, raw: bytes | str) -> Self:
        """The request of a self-contained :meth:`encode` JSON."""
        data = ujson.loads(raw)
        data.pop("seed_domain", None)  # queued before 2.0: such a crawl's links get no credentials
        return cls(**data)


#: What the crawlers count of the fetch ladder (docs/contract.md §25.7): responses per rung, and
#: the ``auto`` ladder's climbs (fields of ``Keys.crawl_fetch``; stats counters).
FETCH_COUNTS = ("plain", "impersonate", "render", "climbs")

#: The start of the ``error`` of the dead letter of a request whose option set was gone.
OPTIONS_LOST = "crawl options lost"


#: The fields of a request that its crawl's links inherit unchanged (docs/contract.md §3): stored
#: once per crawl as an :class:`OptionSet`, not in every queued member.
OPTION_FIELDS = (
    "maxdepth",
    "domain_max_pages",
    "max_pages",
    "sitemap",
    "render",
    "fetch",
    "recrawl",
    "allowed_domains",
    "allow_regex",
    "deny_regex",
    "deny_extensions",
    "expires",
    "useragent",
    "cookie",
    "cookies",
    "headers",
    "attrs",
    "seed_origin",
    "proxy_pool",
    "ban_regex",
    "sticky",
)
_OPTION_FIELD_SET = frozenset(OPTION_FIELDS)
#: Fields a queue member never holds: its key and score hold them (and the option set is named by id).
_NOT_IN_MEMBER = frozenset({"spiderid", "appid", "crawlid", "domain", "priority", "option_set"})


@dataclass(frozen=True, slots=True)
class OptionSet:
    """The crawl options of a group of queued requests (their :data:`OPTION_FIELDS` not at their
    default), stored once in the crawl record (``o:<id>``) instead of in every member.

    The id is derived from the content (BLAKE2b, 48 bits, base64url): pushes of the same options
    from any process name the same set, and a redelivered seed writes the same member. Ids are
    only ever looked up within one crawl record, so a collision could only mix two option sets of
    the same crawl.
    """

    id: str
    values: dict[str, Any]
    json: bytes

    @classmethod
    def of(cls, request: FrontierRequest) -> OptionSet:
        """The option set of *request*'s own options."""
        defaults = _ENCODE_DEFAULTS
        values = {k: getattr(request, k) for k in OPTION_FIELDS if getattr(request, k) != defaults[k]}
        return cls.from_json(ujson.dumps(values, sort_keys=True, ensure_ascii=False, escape_forward_slashes=False))

    @classmethod
    def from_json(cls, raw: bytes | str) -> OptionSet:
        """The option set stored as *raw* (what :attr:`json` holds), cached by content."""
        data = raw.encode() if isinstance(raw, str) else bytes(raw)
        cached = _OPTION_SETS.get(data)
        if cached is None:
            digest = hashlib.blake2b(data, digest_size=6).digest()
            cached = cls(base64.urlsafe_b64encode(digest).decode(), ujson.loads(data), data)
            if len(_OPTION_SETS) >= 4096:
                _OPTION_SETS.clear()
            _OPTION_SETS[data] = cached
        return cached

    @classmethod
    def missing(cls, oid: str) -> OptionSet:
        """A stand-in for option set *oid* that its crawl record no longer holds (:attr:`lost`):
        its requests can only be ended, never fetched or requeued."""
        return cls(oid, {}, b"")

    @property
    def lost(self) -> bool:
        """True for a :meth:`missing` stand-in."""
        return not self.json

    @property
    def field(self) -> str:
        """Its field in the crawl record (``Keys.crawl``)."""
        return "o:" + self.id


#: Option sets already parsed, by their JSON (a crawler pops many requests of few crawls).
_OPTION_SETS: dict[bytes, OptionSet] = {}


#: The first character of a compacted URL (:func:`compact_url`) by scheme and host: the queue's
#: domain itself, ``www.`` before it, or another subdomain (written out, then ``|``). A URL never
#: starts with any of them (a scheme begins with a letter), so a URL written in full still decodes.
_COMPACT_FORMS = {
    ("http://", ""): "*",
    ("http://", "www"): "!",
    ("http://", None): "^",
    ("https://", ""): "+",
    ("https://", "www"): "~",
    ("https://", None): "$",
}
_EXPANDED_FORMS = {code: form for form, code in _COMPACT_FORMS.items()}


def compact_url(url: str, domain: str) -> str:
    """*url* as a compact link member writes it: without its scheme and without its queue's
    *domain* in the host, which the queue key names already: in the queue of ``example.com``,
    ``http://www.example.com/a`` is ``!/a``, ``https://example.com:8443/`` ``+:8443/`` and
    ``http://news.example.com/`` ``^news|/``. About 23 bytes shorter for a typical link: a size
    class or two of Redis's allocator less per queued request (docs/contract.md §18.6). A URL
    whose host is not *domain* or a subdomain of it (character for character), or that has user
    info, is left as it is. :func:`expand_url` is its inverse."""
    scheme = "http://" if url.startswith("http://") else "https://" if url.startswith("https://") else ""
    if not scheme or not domain:
        return url
    rest = url[len(scheme) :]
    end = len(rest)
    for stop in "/?#":
        found = rest.find(stop)
        if 0 <= found < end:
            end = found
    authority = rest[:end]
    if "@" in authority or "|" in authority or authority.startswith("["):
        return url
    host = authority.split(":", 1)[0]
    tail = rest[len(host) :]
    if host == domain:
        return _COMPACT_FORMS[(scheme, "")] + tail
    if not host.endswith("." + domain) or len(host) <= len(domain) + 1:
        return url
    sub = host[: -len(domain) - 1]
    if sub == "www":
        return _COMPACT_FORMS[(scheme, "www")] + tail
    return f"{_COMPACT_FORMS[(scheme, None)]}{sub}|{tail}"


def expand_url(text: str, domain: str) -> str:
    """The URL a link member holds as *text* (:func:`compact_url`) in the queue of *domain*."""
    form = _EXPANDED_FORMS.get(text[:1])
    if form is None:
        return text  # written in full
    scheme, sub = form
    if sub is None:
        sub, _, tail = text[1:].partition("|")
    else:
        tail = text[1:]
    return f"{scheme}{sub}.{domain}{tail}" if sub else f"{scheme}{domain}{tail}"


def lease_member(score: bytes, appid: str, crawlid: str, domain: str, member: bytes) -> bytes:
    """The lease of queue *member*, as the pop script writes it (``utils/backends/lua/frontier_pop.lua``):
    ``<score>:<crawl member>:<length of domain>:<domain><member>``, so a lease names its crawl,
    domain and priority and two crawls' equal members are two leases. Tests build leases with it."""
    crawl = Keys.crawl_member(appid, crawlid)
    return b"%s:%s:%d:%s%s" % (score, crawl.encode(), len(domain.encode()), domain.encode(), member)


def parse_lease_member(lease: bytes) -> tuple[int, str, str, str, bytes] | None:
    """``(priority, appid, crawlid, domain, queue member)`` of a :func:`lease_member`; None for a
    lease of a self-contained member taken before 2.1 (decode it with :meth:`FrontierRequest.decode`)."""
    if lease[:1] == b"{":
        return None
    score, appid, crawlid, rest = lease.split(b":", 3)
    size, _, rest = rest.partition(b":")
    n = int(size)
    return (
        decode_priority(float(score)),
        unescape(appid.decode()),
        unescape(crawlid.decode()),
        rest[:n].decode(),
        rest[n:],
    )


#: The default of each field of :class:`FrontierRequest` that :meth:`FrontierRequest.encode`
#: leaves out (booleans compare as booleans: no field defaults to a number its bool equals).
def _field_defaults() -> dict[str, Any]:
    defaults: dict[str, Any] = {}
    for f in dataclasses.fields(FrontierRequest):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif callable(f.default_factory):
            defaults[f.name] = f.default_factory()
    return defaults


_ENCODE_DEFAULTS = _field_defaults()


def seed_from_request(message: dict[str, Any], origin: str) -> FrontierRequest:
    """The frontier request of an accepted crawl request (defaults filled in) from Kafka *origin*."""
    domain = domain_of_url(message["url"])
    return FrontierRequest(
        url=message["url"],
        appid=message["appid"],
        crawlid=message["crawlid"],
        spiderid=message["spiderid"],
        priority=message["priority"],
        request_id=origin,
        method=message["method"],
        headers=message["headers"],
        body=message["body"],
        cookies=message["cookies"],
        maxdepth=message["maxdepth"],
        domain_max_pages=message["domain_max_pages"],
        max_pages=message.get("max_pages"),
        sitemap=bool(message.get("sitemap")),
        render=bool(message.get("render")),
        fetch=message.get("fetch"),
        recrawl=message.get("recrawl"),
        allowed_domains=message["allowed_domains"],
        allow_regex=message["allow_regex"],
        deny_regex=message["deny_regex"],
        deny_extensions=message["deny_extensions"],
        expires=message["expires"],
        useragent=message["useragent"],
        cookie=message["cookie"],
        attrs=message["attrs"],
        proxy_pool=message.get("proxy_pool"),
        ban_regex=message.get("ban_regex"),
        sticky=message.get("sticky"),
        seed_origin=origin_of(message["url"]),
        domain=domain,  # a seed is queued under its own domain; computed once
    )


def retried(request: FrontierRequest) -> FrontierRequest:
    """The retry of *request* (docs/contract.md §3.10): one more ``retry_times``, priority lowered by 10."""
    return dataclasses.replace(request, retry_times=request.retry_times + 1, priority=request.priority - 10)


def dead_letter_of(request: FrontierRequest, error: str) -> CrawlDeadLetter:
    """The crawl dead letter (docs/contract.md §6 b) of *request*, which failed with *error*: the
    crawler's (a page that failed) and the reaper's (a lease that expired once too often)."""
    return crawl_dead_letter(
        error,
        url=request.url,
        appid=request.appid,
        crawlid=request.crawlid,
        spiderid=request.spiderid,
        retry_times=request.retry_times,
    )


#: Relative jitter of a retry back-off: the wait is drawn within ±20 % of its nominal value.
RETRY_BACKOFF_JITTER = 0.2


def retry_backoff(failures: int, base_s: float, cap_s: float, rng: random.Random | None = None) -> float:
    """Seconds before the retry that follows the *failures*-th failed attempt (docs/contract.md
    §14): ``base × 2^(failures − 1)`` capped at *cap_s*, within ±20 % jitter (so the retries of
    many requests that failed together do not return together); 0 when *base_s* is 0."""
    if base_s <= 0 or failures <= 0:
        return 0.0
    nominal = min(cap_s, base_s * 2.0 ** min(failures - 1, 60))
    jitter = (rng or random).uniform(-RETRY_BACKOFF_JITTER, RETRY_BACKOFF_JITTER)
    return max(0.0, nominal * (1.0 + jitter))


#: The ``error`` of the dead letter of a request whose lease expired once too often (§3.12).
LEASE_EXPIRED = "lease expired"


def text(value: bytes | str) -> str:
    """*value* as ``str`` (replies may be bytes or str depending on the client)."""
    return value.decode() if isinstance(value, bytes) else value
