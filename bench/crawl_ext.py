"""Scrapy extension loaded into the crawler processes of ``bench/crawl.py`` (bench only).

Counts Redis round trips (each ``send_packed_command`` of a blocking redis-py connection: one per
command or per pipeline; plus each pipeline of the crawler's asyncio ``ScriptBatcher``) and records
absolute times of the first and last response, written as JSON to the file named by the Scrapy
setting ``BENCH_RTT_OUT`` when the spider closes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import psutil
from redis.connection import AbstractConnection
from scrapy import signals

from crawlhive.crawler.runtime import CrawlRuntime

_COUNT = [0]
#: redis-py leaves it unannotated; typed here so that calling it is checked.
_original: Callable[[AbstractConnection, Any, bool], None] = AbstractConnection.send_packed_command


def _counting(self: Any, command: Any, check_health: bool = True) -> None:
    _COUNT[0] += 1
    _original(self, command, check_health)


class RoundTrips:
    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler
        self.out = crawler.settings.get("BENCH_RTT_OUT")
        self.pages = 0
        self.first: float | None = None
        self.last: float | None = None
        self.rtt_at_first = 0
        self.batcher = CrawlRuntime.of(crawler).batcher
        AbstractConnection.send_packed_command = _counting  # type: ignore[method-assign]
        crawler.signals.connect(self.response, signals.response_received)
        crawler.signals.connect(self.closed, signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Any) -> RoundTrips:
        return cls(crawler)

    def response(self, response: Any, request: Any, spider: Any) -> None:
        if self.first is None:
            self.first = time.time()
            self.rtt_at_first = _COUNT[0] + self.batcher.round_trips
        self.pages += 1
        self.last = time.time()

    def closed(self, spider: Any, reason: str) -> None:
        if self.out:
            with open(self.out, "w") as f:
                json.dump(
                    {
                        "pages": self.pages,
                        "first": self.first,
                        "last": self.last,
                        "round_trips": _COUNT[0] + self.batcher.round_trips - self.rtt_at_first,
                        "batched_calls": self.batcher.calls,
                        "batched_round_trips": self.batcher.round_trips,
                    },
                    f,
                )


class Sampler:
    """Every ``BENCH_SAMPLE_S`` seconds (default 5), one JSON line appended to ``BENCH_SAMPLES_OUT``:
    the wall time, the responses so far, the process's CPU seconds and its resident memory
    (``bench/soak.py`` reads them while the crawler runs)."""

    def __init__(self, crawler: Any) -> None:
        from twisted.internet.task import LoopingCall

        self.path = crawler.settings.get("BENCH_SAMPLES_OUT")
        self.pages = 0
        self.loop = LoopingCall(self.sample)
        crawler.signals.connect(self.response, signals.response_received)
        crawler.signals.connect(self.opened, signals.spider_opened)
        crawler.signals.connect(self.closed, signals.spider_closed)
        self.every = float(crawler.settings.get("BENCH_SAMPLE_S") or 5)

    @classmethod
    def from_crawler(cls, crawler: Any) -> Sampler:
        return cls(crawler)

    def response(self, response: Any, request: Any, spider: Any) -> None:
        self.pages += 1

    def opened(self, spider: Any) -> None:
        self.loop.start(self.every, now=True)

    def closed(self, spider: Any, reason: str) -> None:
        if self.loop.running:
            self.loop.stop()
        self.sample()

    def sample(self) -> None:
        import resource

        usage = resource.getrusage(resource.RUSAGE_SELF)
        line = {
            "t": time.time(),
            "pages": self.pages,
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "rss_mb": round(psutil.Process().memory_info().rss / 2**20, 1),
        }
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")
