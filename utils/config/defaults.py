"""Every crawlhive setting, its type and its default, documented once, right here.

Each setting is a module-level constant; its annotation is the type that the settings loader
(:mod:`crawlhive.utils.config.settings`) parses environment variables and settings files into, and the
docstring under it is the reference for users. Names carry their unit where they have one, except
the names fixed by the wire contract (docs/contract.md §8.1), which keep Scrapy Cluster's spelling; their
docstrings state the unit.

This module is never written to: the loader copies the values.
"""

# ruff: noqa: E501

from typing import Any

# --- connections -------------------------------------------------------------------------------

REDIS_URL: str = "redis://127.0.0.1:6379/0"
"""Redis to use for the frontier and every control key; ``rediss://`` for TLS, password in the URL.
Scrapy Cluster's REDIS_HOST / REDIS_PORT / REDIS_DB / REDIS_PASSWORD are combined into it when it is
not set. When neither is set, ``crawlhive up`` starts a private redis-server and the other commands
find it through the state file in CRAWLHIVE_HOME."""

REDIS_KEY_PREFIX: str = "ch"
"""Prefix of every Redis key crawlhive writes (see docs/redis-keys.md). Lets several clusters, or
tests, share one Redis."""

FRONTIER_SHARDS: int = 0
"""Virtual shards of the frontier (docs/contract.md §18.2); 0 = automatic: 64 on a Redis Cluster
(REDIS_URL naming a cluster node, or several seed nodes separated by commas), one on a single Redis
(no hash tags: the layout of earlier releases). Fixed for the life of the data: the first component
to start stores it in Redis, and a component configured with another value refuses to start."""

REDIS_WAIT_REPLICAS: int = 0
"""Replicas that must confirm a component's frontier writes (Redis ``WAIT``) before it acknowledges
them onward: a Kafka offset commit, a crawler's lease ack (§18.3). 0 = do not wait: a primary
killed before its replicas copied its last writes loses them (docs/operations.md, "Failover")."""

REDIS_WAIT_TIMEOUT: int = 1000
"""Milliseconds one ``WAIT`` for REDIS_WAIT_REPLICAS may take; when fewer replicas confirm in time
the component goes on and logs a WARNING (at most once a minute) naming the Redis node."""

KAFKA_BOOTSTRAP_SERVERS: list[str] = ["127.0.0.1:9092"]
"""Kafka brokers, comma-separated (alias: KAFKA_HOSTS)."""

KAFKA_TOPIC_PREFIX: str = "demo"
"""Prefix of every topic: ``<prefix>.incoming``, ``<prefix>.crawled_firehose``, …"""

KAFKA_GROUP: str = ""
"""kafka-monitor consumer group; empty means ``<KAFKA_TOPIC_PREFIX>-group``."""

CLEANER_GROUP: str = ""
"""Consumer group of the cleaners on ``<prefix>.crawled_firehose``; empty means
``<KAFKA_TOPIC_PREFIX>-cleaner`` (docs/contract.md §13)."""

CLEANER_PLUGINS: dict[str, int | None] = {}
"""The cleaner's steps: ``{"path.Class": order}`` added to (or ``None`` removing) the built-in ones
(extract 100, language 200, dates 300, pii 400, validate 500, dedupe 600)."""

CLEANER_MASK_PII: bool = True
"""Replace e-mail addresses with ``[email]`` and phone numbers with ``[phone]`` in cleaned records."""

CLEANER_REQUIRED_FIELDS: list[str] = ["text"]
"""Fields a cleaned record must have (null or empty counts as missing); else a dead letter."""

CLEANER_DEDUPE_TTL: float = 86400.0
"""Seconds a crawl remembers the ``content_hash`` values it emitted (a repeat is not emitted again)."""

CLEANER_MAX_SECONDS: float = 10.0
"""Seconds one page may take to clean; past them it becomes a ``stage: clean`` dead letter
``cleaning took too long (…)``. The extraction runs in a child process killed at the deadline."""

CLEANER_MAX_TEXT_BYTES: int = 262144
"""Bytes (UTF-8) of ``text`` a cleaned record keeps; a longer main text is cut at a line end.
``title`` and ``description`` keep at most 2048 bytes each."""

CLEANER_MAX_POLL_RECORDS: int = 50
"""Records one poll of a cleaner returns at most (cleaning is CPU work: small batches)."""

