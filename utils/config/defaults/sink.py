"""The sinks (docs/contract.md §20).

Part of :mod:`crawlhive.utils.config.defaults` (read its docstring first)."""

# ruff: noqa: E501

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

SINK_SKIP_NEAR_DUPLICATES: bool = False
"""Leave out cleaned records a cleaner flagged as near-duplicates (``near_duplicate_of``,
docs/contract.md §26.1): they are not stored, and counted with the sink's ``duplicates``."""
