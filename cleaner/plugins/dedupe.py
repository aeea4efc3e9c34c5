"""``content_hash`` and the per-crawl content dedupe (docs/contract.md §13): SHA-256 hex of
``text``; within one crawl a content already emitted (for CLEANER_DEDUPE_TTL) is not emitted again.

One Lua call per batch (``utils/backends/lua/cleaner_dedupe.lua``); each content key remembers the record
that first emitted it, so that record, delivered again after a crash, is not its own duplicate.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Self

from crawlhive.cleaner.page import Duplicate
from crawlhive.cleaner.plugins import CleanerPlugin
from crawlhive.utils.backends.scripts import scripts

if TYPE_CHECKING:
    from crawlhive.cleaner.cleaner import Cleaner
    from crawlhive.cleaner.page import Page
    from crawlhive.utils.backends.keys import Keys
    from crawlhive.utils.backends.redis_types import RedisClient


class DedupePlugin(CleanerPlugin):
    name = "dedupe"

    def __init__(self, redis: RedisClient, keys: Keys, ttl_s: float) -> None:
        self.redis = redis
        self.keys = keys
        self.ttl_s = max(1, int(ttl_s))

    @classmethod
    def from_cleaner(cls, cleaner: Cleaner) -> Self:
        return cls(cleaner.redis, cleaner.keys, cleaner.settings.CLEANER_DEDUPE_TTL)

    def process_batch(self, pages: list[Page]) -> list[Page]:
        for page in pages:
            page.record["content_hash"] = hashlib.sha256((page.record.get("text") or "").encode()).hexdigest()
        if not pages:
            return []
        keys = [
            self.keys.cleaned_content(str(p.item["appid"]), str(p.item["crawlid"]), p.record["content_hash"])
            for p in pages
        ]
        flags = scripts(self.redis)["cleaner_dedupe"](keys=keys, args=[self.ttl_s, *(p.origin for p in pages)])
        kept = []
        for page, flag in zip(pages, flags, strict=True):
            if int(flag):
                kept.append(page)
            else:
                page.extra["outcome"] = Duplicate(page.record["content_hash"])
        return kept
