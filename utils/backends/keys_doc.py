"""docs/redis-keys.md, generated from the key formats of :mod:`crawlhive.utils.backends.keys`:
``python -m crawlhive.utils.backends.keys_doc > docs/redis-keys.md`` (``tests/unit/test_keys.py``
fails when the committed file is stale)."""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass

from crawlhive.utils.backends.keys import Keys, SpiderLists


@dataclass(frozen=True)
class KeyDoc:
    """One row of docs/redis-keys.md."""

    pattern: str
    redis_type: str
    ttl: str
    doc: str


def document(prefix: str = "<prefix>") -> list[KeyDoc]:
    """One :class:`KeyDoc` per key format of :class:`Keys`, in definition order."""
    keys = Keys("x")
    keys.prefix = prefix
    keys._heads, keys._global = [f"{prefix}:"], f"{prefix}:"
    rows = []
    for name, func in Keys.__dict__.items():
        if not hasattr(func, "_redis_type"):
            continue
        parameters = list(inspect.signature(func).parameters.values())[1:]
        params = [p.name for p in parameters if p.default is inspect.Parameter.empty]
        if name == "crawl_shard":  # the same key as crawl() with one shard: show the sharded form
            keys.shards, keys._heads = 2, [f"{prefix}:{{{prefix}.<shard>}}:"]
        pattern = getattr(keys, name)(**{p: f"<{p}>" for p in params})
        keys.shards, keys._heads = 1, [f"{prefix}:"]
        doc = " ".join(inspect.getdoc(func).split())  # type: ignore[union-attr]
        rows.append(KeyDoc(pattern, func._redis_type, func._ttl, doc))
    return rows


def render_markdown() -> str:
    """The text of docs/redis-keys.md."""
    lines = [
        "# Redis keys",
        "",
        "Generated from `utils/backends/keys.py` by "
        "`python -m crawlhive.utils.backends.keys_doc > docs/redis-keys.md`;",
        "`tests/unit/test_keys.py` fails when this file is stale. Every key starts with the setting",
        "`REDIS_KEY_PREFIX` (default `ch`). These names are internal, not part of the wire contract.",
        "",
        "With `FRONTIER_SHARDS` above 1 (docs/contract.md §18.2) every key also has a Redis Cluster",
        "hash tag right after the prefix: `<prefix>:{<prefix>.<shard>}:` for the keys of one frontier",
        "shard (queues, domain indexes, leases, throttles, dedupe, a shard's part of a crawl record),",
        "`<prefix>:{<prefix>}:` for the cluster-wide ones; the shard of a queue is a hash of its domain.",
        "",
        "| Key | Type | TTL | Holds |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{r.pattern}` | {r.redis_type} | {r.ttl} | {r.doc} |" for r in document()]
    lists = SpiderLists("%(name)s:start_urls", "%(spider)s:items")
    lines += [
        "",
        "Redis-only mode (`crawlhive crawler --no-kafka`) adds three lists named as scrapy-redis names",
        "them, not under the prefix (`<spider>` is the spider's name; the first two follow the settings",
        "`REDIS_START_URLS_KEY` and `REDIS_ITEMS_KEY`):",
        "",
        "| Key | Type | TTL | Holds |",
        "|---|---|---|---|",
    ]
    for name in ("start_urls", "items", "dead_letter"):
        doc = " ".join((inspect.getdoc(getattr(SpiderLists, name)) or "").split())
        lines.append(f"| `{getattr(lists, name)('<spider>')}` | list | none | {doc} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    sys.stdout.write(render_markdown())
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
