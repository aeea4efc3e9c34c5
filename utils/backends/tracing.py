"""OpenTelemetry tracing of a page across processes (docs/contract.md §26.3): one module.

Off unless the standard ``OTEL_*`` variables turn it on; then each process exports its spans with
the OpenTelemetry SDK's OTLP/HTTP exporter (``opentelemetry-exporter-otlp-proto-http``: the
standard exporter, its endpoint, headers, timeouts and batching read from the standard variables by
the SDK itself). On means ``OTEL_TRACES_EXPORTER`` names ``otlp``, or is unset while
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set;
``OTEL_SDK_DISABLED=true`` and ``OTEL_TRACES_EXPORTER=none`` keep it off. Sampling is the SDK's,
from ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG`` (default ``parentbased_always_on``),
with one addition: **errors are always kept** (:class:`KeepErrorsSampler`, :class:`KeepErrorsProcessor`).

Off costs one check of a module global (:data:`ON`) per page and place: :func:`configure` sets no
SDK provider and builds nothing, and nothing of a page's way carries a trace (its frontier request
has no ``trace`` field, its Kafka records no header).

The context travels explicitly, never through ``contextvars``: Twisted's callbacks (the crawler) and
the workers' batches run many pages interleaved in one thread, where an implicit "current span"
would be some other page's. Each place parents its spans on the context it was handed: the
incoming record's ``traceparent`` header, the frontier request's ``trace`` field, the crawled or
cleaned record's header (:func:`context_of_headers`, :func:`headers_of`, :func:`frontier_trace`,
:func:`parse_frontier_trace`).

Why a module of our own around the SDK and not its auto-configuration (``opentelemetry-distro``'s
``opentelemetry-instrument``): that one wraps the whole interpreter and instruments libraries
(redis-py, kafka) with a span per call, thousands per page; crawlhive wants a few spans per page,
and a tracer provider only where the variables ask for one.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

# The OpenTelemetry API (no SDK: that one is imported by configure(), only when tracing is on).
# redis-py imports it too whenever the SDK is installed, so it costs no import time of its own.
from opentelemetry.context import Context
from opentelemetry.trace import (
    Link,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    get_current_span,
    set_span_in_context,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from crawlhive.utils.config.errors import SettingsError

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

__all__ = ["Context", "Link", "SpanKind", "set_span_in_context"]  # for the services' spans

logger = logging.getLogger(__name__)

#: The W3C Trace Context header names (https://www.w3.org/TR/trace-context/): of an incoming
#: request's Kafka record, of REST ``/feed``'s HTTP request, of crawled and cleaned records.
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

ON = False
"""True once :func:`configure` found tracing turned on: the one check every traced place makes."""

_tracer: Tracer | None = None
_provider: Any = None
_sampling: Any = None  # the SDK's sampling module, once configure() imported it
_PROPAGATOR = TraceContextTextMapPropagator()


def wanted(environ: dict[str, str] | os._Environ[str] | None = None) -> bool:
    """Whether the standard variables of *environ* (default: the process's) turn tracing on.

    Raises:
        SettingsError: ``OTEL_TRACES_EXPORTER`` names an exporter other than ``otlp``/``none``, or
            ``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL`` one other than ``http/protobuf`` (the only
            exporter crawlhive installs).
    """
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = [e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()]
    other = [e for e in exporters if e not in ("otlp", "none")]
    if other:
        raise SettingsError(
            f"OTEL_TRACES_EXPORTER={env['OTEL_TRACES_EXPORTER']!r}: crawlhive exports traces with 'otlp' "
            "(OTLP over HTTP) or not at all ('none')"
        )
    if exporters:
        on = "otlp" in exporters
    else:
        on = bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
    if on:
        for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
            protocol = env.get(name, "").strip()
            if protocol and protocol != "http/protobuf":
                raise SettingsError(
                    f"{name}={protocol!r}: crawlhive's OTLP exporter speaks 'http/protobuf' only "
                    "(the collector's OTLP/HTTP port, 4318 by default)"
                )
            if protocol:
                break
    return on


def configure(kind: str) -> bool:
    """Set up tracing for a process of *kind* (``crawler``, ``sink``, …) if the standard variables
    ask for it (:func:`wanted`); returns :data:`ON`. Called once at a process's start; a second
    call changes nothing.

    On: one SDK ``TracerProvider`` with the sampler of ``OTEL_TRACES_SAMPLER`` wrapped in
    :class:`KeepErrorsSampler`, the OTLP/HTTP exporter behind a ``BatchSpanProcessor`` (the
    ``OTEL_BSP_*`` variables) wrapped in :class:`KeepErrorsProcessor`, and a resource whose
    ``service.name`` is ``OTEL_SERVICE_NAME`` or else ``crawlhive-<kind>``
    (``OTEL_RESOURCE_ATTRIBUTES`` adds to it), with ``process.pid``. The provider flushes at exit.

    Raises:
        SettingsError: see :func:`wanted`.
    """
    global ON, _tracer, _provider, _sampling
    if _provider is not None:
        return ON
    if not wanted():
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider, sampling
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import _get_from_env_or_default

    _sampling = sampling

    attributes: dict[str, Any] = {"process.pid": os.getpid(), "crawlhive.kind": kind}
    if not os.environ.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = f"crawlhive-{kind}"
    # duck-typed as the SDK's Sampler and SpanProcessor: subclassing them here would import the
    # SDK with this module, in every process, tracing on or off
    sampler: Any = KeepErrorsSampler(_get_from_env_or_default())
    processor: Any = KeepErrorsProcessor(BatchSpanProcessor(OTLPSpanExporter()))
    provider = TracerProvider(sampler=sampler, resource=Resource.create(attributes))
    provider.add_span_processor(processor)
    _provider = provider
    _tracer = provider.get_tracer("crawlhive")
    ON = True
    return True


def shutdown() -> None:
    """Export what is left and stop tracing (also done at exit); nothing when tracing is off."""
    global ON, _tracer, _provider
    provider, _provider = _provider, None
    ON, _tracer = False, None
    if provider is not None:
        provider.shutdown()


def tracer() -> Tracer:
    """The process's tracer; only while :data:`ON`."""
    assert _tracer is not None, "tracing is off: check tracing.ON first"
    return _tracer


def now_ns() -> int:
    """The wall clock in nanoseconds, what span times are."""
    return time.time_ns()


# --- the context on the wire: headers and the frontier request's field -------------------------


def context_of_headers(headers: Iterable[tuple[str, bytes | str | None]] | None) -> Context | None:
    """The remote context of a record's or request's W3C headers (``traceparent`` and
    ``tracestate``, names case-insensitive); None without a valid ``traceparent``."""
    if not headers:
        return None
    carrier: dict[str, str] = {}
    for name, value in headers:
        key = name.lower() if isinstance(name, str) else str(name).lower()
        if key in (TRACEPARENT, TRACESTATE) and value is not None:
            try:
                carrier[key] = value.decode("ascii") if isinstance(value, bytes) else str(value)
            except UnicodeDecodeError:
                continue
    if TRACEPARENT not in carrier:
        return None
    return _context_of_carrier(carrier)


_TRACEPARENT_FORM = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


def incoming_headers(traceparent: str | None, tracestate: str | None) -> list[tuple[str, bytes]] | None:
    """The record headers that carry a caller's W3C context (REST ``/feed``'s HTTP headers) on,
    whether tracing is on or not: ``traceparent`` when it has the standard's form (else none of
    them: hostile input goes nowhere), ``tracestate`` beside it when at most 512 ASCII characters
    (the standard's limit)."""
    if traceparent is None or not _TRACEPARENT_FORM.fullmatch(traceparent.strip()):
        return None
    headers = [(TRACEPARENT, traceparent.strip().encode("ascii"))]
    if tracestate and len(tracestate) <= 512 and tracestate.isascii() and tracestate.isprintable():
        headers.append((TRACESTATE, tracestate.encode("ascii")))
    return headers


def _context_of_carrier(carrier: dict[str, str]) -> Context | None:
    context = _PROPAGATOR.extract(carrier)
    if not get_current_span(context).get_span_context().is_valid:
        return None  # a malformed traceparent: no parent (the standard says: start a new trace)
    return context


def carrier_of(span: Span) -> dict[str, str]:
    """``{"traceparent": …[, "tracestate": …]}`` of *span*."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, set_span_in_context(span))
    return carrier


def headers_of(span: Span) -> list[tuple[str, bytes]]:
    """The Kafka record headers that carry *span* as the parent of the next process's spans."""
    return [(name, value.encode("ascii")) for name, value in carrier_of(span).items()]


#: How a frontier request's ``trace`` names its relation to the span it holds: ``c`` (child: the
#: page's spans continue that span's trace) or ``l`` (link: the page starts a trace of its own,
#: linked to that span, the page that found it).
CHILD = "c"
LINK = "l"


def frontier_trace(span: Span, relation: str = CHILD, enqueued_ns: int | None = None) -> str:
    """The ``trace`` field of a frontier request (docs/contract.md §26.3):
    ``<relation> <enqueued, epoch ms> <traceparent>[ <tracestate>]``, one line of ASCII that
    survives the request's JSON round trip through Redis and the Lua scripts unchanged."""
    carrier = carrier_of(span)
    # rounded up: the page's spans never start before the span that queued it
    at_ms = -(-(enqueued_ns if enqueued_ns is not None else time.time_ns()) // 1_000_000)
    text = f"{relation} {at_ms} {carrier[TRACEPARENT]}"
    state = carrier.get(TRACESTATE)
    return f"{text} {state}" if state else text


def requeued(value: str) -> str:
    """A frontier ``trace`` *value* queued again now (a retry, a postponed page): the same span
    and relation, the enqueue time now, so the next attempt's frontier wait starts here."""
    relation, _, rest = value.split(" ", 2) if value.count(" ") >= 2 else ("", "", "")
    if relation not in (CHILD, LINK):
        return value
    return f"{relation} {-(-time.time_ns() // 1_000_000)} {rest}"


def parse_frontier_trace(value: Any) -> tuple[str, int, Context] | None:
    """``(relation, enqueued ns, context)`` of a :func:`frontier_trace` value; None for anything
    else (a hostile or damaged field never stops the page: it is just not traced)."""
    if not isinstance(value, str) or len(value) > 1024:
        return None
    parts = value.split(" ", 3)
    if len(parts) < 3 or parts[0] not in (CHILD, LINK):
        return None
    try:
        at_ms = int(parts[1])
    except ValueError:
        return None
    carrier = {TRACEPARENT: parts[2]}
    if len(parts) == 4:
        carrier[TRACESTATE] = parts[3]
    context = _context_of_carrier(carrier)
    if context is None:
        return None
    return parts[0], at_ms * 1_000_000, context


def span_context_of(context: Context) -> Any:
    """The ``SpanContext`` a context holds (for a span's link)."""
    return get_current_span(context).get_span_context()


def fail(span: Span, description: str) -> None:
    """Mark *span* as failed with *description*: it is exported whatever the sampler decided."""
    span.set_status(Status(StatusCode.ERROR, description[:500]))


# --- errors always kept -------------------------------------------------------------------------


def _sdk_sampling() -> Any:
    global _sampling
    if _sampling is None:  # a sampler built without configure() (the tests')
        from opentelemetry.sdk.trace import sampling

        _sampling = sampling
    return _sampling


class KeepErrorsSampler:
    """The sampler of ``OTEL_TRACES_SAMPLER`` (*inner*), but what it drops is still recorded
    (``RECORD_ONLY``: the span is built, not exported, and its context says "not sampled" to the
    next process), so that :class:`KeepErrorsProcessor` can export it if it ends in error.

    A sampler decides when a span starts, before anyone knows whether it will fail: the only way to
    keep the errors of a dropped trace is to record every span and decide at its end. The cost:
    with a ratio sampler, every page's spans are built (as with ``always_on``) and most thrown away
    at their end; with ``always_off`` nothing is exported but errors.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: Any = None,
        attributes: Any = None,
        links: Sequence[Any] | None = None,
        trace_state: Any = None,
    ) -> Any:
        sampling = _sdk_sampling()
        result = self.inner.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)
        if result.decision is sampling.Decision.DROP:
            return sampling.SamplingResult(sampling.Decision.RECORD_ONLY, result.attributes, result.trace_state)
        return result

    def get_description(self) -> str:
        return f"KeepErrors{{{self.inner.get_description()}}}"


class KeepErrorsProcessor:
    """Hands *inner* (the batch exporter's processor) every sampled span, and every span that
    ended with an error status even if its trace was not sampled (as a sampled copy: the SDK's
    processors export sampled spans only). The error span is exported alone: its parents, already
    dropped or in another process, are not."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def on_start(self, span: Any, parent_context: Context | None = None) -> None:
        self.inner.on_start(span, parent_context=parent_context)

    def _on_ending(self, span: Any) -> None:
        """The SDK's hook before a span ends (``SpanProcessor._on_ending``): passed on."""
        hook = getattr(self.inner, "_on_ending", None)
        if hook is not None:
            hook(span)

    def on_end(self, span: Any) -> None:
        if span.context.trace_flags.sampled:
            self.inner.on_end(span)
            return
        if span.status.status_code is StatusCode.ERROR:
            self.inner.on_end(_sampled_copy(span))

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


def _sampled_copy(span: Any) -> Any:
    """*span* (ended, not sampled) as a ReadableSpan whose context says sampled."""
    from opentelemetry.sdk.trace import ReadableSpan

    ctx = span.context
    sampled = SpanContext(ctx.trace_id, ctx.span_id, ctx.is_remote, TraceFlags(TraceFlags.SAMPLED), ctx.trace_state)
    return ReadableSpan(
        name=span.name,
        context=sampled,
        parent=span.parent,
        resource=span.resource,
        attributes=span.attributes,
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
