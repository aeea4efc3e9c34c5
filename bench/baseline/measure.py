"""A Scrapy extension that measures a crawl from inside its process (used by every crawl bench).

From ``spider_opened`` to the last response: the responses received, the wall time, the CPU time
(user + system) and the peak resident memory of the process, with a few of Scrapy's own counters;
written as JSON to the file the Scrapy setting ``BENCH_OUT`` names when the spider closes.
"""

from __future__ import annotations

import json
import resource
import time
from typing import Any

from scrapy import signals


class Measure:
    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler
        self.path = crawler.settings.get("BENCH_OUT")
        self.responses = 0
        self.started = 0.0
        self.last = 0.0
        self.usage: Any = None
        crawler.signals.connect(self.opened, signals.spider_opened)
        crawler.signals.connect(self.received, signals.response_received)
        crawler.signals.connect(self.closed, signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Any) -> Measure:
        return cls(crawler)

    def opened(self, spider: Any) -> None:
        self.started = time.monotonic()
        self.usage = resource.getrusage(resource.RUSAGE_SELF)

    def received(self, response: Any, request: Any, spider: Any) -> None:
        self.responses += 1
        self.last = time.monotonic()

    def closed(self, spider: Any, reason: str) -> None:
        now = time.monotonic()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        user = usage.ru_utime - self.usage.ru_utime
        system = usage.ru_stime - self.usage.ru_stime
        crawling = max((self.last or now) - self.started, 1e-9)
        stats = self.crawler.stats.get_stats()
        result = {
            "reason": reason,
            "pages": self.responses,
            "elapsed_s": round(crawling, 3),
            "pages_per_s": round(self.responses / crawling, 1),
            "cpu_s": round(user + system, 2),
            "cpu_pct": round(100.0 * (user + system) / max(now - self.started, 1e-9), 1),
            "user_s": round(user, 2),
            "sys_s": round(system, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024.0, 1),
            "items": stats.get("item_scraped_count", 0),
            "requests": stats.get("downloader/request_count", 0),
            "dupes_filtered": stats.get("dupefilter/filtered", 0),
            "status_200": stats.get("downloader/response_status_count/200", 0),
        }
        if self.path:
            with open(self.path, "w") as out:
                json.dump(result, out)
