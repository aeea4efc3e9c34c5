"""Continuous crawling: recrawl schedules and their budgets (docs/contract.md §19).

Part of :mod:`crawlhive.utils.config.defaults` (read its docstring first)."""

# ruff: noqa: E501

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
