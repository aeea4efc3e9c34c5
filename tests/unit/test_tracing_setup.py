"""Tracing's set-up (docs/contract.md §26.3): off builds nothing, the standard variables turn it on,
other exporters are refused naming the variable, and errors are exported whatever the sampler drops
(to a real OTLP/HTTP receiver, decoded with the OpenTelemetry proto package)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.otlp import OtlpReceiver

from crawlhive.utils.backends import tracing
from crawlhive.utils.config.errors import SettingsError


def test_the_standard_variables_turn_tracing_on() -> None:
    assert not tracing.wanted({})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"})
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "otlp"})  # the SDK's default endpoint
    assert not tracing.wanted({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"})
    assert not tracing.wanted({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"})
    assert tracing.wanted({"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"})
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER='zipkin'"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL='grpc'"),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='http/json'",
        ),
    ],
)
def test_an_exporter_crawlhive_lacks_is_refused_naming_the_variable(environ: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named.replace("/", ".")):
        tracing.wanted(environ)


#: Run in a fresh interpreter: what a process of each kind sets up with the given environment.
PROBE = """
import json, sys
from crawlhive.utils.backends import tracing
from crawlhive.utils.frontier.model import FrontierRequest
from opentelemetry import trace
on = tracing.configure("crawler")
from crawlhive.crawler.settings import scrapy_settings
from crawlhive.utils.config.settings import Settings
middlewares = scrapy_settings(Settings.from_overrides(), "link")["DOWNLOADER_MIDDLEWARES"]
request = FrontierRequest(url="http://example.com/", appid="a", crawlid="c")
print(json.dumps({
    "on": on,
    "sdk_loaded": "opentelemetry.sdk.trace" in sys.modules,
    "provider": type(trace.get_tracer_provider()).__name__,
    "ours": type(tracing._provider).__name__,
    "trace_middleware": any("TraceMiddleware" in name for name in middlewares),
    "member_has_trace": b"trace" in request.encode(),
}))
tracing.shutdown()
"""


def _probe(**environ: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(environ)
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_with_tracing_off_nothing_is_set_up() -> None:
    """The first probe gives tracing the chance to be on (an endpoint set): the SDK's tracing is
    loaded and the fetch middleware is there. Without the variables, neither is; nothing per page
    either. (redis-py imports the SDK's metrics package whenever the SDK is installed, for its own
    metrics, off unless asked for: hence the check on ``opentelemetry.sdk.trace``.)"""
    on = _probe(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", OTEL_BSP_EXPORT_TIMEOUT="100")
    assert on["on"] is True and on["sdk_loaded"] is True and on["trace_middleware"] is True
    assert on["ours"] == "TracerProvider"
    for environ in ({}, {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}):
        off = _probe(**environ)
        assert off == {
            "on": False,
            "sdk_loaded": False,
            "provider": "ProxyTracerProvider",  # the API's no-op default: no SDK provider set
            "ours": "NoneType",
            "trace_middleware": False,
            "member_has_trace": False,
        }, environ


def test_errors_are_exported_when_the_sampler_drops_their_trace() -> None:
    """always_off drops every trace; a span that ends in error is exported all the same (and a
    parent-based sampler under a remote parent that was not sampled does the same), the others not."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, TraceIdRatioBased
    from opentelemetry.trace import set_span_in_context

    with OtlpReceiver() as receiver:
        for sampler in (ALWAYS_OFF, ParentBased(TraceIdRatioBased(0.0))):
            provider = TracerProvider(sampler=tracing.KeepErrorsSampler(sampler))
            exporter = OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces")
            provider.add_span_processor(tracing.KeepErrorsProcessor(SimpleSpanProcessor(exporter)))
            tracer = provider.get_tracer("test")
            remote = tracing.context_of_headers([("traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-00")])
            fine = tracer.start_span("fine", context=remote)
            fine.end()
            parent = tracer.start_span("parent", context=remote)
            broken = tracer.start_span("broken", context=set_span_in_context(parent))
            tracing.fail(broken, "the page failed")
            broken.end()
            parent.end()
            provider.shutdown()
        names = [(s.name, s.trace_id, s.parent_span_id, s.error, s.status_message) for s in receiver.snapshot()]
        assert [n[0] for n in names] == ["broken", "broken"], names
        assert all(n[1] == "1" * 32 and n[3] and n[4] == "the page failed" for n in names), names


