"""The crawlers: retries, downloads, robots.txt, spiders, rendering, the network guard, items, Scrapy settings.

Part of :mod:`crawlhive.utils.config.defaults` (read its docstring first)."""

# ruff: noqa: E501

from typing import Any

RETRY_TIMES: int = 3
"""Retries of a failed fetch (so RETRY_TIMES + 1 attempts)."""

RETRY_HTTP_CODES: list[int] = [500, 502, 503, 504, 522, 524, 408, 429]
"""HTTP statuses that count as a failed fetch and are retried."""

RETRY_BACKOFF_BASE: float = 5.0
"""Seconds before the first retry of a failed fetch; each later retry waits twice as long
(±20 % jitter), up to RETRY_BACKOFF_MAX, or the response's ``Retry-After`` if later (§14).
0 = retry at once."""

RETRY_BACKOFF_MAX: float = 300.0
"""Longest wait before a retry (seconds)."""

DOWNLOAD_TIMEOUT: float = 10.0
"""Seconds a download may take before it fails."""

DOWNLOAD_MAXSIZE: int = 8388608
"""Largest response body a crawler accepts, in bytes, counted both as received and once decoded
(8 MiB); a larger one ends as a ``response too large`` crawl dead letter, without retries."""

FETCH: str = "plain"
"""How pages are fetched when neither the crawl nor its domain says (docs/contract.md §25):
``plain`` (Scrapy's own client), ``impersonate`` (a browser's TLS and HTTP/2 fingerprint,
FETCH_PROFILE), ``render`` (rendering crawlers) or ``auto`` (plain, then up the ladder past a wall)."""

FETCH_PROFILE: str = "chrome"
"""The browser whose TLS and HTTP/2 fingerprint and headers an impersonated fetch has: ``chrome``,
``firefox`` or ``safari`` (a current release of each), or a curl_cffi target such as ``chrome146``."""

FETCH_WALL_STATUSES: list[int] = [403, 429, 503]
"""Statuses that are a wall to an ``auto`` page's fetch: the page is tried again at the next rung,
without spending a retry (docs/contract.md §25)."""

_WALL_PATTERNS = [  # the interstitials of common bot walls
    r"<title>Just a moment\.\.\.</title>",
    r"cf-browser-verification|/cdn-cgi/challenge-platform/",
    r"<title>Attention Required! \| Cloudflare</title>",
    r"_Incapsula_Resource|Incapsula incident ID",
    r"captcha-delivery\.com|geo\.captcha-delivery",
    r"px-captcha|_pxCaptcha",
    r"errors\.edgesuite\.net|<title>Access Denied</title>",
    r"awswaf|challenge\.js\?",
]
FETCH_WALL_PATTERNS: list[str] = _WALL_PATTERNS
"""RE2 patterns whose match in the first 64 KiB of a body makes it a wall, whatever its status:
the interstitials of common bot walls (Cloudflare, Imperva, DataDome, PerimeterX, Akamai, AWS WAF)."""

FETCH_SESSION_PROFILES: list[str] = ["chrome", "firefox", "safari"]
"""The browser profiles a sticky session (``"sticky": "domain"``) is given one of, for its life, when
its pages are impersonated: its TLS and HTTP/2 fingerprint, User-Agent and client hints stay one
browser's; a session dropped after a ban takes another (docs/contract.md §25). Empty: FETCH_PROFILE."""

FETCH_LADDER_TTL: float = 86400.0
"""Seconds the rung that got an ``auto`` page past a wall is remembered for its site (so its next
pages start there)."""

USER_AGENT: str = ""
"""User-Agent of requests without ``useragent``; empty means ``crawlhive/<version>``."""

CRAWLER_NODE_NAME: str = ""
"""Host name reported in machine stats; empty means this machine's hostname."""

CONCURRENT_REQUESTS: int = 16
"""Fetches one crawler process runs at once (Scrapy's CONCURRENT_REQUESTS; the per-domain limit is
the cluster-wide throttle, not a per-process one)."""

ROBOTSTXT_MAX_CRAWL_DELAY: float = 60.0
"""Longest robots.txt ``Crawl-delay`` honoured (seconds): a larger one is taken as this (§14)."""

ROBOTSTXT_OBEY: bool = True
"""Obey robots.txt (through Scrapy's RobotsTxtMiddleware); a disallowed request is a policy drop."""

SPIDER_MODULES: list[str] = []
"""Python modules whose Scrapy spiders ``crawlhive crawler --spider NAME`` can run by their ``name``
(Scrapy's setting of the same name; importable from the working directory or ``PYTHONPATH``)."""

SPIDER_IDS: list[str] = []
"""The spider types crawl and action requests may name (``spiderid``); empty = any (docs/contract.md §11)."""

KAFKA_ENABLED: bool = True
"""False: a crawler runs in Redis-only mode (``crawlhive crawler --no-kafka``, docs/contract.md §12):
no Kafka connection; seeds from REDIS_START_URLS_KEY, items and dead letters to Redis lists."""

