"""What requests may ask for: the bounds of the request schemas (docs/contract.md §2.7).

Part of :mod:`crawlhive.utils.config.defaults` (read its docstring first)."""

# ruff: noqa: E501

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