CLEANER_MAX_POLL_INTERVAL_MS: int = 900000
"""Milliseconds between two polls of a cleaner before its group evicts it; must exceed
CLEANER_MAX_SECONDS × CLEANER_MAX_POLL_RECORDS, so a batch of slow pages never loses the group's
membership (the kafka-monitor's KAFKA_MAX_POLL_INTERVAL_MS is small to keep its joins fast)."""

CLEANER_MARKDOWN: bool = True
"""Add ``markdown`` to cleaned records: the main content as Markdown (headings, lists, emphasis,
tables; links as their text), from the same parse as ``text`` (docs/contract.md §20.6)."""

SINK_URL: str = ""
"""Where ``crawlhive sink`` writes (its ``--to``; docs/contract.md §20): ``postgresql://user:pass@host:port/db?table=NAME``,
``file:///dir/?format=jsonl|parquet`` (or any fsspec URL such as ``s3://bucket/prefix/``), ``warc:///dir/``.
Its password is masked in every log line."""

SINK_FROM: str = "cleaned"
"""The topic a sink reads (its ``--from``): ``cleaned``, ``crawled_firehose``, ``items`` (each
``<prefix>.<name>``) or a full topic name."""

SINK_GROUP: str = ""
"""Consumer group of a sink; empty means ``<prefix>-sink-<scheme>-<8 hex digits of the SHA-256 of
SINK_URL>``, so every sink URL has a group of its own and sinks of one URL share its partitions."""

SINK_MAX_POLL_RECORDS: int = 500
"""Records one poll of a sink returns at most: a PostgreSQL sink writes each poll in one transaction."""

SINK_MAX_POLL_INTERVAL_MS: int = 300000
"""Milliseconds between two polls of a sink before its group evicts it (the sink's own, as the
cleaner has CLEANER_MAX_POLL_INTERVAL_MS: the kafka-monitor's KAFKA_MAX_POLL_INTERVAL_MS is small
to keep its joins fast). A sink polls on while its files roll on a thread of their own; this bounds
one PostgreSQL transaction or one poll's writes."""

SINK_ROLL_BYTES: int = 0
"""Bytes of records after which a file or WARC sink completes a partition's file and starts the
next; 0 means 64 MiB. A record sent by reference (``body_ref``) counts the body it holds."""

SINK_MAX_HELD_BYTES: int = 0
"""Bytes of records a file or WARC sink holds in memory at most, gathering and rolling, across its
partitions; past them it pauses its partitions until files are written (and rolls the largest
partition early if nothing is rolling). 0 means four times the roll size (256 MiB by default)."""

SINK_ROLL_SECONDS: float = 300.0
"""Seconds after its first record at which a file sink completes its file even if it is small."""

BLOB_STORE_URL: str = ""
"""Where bodies too large for one Kafka message go (docs/contract.md §20.5): any fsspec URL
(``file:///var/lib/crawlhive/blobs``, ``s3://bucket/blobs`` with ``s3fs`` installed). The item then
carries ``"body": null`` and ``body_ref``. Empty: the folder ``blobs`` of CRAWLHIVE_HOME, which every
process of one machine (``crawlhive up`` and its children, ``dump``) shares; crawlers, cleaners and
sinks on several machines need a store they all reach."""

BLOB_TTL: float = 604800.0
"""Seconds a blob is kept (7 days): every crawler, kafka-monitor, redis-monitor, cleaner and sink
removes older blobs of the store at start and at most once an hour after, on a thread of its own.
0 keeps blobs for ever (no sweep): on an object store, a lifecycle rule of the same age is cheaper
than listing it (docs/operations.md)."""

BLOB_STORE_MAX_BYTES: int = 10737418240
"""Most bytes the blob store may hold (10 GiB): past it, the oldest blobs are removed first (each
leaves a marker, so a record that still refers to one becomes a dead letter saying it was evicted by
this cap, not a bare "no blob"). Writers enforce it after each write that could pass it and at least
once a minute, and so does every BLOB_TTL sweep. 0 = no cap (an object store with a lifecycle
rule)."""

KAFKA_SECURITY_PROTOCOL: str = "PLAINTEXT"
"""PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL; applied to every Kafka client."""

KAFKA_SASL_MECHANISM: str | None = None
"""PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 when KAFKA_SECURITY_PROTOCOL uses SASL."""

