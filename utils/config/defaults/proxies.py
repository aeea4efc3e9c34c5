"""Proxies, sessions and the adaptive throttle (docs/contract.md §21).

Part of :mod:`crawlhive.utils.config.defaults` (read its docstring first)."""

# ruff: noqa: E501

PROXY_POOLS: dict[str, list[str]] = {}
"""Named pools of forward proxies: ``{"name": ["http://user:pass@host:port", …]}`` (http:// or
https:// proxies; credentials allowed, and never shown: a proxy is named ``host:port`` in every
output). A crawl may name its pool with ``proxy_pool`` (PROXY_CLIENT_POOLS says which); the
operator's PROXY_DOMAIN_POOLS wins over it."""

PROXY_DOMAIN_POOLS: dict[str, str] = {}
"""The operator's pool of a domain, for every crawl of it: ``{"example.com": "datacenter"}``. A key is
a domain, reduced as requests are bucketed (``www.example.com`` is ``example.com``), or a tenant
site of a shared suffix (``alice.github.io``, which wins over ``github.io``). Wins over a crawl's
``proxy_pool``, a ``domain-update``'s and PROXY_POOL_DEFAULT; no request can change it."""

PROXY_CLIENT_POOLS: list[str] = ["*"]
"""The pools a crawl request's ``proxy_pool`` (and, with PROXY_POOL_DOMAIN_UPDATES, a
``domain-update``'s) may name: ``["*"]`` every configured pool, ``[]`` none (a request naming one
is a validation dead letter; PROXY_DOMAIN_POOLS and PROXY_POOL_DEFAULT still apply)."""

PROXY_POOL_DOMAIN_UPDATES: bool = False
"""Let a ``domain-update`` set a domain's proxy pool (``proxy_pool``) for every crawl of the domain,
and ``domain-remove`` drop it. Off: the operator's PROXY_DOMAIN_POOLS alone choose a domain's pool;
a ``domain-update`` naming one is a validation dead letter, and a pool stored by one before is
ignored."""

PROXY_POOLS_FILE: str = ""
"""A file of pools, one ``name url`` a line (``#`` comments), read again when it changes; its pools
replace PROXY_POOLS' pools of the same name. Empty: none."""

PROXY_POOL_DEFAULT: str = ""
"""The pool of crawls that name none (and of domains without one); empty: fetch directly."""

PROXY_BAN_STATUSES: list[int] = [403, 407, 429, 503]
"""Response statuses that count as a ban of the proxy that fetched them, for that domain."""

PROXY_BAN_THRESHOLD: int = 3
"""Bans (statuses, a crawl's ``ban_regex``, failures to reach the proxy) in a row after which a proxy
rests for a domain."""

PROXY_SHARED_BANS: bool = True
"""Whether a ban status (PROXY_BAN_STATUSES) or a failure to reach a proxy counts for every crawl of
the domain (or tenant site): the site banned the proxy's address, for everyone. ``false``: every ban
counts for its own crawl only, as a ``ban_regex`` match always does, so that no client can rest
proxies for another's crawl even with pages that answer 403; each crawl then finds banned proxies
out for itself."""

PROXY_COOLDOWN: float = 60.0
"""Seconds a proxy rests for a domain after PROXY_BAN_THRESHOLD bans in a row; doubled at each new
rest of that proxy for that domain, up to PROXY_COOLDOWN_MAX."""

PROXY_COOLDOWN_MAX: float = 3600.0
"""The longest rest of a proxy for a domain, in seconds."""

PROXY_MAX_SWITCHES: int = 5
"""Times one page is sent through another proxy after a ban without using one of its retries;
after that a ban is an ordinary response (or failure) of the page."""

SESSION_MAX_REQUESTS: int = 100
"""Requests one sticky session (``"sticky": "domain"``: one proxy and one cookie jar per crawl and
domain) serves before a new one starts."""

SESSION_TTL: float = 600.0
"""Seconds a sticky session lives (from its start)."""

AUTOTHROTTLE: bool = True
"""Adapt each domain's rate, cluster-wide: a 429 or 503 (not switched to another proxy) or a
response slower than AUTOTHROTTLE_LATENCY halves it; each throttle window without one raises it a
step (AUTOTHROTTLE_STEP), never above its configured limit."""

AUTOTHROTTLE_LATENCY: float = 5.0
"""Seconds of response time above which a response slows its domain down (AUTOTHROTTLE)."""

AUTOTHROTTLE_STEP: float = 0.125
"""Fraction of a domain's configured rate regained per throttle window without a slow-down."""

AUTOTHROTTLE_MIN: float = 0.015625
"""The lowest fraction of its configured rate AUTOTHROTTLE slows a domain to (1/64)."""
