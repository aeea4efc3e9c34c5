"""A real OTLP/HTTP trace receiver in the test process (docs/contract.md §26.3): an HTTP server on
127.0.0.1 that takes ``POST /v1/traces`` as the OpenTelemetry exporters send it (protobuf,
optionally gzip), decodes each ``ExportTraceServiceRequest`` with the OpenTelemetry proto package,
and keeps every span with its resource's attributes."""

from __future__ import annotations

import gzip
import http.server
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


@dataclass
class Span:
    """One received span, ids as hex."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    service: str
    pid: int
    attributes: dict[str, Any]
    links: list[tuple[str, str]]
    error: bool
    status_message: str
    start_ns: int
    end_ns: int
    flags: int
    events: list[str] = field(default_factory=list)


class OtlpReceiver:
    """``with OtlpReceiver() as receiver:`` its :attr:`endpoint` is what OTEL_EXPORTER_OTLP_ENDPOINT takes."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.requests = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                receiver.take(ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)

    def take(self, request: ExportTraceServiceRequest) -> None:
        spans = []
        for resource_spans in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    spans.append(
                        Span(
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(),
                            name=s.name,
                            service=str(resource.get("service.name", "")),
                            pid=int(resource.get("process.pid", 0)),
                            attributes={kv.key: _value(kv.value) for kv in s.attributes},
                            links=[(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                            error=s.status.code == 2,  # STATUS_CODE_ERROR
                            status_message=s.status.message,
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            flags=s.flags,
                            events=[e.name for e in s.events],
                        )
                    )
        with self.lock:
            self.requests += 1
            self.spans.extend(spans)

    def snapshot(self) -> list[Span]:
        with self.lock:
            return list(self.spans)

    def trace(self, trace_id: str) -> list[Span]:
        return [s for s in self.snapshot() if s.trace_id == trace_id]

    def wait_for(
        self, what: str, predicate: Callable[[list[Span]], bool], timeout: float, why: Callable[[], str]
    ) -> None:
        """Wait until *predicate* holds for the spans received; fail naming *what* and *why*() otherwise."""
        deadline = time.monotonic() + timeout
        while not predicate(self.snapshot()):
            if time.monotonic() > deadline:
                spans = "\n".join(
                    f"{s.service} {s.name} {s.trace_id} {s.span_id}<-{s.parent_span_id}" for s in self.snapshot()
                )
                raise AssertionError(f"no {what} within {timeout}s; spans received:\n{spans}\n{why()}")
            time.sleep(0.1)