KAFKA_SASL_USERNAME: str | None = None
"""SASL user name."""

KAFKA_SASL_PASSWORD: str | None = None
"""SASL password."""

KAFKA_SSL_CAFILE: str | None = None
"""CA bundle (PEM file) that signs the brokers' certificates, for SSL / SASL_SSL."""

KAFKA_APPID_TOPICS: bool = False
"""Also write each item / outbound message to ``<prefix>.crawled_<appid>`` / ``.outbound_<appid>``."""

KAFKA_BASE_64_ENCODE: bool = False
"""Send item bodies base64-encoded instead of as text."""

KAFKA_PRODUCER_MAX_REQUEST_SIZE: int = 1048576
"""Bytes: the largest record a crawlhive producer sends; larger items become dead letters."""

KAFKA_FEED_TIMEOUT: float = 10.0
"""Seconds to wait for the broker's acknowledgement of a fed request (REST, ``crawlhive feed``)."""

KAFKA_TOPIC_PARTITIONS: int = 4
"""Partitions of each topic crawlhive creates."""

KAFKA_TOPIC_REPLICATION: int = 1
"""Replication factor of each topic crawlhive creates."""

KAFKA_CONSUMER_POLL_TIMEOUT_MS: int = 100
"""Milliseconds one consumer poll may block before the loop checks its stop flag."""

KAFKA_CONSUMER_FETCH_MAX_WAIT_MS: int = 10
"""Milliseconds the broker may hold a fetch that has no data (low keeps latency low)."""

KAFKA_MAX_POLL_INTERVAL_MS: int = 5000
"""Milliseconds between polls before the group evicts a consumer; small values keep group joins
fast on Tansu."""

KAFKA_SESSION_TIMEOUT_MS: int = 6000
"""Milliseconds a consumer-group member may go without heartbeats before it is evicted. A fresh
group on Tansu completes its first join only after about half of it (kafka-python's 45000 default
makes that 23 s); 6000 is also the smallest value Apache Kafka accepts by default
(``group.min.session.timeout.ms``)."""

KAFKA_CONSUMER_MAX_POLL_RECORDS: int = 2000
"""Records one poll returns at most: the batch a monitor validates and writes in one round trip."""

# --- request schemas (docs/contract.md §2.7) -----------------------------------------------------------------

SCHEMA_PRIORITY_MIN: int = 1
"""Smallest priority a crawl request may ask for."""

SCHEMA_PRIORITY_MAX: int = 100
"""Largest priority a crawl request may ask for."""

SCHEMA_MAXDEPTH_MAX: int = 3
"""Largest ``maxdepth`` a crawl request may ask for."""

SCHEMA_DOMAIN_MAX_PAGES_MAX: int = 2000
"""Largest ``domain_max_pages`` a crawl request may ask for."""

SCHEMA_MAX_PAGES_MAX: int = 1000000
"""Largest ``max_pages`` (a crawl's page budget across all domains) a request may ask for."""

SCHEMA_URL_MAX_LENGTH: int = 8192
"""Longest crawl ``url`` accepted (characters)."""

SCHEMA_ARRAY_MAX_ITEMS: int = 100
"""Most entries of a crawl's ``allowed_domains``, ``allow_regex``, ``deny_regex`` and
``deny_extensions`` (each entry at most 1000 characters)."""

SCHEMA_REGEX_MAX_REPEAT: int = 100
"""Largest bound of a counted repetition (``{n,m}``) in a crawl's ``allow_regex`` / ``deny_regex``
(RE2 copies the repeated part that many times; RE2 itself stops at 1000)."""

SCHEMA_REGEX_MAX_PROGRAM: int = 20000
"""Largest RE2 program (instructions, ``programsize``) of one ``allow_regex`` / ``deny_regex``
pattern; also bounds RE2's memory for it (about 32 bytes per instruction). ``\\pL`` alone is 1200."""

SCHEMA_REGEX_MAX_TOTAL_PROGRAM: int = 100000
"""Largest sum of the RE2 program sizes of all the patterns of one crawl request: what validating
it may compile (about 65 ms; up to 100 bytes per instruction while compiling) and what a crawler
keeps in memory for it (about 12 bytes per instruction)."""

