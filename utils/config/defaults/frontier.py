"""The frontier and the cluster-wide throttle (docs/contract.md §3.11): pacing, leases, dedupe, page caps, links, crawl records.

Part of :mod:`crawlhive.utils.config.defaults` (read its docstring first)."""

# ruff: noqa: E501

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

DUPEFILTER_BLOOM_ABOVE: int = 0
"""Entries a crawl's dupefilter holds before its seen-set continues in a Bloom filter kept in Redis
(docs/contract.md §3.8), cluster-wide: each of the FRONTIER_SHARDS shards takes its share (this
divided by the shards, rounded up). The dupefilter is then frozen (still read first) and new
fingerprints go to the filter, 3-4 bytes per URL instead of about 70 (about 1.9 with
FRONTIER_TAIL_URL set: the redis-monitors rebuild it from a log of its fingerprints kept in that
store), at the cost of about 0.1 % of the first-time URLs beyond this count dropped as false
positives (``bloom_hits`` in ``info``). 0 = never (every URL in the dupefilter). Sizing:
docs/operations.md."""

FRONTIER_TAIL_URL: str = ""
"""Where domain queues keep their tails (docs/contract.md §23): any fsspec URL (a folder path or
``file://``, ``s3://bucket/prefix`` with s3fs installed, a volume every redis-monitor mounts). Each
(crawl, domain) queue keeps its head in Redis (FRONTIER_HEAD_SIZE requests, none for a domain that
is not due soon) and the rest in compressed segments of up to FRONTIER_SEGMENT_SIZE requests here,
with a pointer per segment in Redis; the redis-monitors spill and refill them. Empty = every queued
request stays in Redis. ``crawlhive up`` sets it to ``<state dir>/frontier-tails``."""

FRONTIER_HEAD_SIZE: int = 64
"""Requests a (crawl, domain) queue keeps in Redis when its tail is in FRONTIER_TAIL_URL: the
redis-monitors refill it from the tail once it holds fewer than half of these (sizing: docs/operations.md)."""

FRONTIER_SEGMENT_SIZE: int = 128
"""Requests per tail segment (one object of FRONTIER_TAIL_URL, one pointer in Redis). A hot queue
holds at most FRONTIER_HEAD_SIZE / 2 + this many after a refill, so keep it near FRONTIER_HEAD_SIZE."""

FRONTIER_HOT_DOMAINS: int = 1000
"""Domains per spider type that keep a head in Redis, cluster-wide (each frontier shard keeps its
share): the next ones due, in the order the scheduler serves them. A queue of a domain further back keeps its whole backlog in its
tail (a broad crawl's million domains then cost Redis a pointer each) and is refilled when the
scheduler reaches it."""

FRONTIER_TAIL_BACKLOG_MAX: int = 1000000
"""Requests per frontier shard allowed to wait in Redis beyond the heads while FRONTIER_TAIL_URL
cannot be written: past it new crawl requests wait (the kafka-monitor stops reading until the store
answers, with one WARNING naming FRONTIER_TAIL_URL)."""

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
