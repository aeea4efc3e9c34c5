"""Stats, metrics and heartbeats (docs/contract.md §4).

Part of :mod:`crawlhive.utils.config.defaults` (read its docstring first)."""

# ruff: noqa: E501

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

HEARTBEAT_FILE: str = ""
"""A local file whose modification time each heartbeat of the process's own loop renews, before
(and whether or not) it reaches Redis: what a container's liveness probe reads
(``healthcheck.py <component> --alive``; deploy/kubernetes/), so a Redis outage never restarts a
process whose loop still runs. Empty (the default): none."""
