"""The cleaners (docs/contract.md §13).

Part of :mod:`crawlhive.utils.config.defaults` (read its docstring first)."""

# ruff: noqa: E501

CLEANER_GROUP: str = ""
"""Consumer group of the cleaners on ``<prefix>.crawled_firehose``; empty means
``<KAFKA_TOPIC_PREFIX>-cleaner`` (docs/contract.md §13)."""

CLEANER_PLUGINS: dict[str, int | None] = {}
"""The cleaner's steps: ``{"path.Class": order}`` added to (or ``None`` removing) the built-in ones
(extract 100, language 200, dates 300, pii 400, validate 500, dedupe 600, near-duplicates 650)."""

CLEANER_MASK_PII: bool = True
"""Replace e-mail addresses with ``[email]`` and phone numbers with ``[phone]`` in cleaned records."""

CLEANER_REQUIRED_FIELDS: list[str] = ["text"]
"""Fields a cleaned record must have (null or empty counts as missing); else a dead letter."""

CLEANER_DEDUPE_TTL: float = 86400.0
"""Seconds a crawl remembers the ``content_hash`` values it emitted (a repeat is not emitted again)."""

NEAR_DUPLICATES: str = "flag"
"""What a cleaner does with a near-duplicate: a record whose main text's 64-bit SimHash is within
NEAR_DUPLICATE_DISTANCE bits of an earlier record of the same ``appid`` (docs/contract.md
§26.1): ``flag`` (emitted, with ``near_duplicate_of`` and ``similarity``), ``drop`` (not emitted,
counted) or ``off`` (no SimHash, no lookup)."""

NEAR_DUPLICATE_DISTANCE: int = 3
"""Largest Hamming distance (bits of 64, 0-7) between two records' SimHashes that makes the later
one a near-duplicate; each record costs this + 1 lookups."""

NEAR_DUPLICATE_TTL: float = 86400.0
"""Seconds an appid's records are remembered for near-duplicate lookups (between this and twice
this: the index is kept in windows of this length)."""

NEAR_DUPLICATE_MIN_WORDS: int = 50
"""Fewer words of main text than this: no SimHash (too few words to tell a near-duplicate from a
page on the same topic)."""

CLEANER_MAX_SECONDS: float = 10.0
"""Seconds one page may take to clean; past them it becomes a ``stage: clean`` dead letter
``cleaning took too long (…)``. The extraction runs in a child process killed at the deadline."""

CLEANER_EXTRACT_PROCESSES: int = 2
"""Child processes a cleaner extracts pages in, each given the next page of a batch as soon as it
answers (the extraction is most of a page's cost; one child leaves the other cores idle while the
cleaner waits for it). 1: one child, page after page. Each child holds trafilatura (~60 MB)."""

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
tables; links as ``[text](absolute URL)``, mapped back from the page so ``text`` stays as it is),
from the same parse as ``text`` (docs/contract.md §20.6)."""
