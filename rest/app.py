"""The REST API (docs/contract.md §7) as a FastAPI application.

Scrapy-Cluster-compatible ``/``, ``/feed`` and ``/poll`` plus ``/crawls``, ``/metrics``,
``/dashboard`` and ``/openapi.json``. Every JSON response except ``GET /`` is the envelope
``{"status", "data", "error"}``; errors use the exact messages of docs/contract.md §7. ``/feed`` validates with
the kafka-monitor's own :class:`RequestValidator` (same schemas, checks and limits), and
``/openapi.json`` publishes those schemas with their effective limits.

:func:`create_app` assembles the parts: the routers of :mod:`crawlhive.rest.routes` (each route
gets the service through a dependency), the error handlers, the middleware of
:mod:`crawlhive.rest.middleware` and the OpenAPI document. What the routes share (the envelope,
the messages, body parsing) is :mod:`crawlhive.rest.http`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException as StarletteHTTPException

from crawlhive.rest.http import (
    BAD_PATH_PARAMETER,
    NO_ENDPOINT,
    UNEXPECTED,
    ApiError,
    JSONResponse,
    failure,
    json_content,
)
from crawlhive.rest.middleware import AllowedHosts, ApiKeyMiddleware, CountResponses, allowed_hosts
from crawlhive.rest.routes import crawls, feed, watch
from crawlhive.rest.routes.crawls import info_message
from crawlhive.rest.routes.feed import SCHEMA_NAMES
from crawlhive.rest.service import RestService
from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

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


def create_app(settings: Settings, service: RestService | None = None, bound_host: str | None = None) -> FastAPI:
    """The REST application; its lifespan starts and stops *service* (built from *settings* if None).

    *bound_host* is the address it is served on (REST_HOST when None), one of the ``Host`` names it answers.
    """
    rest = service if service is not None else RestService.from_settings(settings)

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
    app.state.rest = rest  # what the routes' Rest dependency hands them
    add_error_handlers(app)
    for group in (feed, crawls, watch):  # the order of /openapi.json's paths
        app.include_router(group.router)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = openapi_document(app, rest)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_middleware(CountResponses, count=lambda m, c: rest.metrics.responses.labels(m, str(c)).inc())
    app.add_middleware(ApiKeyMiddleware, api_key=settings.REST_API_KEY)
    app.add_middleware(AllowedHosts, hosts=allowed_hosts(settings, bound_host))  # the outermost: first
    return app


def add_error_handlers(app: FastAPI) -> None:
    """Answer every error with the envelope and the exact messages of docs/contract.md §7."""

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


def openapi_document(app: FastAPI, rest: RestService) -> dict[str, Any]:
    """FastAPI's document plus the envelope and the four incoming schemas with effective limits."""
    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas["Envelope"] = ENVELOPE_SCHEMA
    for plugin, schema in rest.validator.schemas.items():
        name = SCHEMA_NAMES.get(plugin.kind, plugin.name)
        schemas[name] = {k: v for k, v in schema.items() if k != "$schema"}
    ok = {"description": "Envelope", "content": json_content({"$ref": "#/components/schemas/Envelope"})}
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


__all__ = ["AllowedHosts", "ApiError", "allowed_hosts", "create_app", "info_message"]