RENDER: bool = False
"""True: a rendering crawler (``crawlhive crawler --render``, docs/contract.md §15): it loads pages in
headless Chromium and takes only the requests of crawls sent with ``render: true``."""

RENDER_CONCURRENCY: int = 4
"""Pages one rendering crawler loads at once (each in a browser context of its own)."""

RENDER_TIMEOUT: float = 30.0
"""Seconds a rendered page may take: its DOM is taken once the network is idle or this has passed
(the page must reach ``DOMContentLoaded`` within it, else the load fails and is retried)."""

RENDER_BROWSER: str = ""
"""The Chromium a rendering crawler starts (a path or a name on ``PATH``); empty = ``chromium`` (or
``chromium-browser``, ``google-chrome``) on ``PATH``. Nothing is downloaded at run time."""

RENDER_BROWSER_USER: str = "nobody"
"""The user (name or uid) a rendering crawler running as root starts the browser as: Chromium's
sandbox refuses root. Ignored when the crawler is not root (the browser runs as the crawler's user)."""

RENDER_ALLOW_NO_SANDBOX: bool = False
"""True: a rendering crawler where Chromium's sandbox cannot work (no unprivileged user namespaces,
e.g. Docker's default seccomp profile) starts the browser without it, with a WARNING, instead of
refusing to start. Dangerous: a browser exploit then runs as the crawler's user, beside its access to
Redis, Kafka and REST."""

RENDER_JS_HEAP_MB: int = 512
"""MiB of JavaScript heap each page of a rendering crawler may use (Chromium's
``--js-flags=--max-old-space-size``): a script that grows past it kills only its page, which fails
and is retried, instead of the crawler's container. DOWNLOAD_MAXSIZE bounds the DOM taken."""

RENDER_PROXY_IDLE_TIMEOUT: float = 30.0
"""Seconds a connection through a rendering crawler's guard proxy may move no byte either way (or
take to send its request head) before the proxy closes it."""

RENDER_PROXY_MAX_CONNECTIONS: int = 256
"""Connections a rendering crawler's guard proxy serves at once; more are closed when accepted (the
proxy's loopback port is open to every local user)."""

REDIS_START_URLS_KEY: str = "%(name)s:start_urls"
"""Redis-only mode: the list a crawler pops seeds from (scrapy-redis's setting and format; ``name``
is the spider's name). An entry is a URL or a JSON crawl request."""

REDIS_ITEMS_KEY: str = "%(spider)s:items"
"""Redis-only mode: the list items go to as JSON (scrapy-redis's setting and format; ``spider`` is
the spider's name). Dead letters go to ``<spider>:dead_letter``."""

_LOCAL_AND_PRIVATE = ["0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12"]
_LOCAL_AND_PRIVATE += ["192.168.0.0/16", "::1/128", "fc00::/7", "fe80::/10"]

CRAWLER_BLOCKED_NETWORKS: list[str] = _LOCAL_AND_PRIVATE
"""Networks (CIDRs) crawlers never connect to: this host, private networks, link-local (cloud
metadata). Checked on the resolved address of every connection (docs/contract.md §10.2)."""

CRAWLER_ALLOWED_NETWORKS: list[str] = []
"""Networks (CIDRs) crawlers may connect to even inside CRAWLER_BLOCKED_NETWORKS (an allowed network
wins). ``crawlhive up`` and ``demo`` allow loopback when this is not set."""

ITEM_REDACT_HEADERS: list[str] = ["Authorization", "Proxy-Authorization", "Cookie"]
"""Request headers whose values items show as ``"[redacted]"`` (``request_headers``; compared
case-insensitively), besides those ITEM_REDACT_HEADER_WORDS finds. Add the exact names of other
secret headers here. Both empty show every header as sent, as Scrapy Cluster did."""

_SECRET_HEADER_WORDS = [
    *("token", "key", "secret", "password", "passwd", "auth", "session", "cookie", "signature", "credential")
]
ITEM_REDACT_HEADER_WORDS: list[str] = _SECRET_HEADER_WORDS
"""A request header whose name contains one of these words (case-insensitive) is redacted in items
too, as if it were in ITEM_REDACT_HEADERS: ``X-Api-Key``, ``X-Auth-Token``, ``X-Session-Id``,
``X-Amz-Security-Token``… An empty list redacts only ITEM_REDACT_HEADERS."""

CRAWLER_STATS_FLUSH_S: float = 1.0
"""Seconds between two writes of a crawler's buffered response counters to Redis."""

SCRAPY_SETTINGS: dict[str, Any] = {}
"""Extra Scrapy settings for crawler processes, applied last over the ones crawlhive derives (e.g.
``{"LOGSTATS_INTERVAL": 10}``); for tuning and tests, not needed in normal use."""
