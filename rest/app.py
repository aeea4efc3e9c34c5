"""The REST API (docs/contract.md §7) as a FastAPI application.

Scrapy-Cluster-compatible ``/``, ``/feed`` and ``/poll`` plus ``/crawls``, ``/metrics``,
``/dashboard`` and ``/openapi.json``. Every JSON response except ``GET /`` is the envelope
``{"status", "data", "error"}``; errors use the exact messages of docs/contract.md §7. ``/feed`` validates with
the kafka-monitor's own :class:`RequestValidator` (same schemas, checks and limits), and
``/openapi.json`` publishes those schemas with their effective limits.

Handlers are coroutines; whatever blocks (Redis, a Kafka ack) runs in a worker thread, so a
``/feed`` waiting for its answer never blocks other requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from importlib import resources
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import parse_qs

from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, Response
from fastapi.responses import JSONResponse as _JSONResponse
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from crawlhive.rest.answers import KafkaUnavailable, RecordTooLarge, encodable
from crawlhive.rest.metrics import CONTENT_TYPE
from crawlhive.rest.recrawl_view import recrawl_summaries
from crawlhive.rest.service import RestService, new_uuid
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract.validation import Accepted, Rejected, json_pointer, parse_json
from crawlhive.utils.frontier import CrawlState

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Exact error messages of docs/contract.md §7.
INVALID_JSON = "The payload must be valid JSON."
SCHEMA_FAILED = "JSON did not validate against schema."
BAD_PATH_PARAMETER = "Invalid path parameter."
BAD_API_KEY = "Missing or invalid API key"
NO_ENDPOINT = "The desired endpoint does not exist"
NO_POLL_ID = "Could not find matching poll_id"
NO_CRAWL = "Could not find matching crawl"
TOO_LARGE = "The payload is too large."
BAD_HOST = "Invalid host header"
#: Bodies at least this large are parsed in a worker thread (smaller ones cost less than the hop).
INLINE_PARSE_BYTES = 16384
#: The dashboard may not be framed by another site (clickjacking; docs/contract.md §10.1).
DASHBOARD_HEADERS = {"X-Frame-Options": "DENY", "Content-Security-Policy": "frame-ancestors 'none'"}
NO_KAFKA = "Unable to connect to Kafka"
NO_REDIS = "Unable to connect to Redis"
CORRUPT_RESULT = "Unparseable JSON Received from redis"
UNEXPECTED = "An error occurred while processing your request."

#: The ``/poll`` body schema (docs/contract.md §7.1).
POLL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"poll_id": {"type": "string", "minLength": 1, "maxLength": 100}},
    "required": ["poll_id"],
    "additionalProperties": False,
}
_POLL_VALIDATOR = Draft202012Validator(POLL_SCHEMA)

#: Component names of the incoming schemas in ``/openapi.json``, by request kind.
SCHEMA_NAMES = {
    "crawl": "CrawlRequest",
    "action": "ActionRequest",
    "stats": "StatsRequest",
    "domain-config": "DomainConfigRequest",
}

ENVELOPE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "enum": ["SUCCESS", "FAILURE"]},
        "data": {},
        "error": {
            "anyOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "properties": {"message": {"type": "string"}, "cause": {"type": "string"}},
                    "required": ["message"],
                },
            ]
        },
    },
    "required": ["status", "data", "error"],
}
HEALTH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kafka_connected": {"type": "boolean"},
        "redis_connected": {"type": "boolean"},
        "uptime_sec": {"type": "integer"},
        "my_id": {"type": "string", "pattern": "^[0-9a-f]{12}$"},
        "node_health": {"type": "string", "enum": ["GREEN", "YELLOW", "RED"]},
    },
    "required": ["kafka_connected", "redis_connected", "uptime_sec", "my_id", "node_health"],
}

# Path and query parameters (docs/contract.md §2 length limits).
AppId = Annotated[str, Path(min_length=3, max_length=40, description="appid of the crawl")]
CrawlId = Annotated[str, Path(min_length=1, max_length=40, description="crawlid of the crawl")]
OptionalSpiderId = Annotated[
    str | None,
    Query(
        description="spider type of the crawl (default: the crawl's own, found whatever it is)",
        pattern=r"^[A-Za-z0-9_.-]{1,40}$",
    ),
]


class JSONResponse(_JSONResponse):
    """UTF-8 JSON; falls back to ASCII escapes for strings UTF-8 cannot encode (lone surrogates)."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, allow_nan=False, separators=(",", ":")).encode()


