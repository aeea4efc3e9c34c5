"""Scrapy extension of ``bench/realweb.py`` (bench only): where a crawler process spends its CPU.

Method: a deterministic profiler (cProfile) runs in the reactor thread from ``spider_opened`` to
``spider_closed``; each function's own time (``tottime``) is put in one category by the file it is
in (or, for a built-in, by its name): TLS (pyOpenSSL, cryptography, Twisted's TLS), download
(Scrapy's downloader and middlewares, Twisted's HTTP client and reactor, sockets), parse (lxml,
parsel, decoding the response), links (link extraction and URL handling), scheduling (Redis and the
frontier for crawlhive; Scrapy's scheduler, queues and dupefilter for plain Scrapy), Kafka
(kafka-python and the item's encoding) and other (the Scrapy engine, spider and item code, the
rest). The CPU time of the process's other threads (kafka-python's I/O thread, Twisted's thread
pool) is read from ``/proc/self/task`` and reported on its own. The profiler slows the process down
(about 2x), so the bench reports the shares, scaled to the CPU per page of unprofiled runs.

Written as JSON to the file named by the Scrapy setting ``BENCH_PROFILE_OUT``.
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import threading
from pathlib import Path
from typing import Any

from scrapy import signals

#: (category, substrings of a file path or built-in's name), first match wins.
CATEGORIES = (
    ("tls", ("OpenSSL", "cryptography", "twisted/protocols/tls.py", "_sslverify", "downloader/tls.py",
             "contextfactory.py", "_ssl", "service_identity")),
    ("kafka", ("kafka/", "crawler/emitter.py", "crawler/items.py", "ujson", "json/encoder", "base64",
               "crc32c", "lz4")),
    ("scheduling", ("redis/", "crawlhive/utils/frontier", "crawler/scheduler.py", "crawler/admit.py",
                    "crawler/leases.py", "crawler/batching.py", "crawlhive/utils/scripts", "scrapy/core/scheduler",
                    "queuelib", "scrapy/pqueues", "scrapy/squeues", "dupefilters", "utils/request.py", "hashlib")),
    ("links", ("crawler/links.py", "crawler/requests.py", "linkextractors", "w3lib/url", "scrapy/utils/url",
               "urllib/parse", "tldextract", "re2", "crawler/middlewares/", "spidermw", "spidermiddlewares",
               "scrapy/spiders/crawl.py", "netguard", "crawlhive/utils/domains", "crawlhive/utils/patterns")),
    ("parse", ("lxml", "parsel", "scrapy/http/response", "w3lib/encoding", "scrapy/selector", "cssselect",
               "encodings/", "_codecs", "decode")),
    ("download", ("scrapy/core/downloader", "downloadermiddlewares", "twisted/web", "twisted/internet",
                  "twisted/protocols", "h2/", "socket", "select", "epoll", "scrapy/core/http", "scrapy/http/headers",
                  "scrapy/utils/reactor", "'recv'", "'send'", "zlib", "brotli")),
)  # fmt: skip


def categorise(stats: pstats.Stats) -> dict[str, float]:
    """Seconds of own time per category (see :data:`CATEGORIES`)."""
    totals: dict[str, float] = {}
    for (filename, _line, name), row in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{filename} {name}".replace("\\", "/")
        category = next((c for c, marks in CATEGORIES if any(m in where for m in marks)), "other")
        totals[category] = totals.get(category, 0.0) + row[2]
    return totals


def thread_cpu() -> dict[str, float]:
    """CPU seconds of this process's main thread and of all its other threads (from /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    main, others = 0.0, 0.0
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu = (int(fields[11]) + int(fields[12])) / ticks
        if int(task.name) == os.getpid():
            main += cpu
        else:
            others += cpu
    return {"main": main, "others": others}


class Profile:
    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler
        self.path = crawler.settings.get("BENCH_PROFILE_OUT")
        self.profiler = cProfile.Profile()
        self.responses = 0
        self.threads: dict[str, float] = {}
        crawler.signals.connect(self.opened, signals.spider_opened)
        crawler.signals.connect(self.received, signals.response_received)
        crawler.signals.connect(self.closed, signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Any) -> Profile:
        return cls(crawler)

    def opened(self, spider: Any) -> None:
        self.threads = thread_cpu()
        if self.path:
            self.profiler.enable()

    def received(self, response: Any, request: Any, spider: Any) -> None:
        self.responses += 1

    def closed(self, spider: Any, reason: str) -> None:
        if not self.path:
            return
        self.profiler.disable()
        now = thread_cpu()
        result = {
            "pages": self.responses,
            "categories": categorise(pstats.Stats(self.profiler)),
            "main_thread_s": now["main"] - self.threads["main"],
            "other_threads_s": now["others"] - self.threads["others"],
            "threads": [t.name for t in threading.enumerate()],
        }
        Path(self.path).write_text(json.dumps(result))
