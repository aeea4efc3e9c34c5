"""One trace per page across every process (docs/contract.md §26.3): a real cluster of ``crawlhive``
processes started through the CLI with the standard OTEL_* variables, exporting to a real OTLP/HTTP
receiver in this test process (:mod:`support.otlp`, the protobuf decoded with the OpenTelemetry
proto package).

A crawl fed with callers' ``traceparent`` (one seed through REST ``/feed``'s HTTP header, the others
as the incoming record's Kafka header) gives each page one trace whose spans come from the REST
service, the kafka-monitor, the crawler, the cleaner and the sink, each parented on the span of the
process before it, the first on the caller's; a page's link has a trace of its own, linked to the
page that found it. A crawler SIGKILLed while it fetches a page: the redis-monitor's reclaim of the
page's lease is a span of the page's trace, and the crawler that fetches it again continues under it.
"""

from __future__ import annotations

import gzip
import json
import secrets
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis
from support.chaos import Proc
from support.crawler import Crawler, TestSite, crawler_env, html, redis_for
from support.otlp import OtlpReceiver, Span

from crawlhive.app.embedded import free_port
from crawlhive.utils.backends.kafka_clients import ensure_topics, make_producer
from crawlhive.utils.config.settings import Settings

pytestmark = pytest.mark.timeout(240)

WORDS = (
    "The river valley holds three old mills, a bridge of grey stone and a market that opens every "
    "Saturday morning; farmers bring apples, cheese and bread, and the town keeps a small museum of "
    "the mills with their wheels, ledgers and the letters the millers wrote to each other over a "
    "hundred years of floods, fires and good harvests. "
)


def _page(title: str, *links: str) -> bytes:
    return html(*links, title=title, extra=f"<article><h1>{title}</h1><p>{title}: {WORDS * 2}</p></article>")


def _otel(receiver: OtlpReceiver) -> dict[str, Any]:
    """The standard variables that turn tracing on, to *receiver*, batches sent every 200 ms."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "OTEL_TRACES_SAMPLER": "parentbased_always_on",
    }


def _caller() -> tuple[str, str, str]:
    """A caller's trace id, span id and ``traceparent`` (sampled)."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def _feed_kafka(settings: Settings, request: dict[str, Any], traceparent: str) -> None:
    producer = make_producer(settings)
    try:
        headers = [("traceparent", traceparent.encode()), ("tracestate", b"caller=test")]
        producer.send(settings.topic("incoming"), json.dumps(request).encode(), headers=headers)
        producer.flush(timeout=20)
    finally:
        producer.close(timeout=5)


def _feed_rest(url: str, request: dict[str, Any], traceparent: str) -> None:
    sent = urllib.request.Request(
        f"{url}/feed",
        data=json.dumps(request).encode(),
        headers={"Content-Type": "application/json", "traceparent": traceparent},
        method="POST",
    )
    with urllib.request.urlopen(sent, timeout=30) as answer:
        assert json.load(answer)["status"] == "SUCCESS"


def _wait_rest(url: str, proc: Proc) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.alive(), proc.tail()
        try:
            with urllib.request.urlopen(url + "/", timeout=5) as answer:
                if json.load(answer).get("kafka_connected"):
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("the REST service did not connect to Kafka:\n" + proc.tail())