class ApiError(Exception):
    """An error answered with the envelope: HTTP *status*, exact *message*, optional *cause*."""

    def __init__(self, status: int, message: str, cause: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.cause = status, message, cause


def envelope(data: Any = None) -> dict[str, Any]:
    return {"status": "SUCCESS", "data": data, "error": None}


def failure(status: int, message: str, cause: str | None = None) -> JSONResponse:
    error: dict[str, Any] = {"message": message}
    if cause is not None:
        error["cause"] = cause
    return JSONResponse({"status": "FAILURE", "data": None, "error": error}, status_code=status)


async def in_thread(func: Callable[..., T], *args: Any) -> T:
    """Run blocking *func* in a worker thread; a Redis connection failure becomes the 500 of §7."""
    try:
        return await asyncio.to_thread(func, *args)
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        logger.warning("Redis unreachable: %r; check REDIS_URL", exc)
        raise ApiError(500, NO_REDIS) from exc


def info_message(state: CrawlState, uuid: str) -> dict[str, Any]:
    """The info-by-crawlid message of docs/contract.md §4.2 for *state*."""
    message: dict[str, Any] = {
        "uuid": uuid,
        "appid": state.appid,
        "crawlid": state.crawlid,
        "spiderid": state.spiderid,
        "server_time": int(time.time()),
        "total_pending": state.pending,
        "total_domains": len(state.domains),
        "domains": {
            domain: {"total": d.total, "high_priority": d.high_priority, "low_priority": d.low_priority}
            for domain, d in sorted(state.domains.items())
        },
    }
    if state.expires:
        message["expires"] = str(state.expires)
    message.update(total_inflight=state.inflight, total_crawled=state.crawled, total_failed=state.failed)
    return message


# --- middleware -----------------------------------------------------------------------------------


class ApiKeyMiddleware:
    """Checks ``X-Api-Key`` before routing (docs/contract.md §7.4) when REST_API_KEY is set.

    ``/`` and ``GET /metrics`` are exempt; ``GET /dashboard`` also accepts ``?api_key=``.
    """

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.api_key = api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.api_key:
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        reading = method in ("GET", "HEAD")
        if path == "/" or (path == "/metrics" and reading):
            await self.app(scope, receive, send)
            return
        provided = dict(scope["headers"]).get(b"x-api-key", b"")
        if not provided and path == "/dashboard" and reading:
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            provided = (query.get("api_key") or [""])[0].encode()
        if not hmac.compare_digest(provided, self.api_key):
            await failure(401, BAD_API_KEY)(scope, receive, send)
            return
        await self.app(scope, receive, send)


#: Host names every REST service answers, whatever REST_HOST and REST_ALLOWED_HOSTS say.
LOOPBACK_HOST_NAMES = ("localhost", "127.0.0.1", "[::1]")
#: The scope key :class:`AllowedHosts`' check sets on a request whose ``Host`` passed.
_HOST_PASSED = "crawlhive.host_passed"


def allowed_hosts(settings: Settings, bound_host: str | None = None) -> list[str]:
    """The ``Host`` names REST answers: loopback names, the address it binds (*bound_host*, by
    default REST_HOST; IPv6 in brackets) and REST_ALLOWED_HOSTS, lower case."""
    bound = str(settings.REST_HOST if bound_host is None else bound_host).strip().strip("[]")
    names = [*LOOPBACK_HOST_NAMES, f"[{bound}]" if ":" in bound else bound]
    names += [str(name).strip() for name in settings.REST_ALLOWED_HOSTS]
    return sorted({name.lower() for name in names if name})


class AllowedHosts:
    """Answers 400 to a request whose ``Host`` header names none of :func:`allowed_hosts`
    (DNS rebinding, docs/contract.md §10.1), before the API key is checked or anything routed.

    The matching (port ignored, IPv6 literals, ``*.example.com``, ``*``) is Starlette's
    :class:`TrustedHostMiddleware`; it only answers in plain text, so it runs as a check here and
    the refusal is the envelope, naming the setting to change.
    """

    def __init__(self, app: ASGIApp, hosts: list[str]) -> None:
        self.app = app
        self.hosts = hosts
        self.check = TrustedHostMiddleware(self._passed, allowed_hosts=hosts, www_redirect=False)

    @staticmethod
    async def _passed(scope: Scope, receive: Receive, send: Send) -> None:
        scope[_HOST_PASSED] = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def discard(message: Message) -> None:  # the check's own plain-text refusal
            return None

        await self.check(scope, receive, discard)
        if scope.pop(_HOST_PASSED, False):
            await self.app(scope, receive, send)
            return
        host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
        shown = repr(host[:100]) + ("..." if len(host) > 100 else "") if host else "missing"
        cause = f"Host {shown} is not a name of this REST service; add the name clients use to REST_ALLOWED_HOSTS"
        await failure(400, BAD_HOST, cause)(scope, receive, send)


class CountResponses:
    """Counts every response by method and status code (``crawlhive_rest_responses_total``)."""

    def __init__(self, app: ASGIApp, count: Callable[[str, int], None]) -> None:
        self.app = app
        self.count = count

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.count(scope["method"], int(message["status"]))
            await send(message)

        await self.app(scope, receive, counting_send)


# --- request bodies -------------------------------------------------------------------------------


async def read_body(request: Request, limit: int) -> bytes:
    """The body, or ApiError 413 once it is larger than *limit* bytes (REST_MAX_BODY_BYTES)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, TOO_LARGE)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, TOO_LARGE)
        chunks.append(chunk)
    return b"".join(chunks)


def wrong_content_type(media_type: str) -> str:
    """The ``cause`` of a JSON body sent without ``Content-Type: application/json``."""
    got = f"'{media_type[:60]}'" if media_type else "none"
    return (
        f"send it with the header Content-Type: application/json (got {got}; other types are refused so that "
        "a web page cannot post to this API, docs/security.md)"
    )


async def json_body(request: Request, limit: int) -> Any:
    """The parsed JSON body; ApiError 413, or 400 for a non-JSON Content-Type or unparseable body."""
    body = await read_body(request, limit)
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        # Not parsed whatever it holds: a web page may post text/plain (or a form) to a loopback
        # address without asking the browser's leave; application/json needs a CORS preflight.
        raise ApiError(400, INVALID_JSON, wrong_content_type(media_type))
    # A large body is parsed off the event loop, so that it never holds up other requests.
    value, error = parse_json(body) if len(body) < INLINE_PARSE_BYTES else await asyncio.to_thread(parse_json, body)
    if error is not None:
        raise ApiError(400, INVALID_JSON)
    return value


# --- the application ------------------------------------------------------------------------------


def create_app(settings: Settings, service: RestService | None = None, bound_host: str | None = None) -> FastAPI:
    """The REST application; its lifespan starts and stops *service* (built from *settings* if None).

    *bound_host* is the address it is served on (REST_HOST when None), one of the ``Host`` names it answers.
    """
    rest = service if service is not None else RestService.from_settings(settings)
    max_body = settings.REST_MAX_BODY_BYTES

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        rest.start()
        try:
            yield
        finally:
            await asyncio.to_thread(rest.stop)

    app = FastAPI(
        title="crawlhive REST API",
        version="1",
        description="Feed requests to a crawlhive cluster, poll for answers, watch crawls (docs/contract.md §7).",
        docs_url=None,  # the Swagger / ReDoc pages load scripts from CDNs; the machine may be offline
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.rest = rest

    # --- errors ------------------------------------------------------------------------------

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return failure(exc.status, exc.message, exc.cause)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code in (404, 405):
            return failure(404, NO_ENDPOINT)
        return failure(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def parameter_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return failure(400, BAD_PATH_PARAMETER, _parameter_cause(exc))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
        return failure(500, UNEXPECTED)

    # --- SC-compatible endpoints -------------------------------------------------------------------

    health_doc: _Docs = {200: {"description": "Health (not enveloped)", "content": _json(HEALTH_SCHEMA)}}

    @app.get("/", summary="Health", responses=health_doc)
    async def health() -> JSONResponse:
        return JSONResponse(await asyncio.to_thread(rest.health))

    @app.post("/", summary="Health", responses=health_doc)
    async def health_post() -> JSONResponse:
        return JSONResponse(await asyncio.to_thread(rest.health))

    @app.post(
        "/feed",
        summary="Send a request to the cluster",
        responses=_responses(400, 401, 413, 500),
        openapi_extra={"requestBody": {"required": True, "content": _json(_any_incoming_ref())}},
    )
    async def feed(request: Request) -> JSONResponse:
        value = await json_body(request, max_body)
        outcome = await asyncio.to_thread(_validate, rest, value)  # off the event loop: others keep going
        if isinstance(outcome, Rejected):
            raise ApiError(400, SCHEMA_FAILED, outcome.reason.removeprefix("Invalid request: "))
        return JSONResponse(envelope(await _feed(rest, value)))

    @app.post(
        "/poll",
        summary="Fetch a stored answer by poll_id (one-shot)",
        responses=_responses(400, 401, 404, 413, 500),
        openapi_extra={"requestBody": {"required": True, "content": _json(POLL_SCHEMA)}},
    )
    async def poll(request: Request) -> JSONResponse:
        value = await json_body(request, max_body)
        error = best_match(_POLL_VALIDATOR.iter_errors(value))
        if error is not None:
            pointer = json_pointer(error.absolute_path)
            raise ApiError(400, SCHEMA_FAILED, error.message + (f" (at {pointer})" if pointer else ""))
        if not encodable(value["poll_id"]):
            raise ApiError(404, NO_POLL_ID)  # never stored: no Redis key can hold it
        raw = await in_thread(rest.redis.getdel, rest.keys.poll_result(value["poll_id"]))
        if raw is None:
            raise ApiError(404, NO_POLL_ID)
        message, parse_error = parse_json(raw)
        if parse_error is not None:
            raise ApiError(500, CORRUPT_RESULT)
        return JSONResponse(envelope(message))

    # --- new endpoints -----------------------------------------------------------------------------

    @app.get("/crawls", summary="List crawls: active, then recently finished", responses=_responses(400, 401, 500))
    async def crawl_list(
        state: Annotated[Literal["active", "finished", "all"], Query(description="which crawls (default all)")] = "all",
        limit: Annotated[int, Query(ge=1, le=1000, description="most crawls listed")] = 100,
    ) -> JSONResponse:
        crawls = await in_thread(rest.view.crawl_list, state, limit)
        return JSONResponse(envelope({"crawls": crawls}))

    @app.get(
        "/crawls/{appid}/{crawlid}", summary="Crawl status (info by crawlid)", responses=_responses(400, 401, 404, 500)
    )
    async def crawl_status(appid: AppId, crawlid: CrawlId, spiderid: OptionalSpiderId = None) -> JSONResponse:
        state = await in_thread(rest.view.crawl, spiderid, appid, crawlid)  # None: whatever its spider type
        if state is None:
            raise ApiError(404, NO_CRAWL)
        message = info_message(state, new_uuid())
        message.update(await in_thread(rest.view.budget_fields, state))  # §10.7: the budget, if one stopped it
        notes = await in_thread(rest.view.domain_notes, list(message["domains"]))  # §21.3, §21.4
        for domain, extra in notes.items():
            message["domains"][domain].update(extra)
        crawl = (state.spiderid, appid, crawlid)
        summary = (await in_thread(recrawl_summaries, rest.view.redis, rest.view.keys, [crawl])).get(crawl)
        if summary is not None:  # a recurring crawl: info's recrawl object (§19.6)
            message["recrawl"] = {k: v for k, v in summary.items() if k != "changed_ratio"}
        return JSONResponse(envelope(message))

    @app.delete("/crawls/{appid}/{crawlid}", summary="Stop a crawl", responses=_responses(400, 401, 500))
    async def crawl_stop(appid: AppId, crawlid: CrawlId, spiderid: OptionalSpiderId = None) -> JSONResponse:
        if spiderid is None:  # the crawl's own spider type when it is known, else the default
            found = await in_thread(rest.view.crawl, None, appid, crawlid)
            spiderid = found.spiderid if found is not None else "link"
        request = {"action": "stop", "appid": appid, "crawlid": crawlid, "spiderid": spiderid, "uuid": new_uuid()}
        outcome = _validate(rest, request)
        if isinstance(outcome, Rejected):
            raise ApiError(400, BAD_PATH_PARAMETER, outcome.reason.removeprefix("Invalid request: "))
        return JSONResponse(envelope(await _feed(rest, request)))

    @app.get(
        "/metrics",
        summary="Prometheus metrics",
        response_class=Response,
        responses=_doc(200, "Text format 0.0.4", {CONTENT_TYPE: {"schema": {"type": "string"}}}) | _responses(500),
    )
    async def metrics() -> Response:
        text = await in_thread(rest.metrics.render)
        return Response(text, media_type=CONTENT_TYPE)

    @app.get(
        "/dashboard",
        summary="Live dashboard (HTML)",
        response_class=HTMLResponse,
        responses=_doc(200, "Self-contained HTML page", {"text/html": {}}) | _responses(401),
    )
    async def dashboard(api_key: Annotated[str | None, Query(description="the API key (browsers)")] = None) -> Response:
        return HTMLResponse(_dashboard_html(), headers=DASHBOARD_HEADERS)

    @app.get("/dashboard/data", summary="Data the dashboard shows", responses=_responses(401, 500))
    async def dashboard_data() -> JSONResponse:
        from crawlhive.rest.dashboard import dashboard_data as build

        data = await in_thread(build, rest)
        return JSONResponse(envelope(data))

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _openapi_document(app, rest)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_middleware(CountResponses, count=lambda m, c: rest.metrics.responses.labels(m, str(c)).inc())
    app.add_middleware(ApiKeyMiddleware, api_key=settings.REST_API_KEY)
    app.add_middleware(AllowedHosts, hosts=allowed_hosts(settings, bound_host))  # the outermost: first
    return app


def _validate(rest: RestService, value: Any) -> Accepted | Rejected:
    """The kafka-monitor's verdict on *value*; a validator crash rejects it as the monitor would."""
    try:
        return rest.validator.validate(value)
    except Exception:  # the kafka-monitor dead-letters such input; /feed answers 400 the same way
        logger.error("validation failed on a /feed body", exc_info=True)
        return Rejected("Invalid request: internal error while validating")


async def _feed(rest: RestService, request: dict[str, Any]) -> Any:
    try:
        return await rest.feed(request)
    except RecordTooLarge as exc:
        raise ApiError(413, TOO_LARGE, str(exc)) from exc
    except KafkaUnavailable as exc:
        logger.warning("feed failed: %s", exc)
        raise ApiError(500, NO_KAFKA) from exc


def _parameter_cause(exc: RequestValidationError) -> str:
    """``appid: 'ab' is too short`` for the first invalid parameter (jsonschema's wording)."""
    for error in exc.errors():
        name = str(error.get("loc", ("", "?"))[-1])
        value = error.get("input")
        kind = error.get("type", "")
        if kind == "string_too_short":
            return f"{name}: {value!r} is too short"
        if kind == "string_too_long":
            return f"{name}: {value!r} is too long"
        return f"{name}: {error.get('msg', 'is invalid')}"
    return "invalid parameter"


_DASHBOARD: list[str] = []


def _dashboard_html() -> str:
    if not _DASHBOARD:
        _DASHBOARD.append(resources.files("crawlhive.rest").joinpath("dashboard.html").read_text(encoding="utf-8"))
    return _DASHBOARD[0]


# --- OpenAPI --------------------------------------------------------------------------------------


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _any_incoming_ref() -> dict[str, Any]:
    return {"anyOf": [{"$ref": f"#/components/schemas/{name}"} for name in SCHEMA_NAMES.values()]}


_ERROR_TEXT = {
    400: "Invalid JSON, schema, parameter or Host header",
    401: "Missing or invalid API key",
    404: "Not found",
    413: "Payload too large (REST_MAX_BODY_BYTES, or one Kafka record: KAFKA_PRODUCER_MAX_REQUEST_SIZE)",
    500: "Kafka or Redis unreachable, or an unexpected error",
}


#: OpenAPI response documentation by status code, as FastAPI takes it.
_Docs = dict[int | str, dict[str, Any]]


def _doc(code: int, description: str, content: dict[str, Any]) -> _Docs:
    """The documentation of one response."""
    return {code: {"description": description, "content": content}}


def _responses(*codes: int) -> _Docs:
    ref = {"$ref": "#/components/schemas/Envelope"}
    return {code: {"description": _ERROR_TEXT[code], "content": _json(ref)} for code in codes}


def _openapi_document(app: FastAPI, rest: RestService) -> dict[str, Any]:
    """FastAPI's document plus the envelope and the four incoming schemas with effective limits."""
    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas["Envelope"] = ENVELOPE_SCHEMA
    for plugin, schema in rest.validator.schemas.items():
        name = SCHEMA_NAMES.get(plugin.kind, plugin.name)
        schemas[name] = {k: v for k, v in schema.items() if k != "$schema"}
    ok = {"description": "Envelope", "content": _json({"$ref": "#/components/schemas/Envelope"})}
    keyed = bool(rest.settings.REST_API_KEY)
    for path, item in doc.get("paths", {}).items():
        for method, operation in item.items():
            responses = operation.setdefault("responses", {})
            if path not in ("/", "/metrics", "/dashboard"):
                responses["200"] = ok
            responses.pop("422", None)  # parameter errors are 400 envelopes here
            if keyed:
                exempt = path == "/" or (path == "/metrics" and method == "get")
                operation["security"] = [] if exempt else [{"ApiKey": []}]
    if keyed:
        doc["components"]["securitySchemes"] = {"ApiKey": {"type": "apiKey", "in": "header", "name": "X-Api-Key"}}
    doc["components"]["schemas"].pop("HTTPValidationError", None)
    doc["components"]["schemas"].pop("ValidationError", None)
    return doc


__all__ = ["ApiError", "create_app", "info_message"]