SCHEMA_ATTRS_MAX_BYTES: int = 65536
"""Largest crawl ``attrs``, measured as compact JSON (bytes). Every item of the crawl carries it."""

SCHEMA_HITS_MAX: int = 1000000
"""Largest domain-config ``hits``."""

SCHEMA_WINDOW_MAX: int = 604800
"""Largest domain-config ``window`` (seconds; a week)."""

SCHEMA_ALLOWED_METHODS: list[str] = ["GET", "HEAD", "POST"]
"""HTTP methods a crawl request may use (``method``; docs/contract.md §10.2). Add PUT, PATCH, DELETE
or OPTIONS deliberately: a crawl makes the cluster send them to any site."""

# --- plugins ---------------------------------------------------------------------------------------

PLUGINS: dict[str, Any] = {}
"""Plugins of the monitor being run, ``{"dotted.path.Class": rank or null}``, merged over its
built-ins (null removes one). Applied before the monitor's own map below."""

KAFKA_MONITOR_PLUGINS: dict[str, Any] = {}
"""kafka-monitor plugins, ``{"dotted.path.Class": rank or null}`` merged over the built-ins
(null removes one)."""

REDIS_MONITOR_PLUGINS: dict[str, Any] = {}
"""redis-monitor plugins, ``{"dotted.path.Class": rank or null}`` merged over the built-ins."""

REDIS_MONITOR_BLOCK_MS: int = 250
"""Milliseconds one read of the control stream may wait for a request (``XREADGROUP BLOCK``); also
bounds how late a timer-driven redis-monitor plugin runs. Must stay well under redis-py's 5 s
socket timeout."""

REDIS_MONITOR_BATCH: int = 100
"""Control requests one redis-monitor iteration reads and answers at most."""

REDIS_MONITOR_CLAIM_IDLE_S: float = 30.0
"""Seconds a control request may stay unanswered with one redis-monitor before another one takes
it over (its monitor died). Keep it above KAFKA_FEED_TIMEOUT: a live monitor renews what it holds."""

REDIS_MONITOR_MAX_ATTEMPTS: int = 3
"""Times a redis-monitor plugin may fail on one control request before the request is reported
(a dead letter with stage ``control``, or the plugin's error answer) instead of retried."""

REDIS_MONITOR_RETRY_S: float = 1.0
"""Seconds before a control request whose plugin failed is tried again."""

REDIS_MONITOR_TICK_S: float = 0.25
"""Seconds between two runs of the redis-monitor's timer-driven plugins (expiry timers, crawl
completion); the lease reaper runs every fourth tick."""

REDIS_MONITOR_EXPIRE_ENABLED: bool = True
"""Fire crawls' expiry timers (docs/contract.md §3.4) in this redis-monitor."""

REDIS_MONITOR_COMPLETE_ENABLED: bool = True
"""Emit ``complete`` events (docs/contract.md §3.12) from this redis-monitor."""

REDIS_MONITOR_REAPER_ENABLED: bool = True
"""Reclaim expired leases (crawlers that died) in this redis-monitor."""

# --- frontier and throttle (docs/contract.md §3.11) ------------------------------------------------------------

QUEUE_HITS: int = 10
"""Fetches allowed per throttle key in any rolling QUEUE_WINDOW, cluster-wide."""

QUEUE_WINDOW: float = 60.0
"""Seconds of the rolling throttle window."""

QUEUE_MODERATED: bool = True
"""Space fetches at least QUEUE_WINDOW / QUEUE_HITS seconds apart (no bursts)."""

QUEUE_WINDOW_MARGIN: float = 0.1
"""Seconds the throttle adds to every window when it counts hits (also to domain-config windows).

The throttle decides when a request is leased, on the Redis clock; the site sees the request a
little later, and not always equally later (a new connection, a robots.txt fetch first, a busy
crawler). The margin keeps ``hits`` per window true at the site for such differences up to this
long, at a cost of at most ``margin / window`` of the allowed rate (1 % at 0.1 s of 10 s)."""

SCHEDULER_TYPE_ENABLED: bool = True
"""Throttle per (spiderid, domain) instead of per domain."""

SCHEDULER_IP_ENABLED: bool = False
"""Add CRAWLER_EGRESS_ID to the throttle key (one budget per egress address)."""

CRAWLER_EGRESS_ID: str | None = None
"""Operator-set id of this crawler's egress (e.g. its public IP); never looked up on the network."""