def _by_name(spans: list[Span]) -> dict[str, list[Span]]:
    out: dict[str, list[Span]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


#: The spans every fetched, cleaned and stored page has, by the process kind that makes them.
PAGE_SPANS = {
    "crawlhive.crawler.page": "crawlhive-crawler",
    "crawlhive.crawler.frontier_wait": "crawlhive-crawler",
    "crawlhive.crawler.throttle_wait": "crawlhive-crawler",
    "crawlhive.crawler.fetch": "crawlhive-crawler",
    "crawlhive.crawler.parse": "crawlhive-crawler",
    "crawlhive.crawler.emit": "crawlhive-crawler",
    "crawlhive.cleaner.clean": "crawlhive-cleaner",
    "crawlhive.sink.write": "crawlhive-sink",
}


def _complete(spans: list[Span], *more: str) -> bool:
    names = {s.name for s in spans}
    return all(name in names for name in [*PAGE_SPANS, *more])


def _check_page(spans: list[Span], url: str, page_parent: str) -> dict[str, Span]:
    """The spans of one fetched page's trace, checked: one of each of :data:`PAGE_SPANS`, from
    the process kind that makes it, each parented as the page's way goes; *page_parent*: the
    span id the crawler's page span hangs on. Returns them by name."""
    named = _by_name(spans)
    one: dict[str, Span] = {}
    for name, service in PAGE_SPANS.items():
        assert len(named.get(name, [])) == 1, (name, [(s.name, s.service) for s in spans])
        one[name] = named[name][0]
        assert one[name].service == service, (name, one[name].service)
        assert not one[name].error, (name, one[name].status_message)
    page = one["crawlhive.crawler.page"]
    assert page.parent_span_id == page_parent
    assert page.attributes["url.full"] == url and page.attributes["crawlhive.outcome"] == "crawled"
    for child in ("frontier_wait", "throttle_wait", "fetch", "parse", "emit"):
        assert one[f"crawlhive.crawler.{child}"].parent_span_id == page.span_id, child
    assert one["crawlhive.crawler.fetch"].attributes["http.response.status_code"] == 200
    # the spans of the page's way follow one another in time
    wait, fetch = one["crawlhive.crawler.frontier_wait"], one["crawlhive.crawler.fetch"]
    assert page.start_ns == wait.start_ns <= wait.end_ns <= fetch.start_ns <= fetch.end_ns <= page.end_ns
    assert one["crawlhive.cleaner.clean"].parent_span_id == one["crawlhive.crawler.emit"].span_id
    assert one["crawlhive.cleaner.clean"].attributes["url.full"] == url
    assert one["crawlhive.sink.write"].parent_span_id == one["crawlhive.cleaner.clean"].span_id
    assert one["crawlhive.sink.write"].attributes["url.full"] == url
    assert one["crawlhive.sink.write"].attributes["crawlhive.sink.store"] == "file"
    return one


class Cluster:
    """The processes of one test, with tracing on: kafka-monitor, redis-monitor, cleaner, a files
    sink (and REST when asked); crawlers are started by the test."""

    def __init__(self, settings: Settings, tmp_path: Path, receiver: OtlpReceiver, rest: bool = False) -> None:
        self.settings = settings
        self.tmp_path = tmp_path
        # crawler_env's quick test values (no throttle, loopback allowed) for every process, leases
        # of 3 s (a killed crawler's page is reclaimed soon), files rolled every second
        quick = {"DOWNLOAD_TIMEOUT": 30, "LEASE_TIMEOUT": 3, "SINK_ROLL_SECONDS": 1}
        self.env = crawler_env(settings, **quick, **_otel(receiver))
        self.rest_url = ""
        self.procs = [
            Proc("kafka-monitor", ["kafka-monitor"], self.env, tmp_path),
            Proc("redis-monitor", ["redis-monitor"], self.env, tmp_path),
            Proc("cleaner", ["cleaner"], self.env, tmp_path),
            Proc("sink", ["sink", "--to", f"file://{tmp_path}/files/?format=jsonl"], self.env, tmp_path),
        ]
        if rest:
            port = free_port("127.0.0.1")
            self.rest_url = f"http://127.0.0.1:{port}"
            self.procs.append(Proc("rest", ["rest"], {**self.env, "REST_PORT": str(port)}, tmp_path))
        self.crawlers: list[Crawler] = []

    def start(self) -> None:
        ensure_topics(self.settings, [self.settings.topic(t) for t in ("incoming", "crawled_firehose", "cleaned")])
        for proc in self.procs:
            proc.start()
        if self.rest_url:
            _wait_rest(self.rest_url, self.procs[-1])

    def crawler(self, client: redis.Redis) -> Crawler:
        crawler = Crawler(self.env, self.tmp_path, name=f"crawler-{len(self.crawlers)}")
        self.crawlers.append(crawler)
        crawler.wait_ready(client, self.settings["REDIS_KEY_PREFIX"], count=len(self.crawlers), timeout=120)
        return crawler

    def logs(self) -> str:
        return "\n".join(
            [*(f"--- {p.name}\n{p.tail(2000)}" for p in self.procs), *(c.output()[-2000:] for c in self.crawlers)]
        )

    def stop(self) -> list[str]:
        """Stop everything; the problems of the logs (a WARNING or worse, a traceback) of the
        processes that were not killed."""
        codes = []
        for crawler in self.crawlers:
            if crawler.proc.poll() is None:
                codes.append(("crawler", crawler.terminate(timeout=60), crawler.output()))
        for proc in self.procs:
            codes.append((proc.name, proc.terminate(), proc.tail(20000)))
        problems = []
        for name, code, log in codes:
            if code != 0:
                problems.append(f"{name} exited {code}")
            problems += [f"{name}: {line}" for line in log.splitlines() if any(w in line for w in NOISE)]
        return problems


NOISE = (" WARNING ", " ERROR ", " CRITICAL ", "Traceback")


def test_one_trace_per_page_across_every_process(settings: Settings, tmp_path: Path) -> None:
    site = TestSite()
    site.start()
    site.page("/a", _page("Alpha", "/d"))
    site.page("/b", _page("Bravo"))
    site.page("/c", _page("Charlie"))
    site.page("/d", _page("Delta"))
    client = redis_for(settings["REDIS_URL"])
    with OtlpReceiver() as receiver:
        cluster = Cluster(settings, tmp_path, receiver, rest=True)
        problems: list[str] = []
        try:
            cluster.start()
            cluster.crawler(client)
            callers = {path: _caller() for path in ("/a", "/b", "/c")}
            request = {"appid": "traced", "crawlid": "t1", "maxdepth": 0}
            # /a through REST (the HTTP header), /b and /c as Kafka records with the header
            _feed_rest(cluster.rest_url, {**request, "url": site.url("/a"), "maxdepth": 1}, callers["/a"][2])
            _feed_kafka(settings, {**request, "url": site.url("/b")}, callers["/b"][2])
            _feed_kafka(settings, {**request, "url": site.url("/c")}, callers["/c"][2])

            def link_trace(spans: list[Span]) -> list[Span]:
                page = [
                    s
                    for s in spans
                    if s.name == "crawlhive.crawler.page" and s.attributes.get("url.full") == site.url("/d")
                ]
                return [s for s in spans if page and s.trace_id == page[0].trace_id]

            receiver.wait_for(
                "complete traces of the 3 seeds and the link",
                lambda spans: (
                    all(
                        _complete([s for s in spans if s.trace_id == trace_id], "crawlhive.kafka_monitor.accept")
                        for trace_id, _, _ in callers.values()
                    )
                    and _complete(link_trace(spans))
                ),
                timeout=120,
                why=cluster.logs,
            )
        finally:
            problems = cluster.stop()
            client.close()
            site.stop()
        spans = receiver.snapshot()
    assert not problems, "\n".join(problems)

    seed_page_spans = {}
    for path, (trace_id, caller_span, _) in callers.items():
        trace = [s for s in spans if s.trace_id == trace_id]
        ids = {s.span_id for s in trace}
        # every span's parent is a span of the trace, but the first's: the caller's
        assert all(s.parent_span_id in ids for s in trace if s.parent_span_id != caller_span), path
        [first] = [s for s in trace if s.parent_span_id == caller_span]
        [accept] = _by_name(trace)["crawlhive.kafka_monitor.accept"]
        assert accept.service == "crawlhive-kafka-monitor"
        if path == "/a":  # through REST: the REST span first, the kafka-monitor's under it
            assert first.name == "crawlhive.rest.feed" and first.service == "crawlhive-rest"
            assert accept.parent_span_id == first.span_id
        else:
            assert first is accept
        one = _check_page(trace, site.url(path), page_parent=accept.span_id)
        assert {s.service for s in trace} >= {
            "crawlhive-kafka-monitor",
            "crawlhive-crawler",
            "crawlhive-cleaner",
            "crawlhive-sink",
        }
        seed_page_spans[path] = one["crawlhive.crawler.page"]
        assert one["crawlhive.crawler.page"].attributes["crawlhive.depth"] == 0

    # the link /d of /a: a trace of its own, its page span the root, linked to /a's page span
    [page_d] = [
        s for s in spans if s.name == "crawlhive.crawler.page" and s.attributes.get("url.full") == site.url("/d")
    ]
    assert page_d.trace_id not in {c[0] for c in callers.values()}
    assert page_d.links == [(seed_page_spans["/a"].trace_id, seed_page_spans["/a"].span_id)]
    trace_d = [s for s in spans if s.trace_id == page_d.trace_id]
    _check_page(trace_d, site.url("/d"), page_parent="")
    assert all(s.parent_span_id in {x.span_id for x in trace_d} for s in trace_d if s is not page_d)
    assert page_d.attributes["crawlhive.depth"] == 1
    # one trace per page: no span of a page is in another page's trace
    urls: dict[str, set[str]] = {}
    for span in spans:
        if "url.full" in span.attributes:
            urls.setdefault(span.trace_id, set()).add(span.attributes["url.full"])
    assert len(urls) == 4 and all(len(found) == 1 for found in urls.values()), urls


def test_a_page_reclaimed_after_a_crawler_sigkill_says_so_in_its_trace(settings: Settings, tmp_path: Path) -> None:
    released = threading.Event()
    site = TestSite()
    site.start()

    def slow(seen: Any) -> tuple[int, dict[str, str], bytes]:
        released.wait(60)  # the first crawler is killed while it waits here
        return 200, {"Content-Type": "text/html; charset=utf-8"}, _page("Slow")

    site.handler("/slow", slow)
    client = redis_for(settings["REDIS_URL"])
    trace_id, caller_span, traceparent = _caller()
    with OtlpReceiver() as receiver:
        cluster = Cluster(settings, tmp_path, receiver)
        problems: list[str] = []
        try:
            cluster.start()
            first = cluster.crawler(client)
            _feed_kafka(
                settings, {"url": site.url("/slow"), "appid": "traced", "crawlid": "k1", "maxdepth": 0}, traceparent
            )
            deadline = time.monotonic() + 60
            while not site.hits("/slow"):
                assert time.monotonic() < deadline, cluster.logs()
                time.sleep(0.05)
            first.kill()  # SIGKILL: its lease expires (LEASE_TIMEOUT 3 s) and the redis-monitor reclaims it
            killed_pid = first.proc.pid
            released.set()
            cluster.crawler(client)
            receiver.wait_for(
                "the reclaimed page's complete trace",
                lambda spans: _complete([s for s in spans if s.trace_id == trace_id], "crawlhive.frontier.reclaim"),
                timeout=120,
                why=cluster.logs,
            )
        finally:
            released.set()
            problems = cluster.stop()
            client.close()
            site.stop()
        trace = receiver.trace(trace_id)
    # the killed crawler logged nothing more; the others no WARNING: the reclaim is the normal way
    assert not problems, "\n".join(problems)

    named = _by_name(trace)
    [accept] = named["crawlhive.kafka_monitor.accept"]
    assert accept.parent_span_id == caller_span
    [reclaim] = named["crawlhive.frontier.reclaim"]
    assert reclaim.service == "crawlhive-redis-monitor" and not reclaim.error
    assert reclaim.parent_span_id == accept.span_id
    assert reclaim.attributes["crawlhive.reclaimed"] is True and reclaim.attributes["crawlhive.retry_times"] == 0
    # the page fetched again: its spans under the reclaim, by the second crawler
    done = [s for s in named["crawlhive.crawler.page"] if s.pid != killed_pid]
    assert len(done) == 1 and done[0].attributes["crawlhive.retry_times"] == 1
    one = _check_page([s for s in trace if s.pid != killed_pid], site.url("/slow"), page_parent=reclaim.span_id)
    assert one["crawlhive.crawler.page"].start_ns >= reclaim.start_ns  # queued again by the reclaim
    # whatever the killed crawler exported before it died is of this trace; only its spans may
    # have a parent that never arrived (its page span, which it never ended)
    ids = {s.span_id for s in trace}
    orphans = [s for s in trace if s.parent_span_id not in ids and s.parent_span_id != caller_span]
    assert all(s.pid == killed_pid for s in orphans), [(s.name, s.service, s.pid) for s in orphans]


def test_errors_are_exported_when_the_sampler_keeps_no_trace(settings: Settings, tmp_path: Path) -> None:
    """A ratio of 0 and callers that did not sample: a page that fails (its site refuses every
    connection) still exports its failed spans (each fetch, and the page that ended with a dead
    letter), while a page crawled, cleaned and stored fine exports nothing."""
    site = TestSite()
    site.start()
    site.page("/fine", _page("Fine"))
    closed = free_port("127.0.0.1")  # nothing listens there: every connection is refused
    client = redis_for(settings["REDIS_URL"])
    good_trace, _, good_parent = _caller()
    bad_trace, _, bad_parent = _caller()
    unsampled = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"}
    with OtlpReceiver() as receiver:
        cluster = Cluster(settings, tmp_path, receiver)
        cluster.env.update(unsampled)
        problems: list[str] = []
        try:
            cluster.start()
            cluster.crawler(client)
            request = {"appid": "traced", "crawlid": "e1", "maxdepth": 0}
            _feed_kafka(settings, {**request, "url": site.url("/fine")}, good_parent[:-2] + "00")
            _feed_kafka(settings, {**request, "url": f"http://127.0.0.1:{closed}/gone"}, bad_parent[:-2] + "00")
            receiver.wait_for(
                "the failed page's spans",
                lambda spans: any(
                    s.trace_id == bad_trace and s.name == "crawlhive.crawler.page" and s.error for s in spans
                ),
                timeout=120,
                why=cluster.logs,
            )
            # the fine page is stored; its spans, had they been exported, would have arrived by now
            files = tmp_path / "files"
            deadline = time.monotonic() + 60
            while not any(b"/fine" in gzip.decompress(p.read_bytes()) for p in files.rglob("*.jsonl.gz")):
                assert time.monotonic() < deadline, cluster.logs()
                time.sleep(0.2)
            time.sleep(2.0)  # ten export intervals
        finally:
            problems = cluster.stop()
            client.close()
            site.stop()
        spans = receiver.snapshot()
    assert [s for s in spans if s.trace_id == good_trace] == []
    bad = [s for s in spans if s.trace_id == bad_trace]
    assert bad and all(s.error for s in bad), [(s.name, s.error) for s in bad]
    names = {s.name for s in bad}
    assert names == {"crawlhive.crawler.page", "crawlhive.crawler.fetch"}, names
    [page] = [s for s in bad if s.name == "crawlhive.crawler.page"]
    assert page.attributes["crawlhive.outcome"] == "failed"
    assert all("ConnectionRefusedError" in s.status_message for s in bad if s.name == "crawlhive.crawler.fetch")
    # every process exited 0; the crawler logged the refused connections (Scrapy's ERROR lines
    # and their tracebacks: the failure this test makes), the others nothing
    assert not [line for line in problems if not line.startswith("crawler: ")], "\n".join(problems)