def test_frontier_trace_round_trip_and_hostile_values() -> None:
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("test")
    remote = tracing.context_of_headers(
        [("TraceParent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01"), ("tracestate", b"k=v")]
    )
    span = tracer.start_span("s", context=remote)
    value = tracing.frontier_trace(span, tracing.LINK, enqueued_ns=1_700_000_000_122_000_001)  # rounded up to ms
    relation, at_ns, context = tracing.parse_frontier_trace(value) or ("", 0, None)
    assert relation == tracing.LINK and at_ns == 1_700_000_000_123_000_000 and context is not None
    got = tracing.span_context_of(context)
    assert f"{got.trace_id:032x}" == "a" * 32 and got.span_id == span.get_span_context().span_id
    assert got.trace_state.get("k") == "v"
    again = tracing.requeued(value)
    assert again.split(" ")[0] == tracing.LINK and again.split(" ", 2)[2] == value.split(" ", 2)[2]
    assert int(again.split(" ")[1]) * 1_000_000 > 1_700_000_000_123_000_000
    assert tracing.requeued("junk") == "junk"
    for hostile in (
        None,
        7,
        "",
        "c",
        "x 1 00-" + "a" * 32 + "-" + "b" * 16 + "-01",
        "c one two",
        "c 1 zz",
        "c 1 " + "0" * 600,
    ):
        assert tracing.parse_frontier_trace(hostile) is None, hostile
    assert tracing.incoming_headers("00-" + "a" * 32 + "-" + "b" * 16 + "-01", "k=v") == [
        ("traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01"),
        ("tracestate", b"k=v"),
    ]
    for bad in ("", "00-xyz", "00-" + "a" * 32 + "-" + "b" * 16 + "-01\r\nX: y", None):
        assert tracing.incoming_headers(bad, "k=v") is None


def test_a_queued_requests_trace_survives_its_member_and_a_retry() -> None:
    """The ``trace`` field is part of the queue member (JSON form: a plain link member has no room
    for it), comes back from it unchanged, and a retry keeps it; without it the member is as before."""
    from crawlhive.utils.frontier.model import FrontierRequest, OptionSet, retried

    value = "c 1700000000123 00-" + "a" * 32 + "-" + "b" * 16 + "-01 k=v"
    plain = FrontierRequest(url="http://example.com/a", appid="a b", crawlid="c", maxdepth=2)
    plain.option_set = OptionSet.of(plain)
    traced = FrontierRequest(url="http://example.com/a", appid="a b", crawlid="c", maxdepth=2, trace=value)
    traced.option_set = plain.option_set
    assert b"trace" not in plain.member() and plain.member().startswith(b"0 ")
    member = traced.member()
    assert member.startswith(b'{"o":') and value.encode() in member
    back = FrontierRequest.from_member(
        member, spiderid="link", appid="a b", crawlid="c", domain="example.com", priority=1, options=plain.option_set
    )
    assert back.trace == value and back.url == traced.url and back.maxdepth == 2
    assert retried(back).trace == value and retried(back).member() != member
    assert FrontierRequest.decode(traced.encode()).trace == value  # the self-contained form too


def test_a_process_asked_for_another_exporter_stops_at_start_naming_the_variable() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_TRACES_EXPORTER="zipkin", REDIS_URL="redis://127.0.0.1:9/0")  # never reached
    done = subprocess.run(
        [sys.executable, "-m", "crawlhive.app.cli", "cleaner"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == (
        "crawlhive cleaner: OTEL_TRACES_EXPORTER='zipkin': crawlhive exports traces with 'otlp' (OTLP over HTTP)"
        " or not at all ('none')"
    )