LEASE_TIMEOUT: float = 120.0
"""Seconds a popped request stays leased to its crawler before it may be reclaimed."""

DUPEFILTER_TIMEOUT: float = 600.0
"""Seconds a crawl's dupefilter lives after the crawl's last activity."""

GLOBAL_PAGE_PER_DOMAIN_LIMIT: int | None = None
"""Cap on requests per (crawl, domain) applied to every crawl; unset = no cap."""

CRAWL_MAX_PAGES_DEFAULT: int | None = 100000
"""Page budget of a crawl across all domains (requests admitted into the frontier, the seed
included) when its request sets no ``max_pages``; when both apply the smaller wins; 0 or unset =
no budget (docs/contract.md §10.7). 100,000 pages cost about 25 MB of Redis while queued; ``info``
and ``GET /crawls`` name the budget once it stopped a crawl's admission."""

LINK_MAX_URL_LENGTH: int = 2083
"""Links longer than this (characters) are dropped by the link filters: a crawl trap (§10.7)."""

LINK_MAX_SEGMENT_REPEATS: int = 3
"""Links whose path holds one segment more often than this are dropped (``/a/b/a/b/a/b/a/b/``:
a crawl trap, §10.7)."""

LINK_MAX_PER_PAGE: int = 5000
"""Links the built-in spiders take from one page (after the filters, each URL once); the page's
later links are dropped without being examined and counted in the crawler's Scrapy stats
(``crawlhive/links_over_cap``). Bounds the work and the frontier writes of one hostile page (§10.7);
0 = no cap."""

CRAWL_RECORD_TTL: float = 604800.0
"""Seconds a crawl's counters and stop blacklist are kept after its last activity."""

# --- continuous crawling (docs/contract.md §19) ---------------------------------------------------

RECRAWL_MIN_EVERY: int = 60
"""Smallest ``recrawl.every`` (and adaptive ``min``) a crawl request may ask, in seconds (§19.1).
Tests lower it to crawl again within seconds."""

RECRAWL_GONE_AFTER: int = 2
"""Visits in a row that find a scheduled page gone (404, 410, or failing after its retries) before
it leaves the schedule (§19.4); the first such visit is emitted once as changed."""

RECRAWL_EMIT_UNCHANGED: bool = False
"""True: a visit that finds a page unchanged emits an item with ``"changed": false`` and an empty
``body`` (§19.4); False (default): unchanged visits emit nothing."""

RECRAWL_STATE_BUCKETS: int = 32768
"""Hash buckets per crawl over which its pages' schedule state is spread (divided among the
frontier shards, at least one per shard). Sized so a bucket of a crawl of up to ~2 million pages
stays in Redis's compact listpack encoding (≤ 128 fields); more pages still work, at more bytes
per page (docs/operations.md)."""

RECRAWL_RELEASE_BATCH: int = 500
"""Due pages one release script moves from a shard's schedule into the frontier (redis-monitor,
each tick, script after script while the shard has more due, for up to 80 % of
REDIS_MONITOR_TICK_S). A script holds Redis while it runs (500 pages: 4-8 ms; 2,000: 15-30 ms,
which slowed the crawl bench beside 10,000 due pages a second: bench/README.md, recrawl_crawl);
a larger batch costs a little less Redis CPU per page."""

RECRAWL_MAX_PAGES_DEFAULT: int | None = 10000
"""Pages a recurring crawl keeps on its schedule when its request sets no ``max_pages`` (then
``max_pages`` is the cap); a page fetched past it is not scheduled (§19.1); 0 or unset = no cap.
A scheduled page is fetched again for as long as the crawl recurs: this bounds that work."""

APPID_MAX_SCHEDULED_PAGES: int | None = 1000000
"""Pages all recurring crawls of one appid keep on their schedules together, counted cluster-wide
in Redis; a page fetched past it is not scheduled (§19.1); 0 or unset = no ceiling. About 200 MB of
Redis at a million pages (docs/operations.md)."""

RECRAWL_ENABLED: bool = True
"""Release due pages of recrawling crawls into the frontier in this redis-monitor (§19)."""

RECRAWL_CONFIG_CACHE_S: float = 5.0
"""Seconds a crawler keeps a crawl's ``recrawl`` settings before reading them again (a seed sent
again with new settings applies to visits after that)."""

# --- crawling --------------------------------------------------------------------------------------

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

# --- proxies, sessions and the adaptive throttle (docs/contract.md §21) ----------------------------

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

# --- stats and heartbeats (docs/contract.md §4) ------------------------------------------------------------

STATS_TIMES: list[int] = [900, 3600, 21600, 43200, 86400, 604800]
"""Seconds of each rolling stats window."""

STATS_RESPONSE_CODES: list[int] = [200, 403, 404, 504]
"""HTTP statuses counted per spider and machine."""

STATS_QUEUE_MAX_DOMAINS: int = 1000
"""Most domains listed per spider in queue stats."""

METRICS_TOP_DOMAINS: int = 50
"""Domains with their own success and failure counters on ``/metrics`` (the busiest by responses;
docs/contract.md §22.3): bounds the series a scrape returns. Redis keeps the counts of 20 times as
many (``metrics-domains``), the rest dropped, so a domain's counter can restart from a lower value."""

METRICS_NAMES: bool | None = None
"""Whether ``GET /metrics`` names the busiest domains (``crawlhive_domain_responses_total{domain}``)
and proxies (``proxy="host:port"``). ``/metrics`` is the one REST path REST_API_KEY does not guard
(Prometheus scrapes it without one), and domains are what tenants crawl. Unset (the default):
named only while REST_API_KEY is empty (a REST open to whoever reaches it: loopback by default);
with a key, the domain series are left out and a proxy is labelled by its place in its pool
(``1``, ``2``, … of its ``host:port``s in order). ``true``: always named (protect ``/metrics``
otherwise); ``false``: never."""

HEARTBEAT_TIMEOUT: float = 120.0
"""Seconds a process counts as live after its last heartbeat."""

HEARTBEAT_INTERVAL: float = 10.0
"""Seconds between two heartbeats of one process."""

# --- REST (docs/contract.md §7) --------------------------------------------------------------------------

REST_HOST: str = "127.0.0.1"
"""Address the REST service listens on. Loopback by default; any other address needs REST_API_KEY
(or REST_INSECURE) (docs/contract.md §10.1)."""

REST_PORT: int = 5343
"""Port the REST service listens on (alias: FLASK_PORT)."""

REST_API_KEY: str = ""
"""When non-empty, required as the X-Api-Key header on every endpoint but ``/`` and ``/metrics``."""

REST_INSECURE: bool = False
"""Allow REST_HOST to be a non-loopback address without REST_API_KEY (a WARNING at start-up)."""

REST_ALLOWED_HOSTS: list[str] = []
"""Host names (the ``Host`` header, port ignored) the REST service answers besides ``localhost``,
``127.0.0.1``, ``[::1]`` and REST_HOST itself; any other ``Host`` gets 400, so a web page whose
name was rebound to this machine's address (DNS rebinding) cannot use it. ``*.example.com`` allows
the subdomains of example.com, ``*`` any name. With REST_HOST=0.0.0.0, list the names clients use."""

WAIT_FOR_RESPONSE_TIME: float = 5.0
"""Seconds ``POST /feed`` waits for the answer to a request with a uuid."""

POLL_RESULT_TTL: float = 86400.0
"""Seconds an unclaimed answer stays available to ``POST /poll``."""

REST_MAX_BODY_BYTES: int = 1048576
"""Largest request body the REST service accepts."""

# --- logging and local state -----------------------------------------------------------------------

LOG_LEVEL: str = "INFO"
"""DEBUG, INFO, WARNING, ERROR or CRITICAL."""

LOG_JSON: bool = False
"""Log one JSON object per line instead of plain text."""

LOG_FILE: str | None = None
"""Log to this file instead of standard error."""

LOG_STOP_SIGNALS: bool = True
"""Log at INFO the first SIGINT/SIGTERM that starts a graceful stop (this process's "SIGTERM received:
stopping after …" line and Scrapy's "Received SIGTERM, shutting down gracefully"). ``crawlhive up``
and ``demo`` set it false for their components, since they print one line that they are stopping
themselves (a single Ctrl-C then shows one line, not one per component); those lines are DEBUG then."""

CRAWLHIVE_HOME: str = "~/.crawlhive"
"""Folder of local state: where ``crawlhive up`` records the addresses of its embedded Redis and
broker so that other ``crawlhive`` commands on this machine find them."""
