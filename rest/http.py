"""What every route of the REST API shares (docs/contract.md §7): the envelope, the exact error
messages, request bodies, the OpenAPI response documentation, and the dependency that hands a
route the process's :class:`~crawlhive.rest.service.RestService`.

Handlers are coroutines; whatever blocks (Redis, a Kafka ack) runs in a worker thread
(:func:`in_thread`), so a ``/feed`` waiting for its answer never blocks other requests.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Annotated, Any, TypeVar, cast

from fastapi import Depends, Request
from fastapi.responses import JSONResponse as _JSONResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from crawlhive.rest.service import RestService
from crawlhive.utils.contract.encoding import parse_json

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
NO_KAFKA = "Unable to connect to Kafka"
NO_REDIS = "Unable to connect to Redis"
CORRUPT_RESULT = "Unparseable JSON Received from redis"
UNEXPECTED = "An error occurred while processing your request."
#: Bodies at least this large are parsed in a worker thread (smaller ones cost less than the hop).
INLINE_PARSE_BYTES = 16384


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


# --- the dependencies -----------------------------------------------------------------------------


async def rest_service(request: Request) -> RestService:
    """The process's service (``app.state.rest``, set by ``create_app``). A coroutine: FastAPI
    runs a plain function dependency in a worker thread, a hop this lookup does not need."""
    return cast(RestService, request.app.state.rest)


#: A route parameter that receives the process's :class:`RestService`.
Rest = Annotated[RestService, Depends(rest_service)]


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


# --- OpenAPI response documentation ---------------------------------------------------------------


#: OpenAPI response documentation by status code, as FastAPI takes it.
Docs = dict[int | str, dict[str, Any]]

_ERROR_TEXT = {
    400: "Invalid JSON, schema, parameter or Host header",
    401: "Missing or invalid API key",
    404: "Not found",
    413: "Payload too large (REST_MAX_BODY_BYTES, or one Kafka record: KAFKA_PRODUCER_MAX_REQUEST_SIZE)",
    500: "Kafka or Redis unreachable, or an unexpected error",
}


def json_content(schema: dict[str, Any]) -> dict[str, Any]:
    """The ``content`` of a JSON body with *schema*."""
    return {"application/json": {"schema": schema}}


def doc(code: int, description: str, content: dict[str, Any]) -> Docs:
    """The documentation of one response."""
    return {code: {"description": description, "content": content}}


def responses(*codes: int) -> Docs:
    """The documentation of the envelope answered with each of *codes*."""
    ref = {"$ref": "#/components/schemas/Envelope"}
    return {code: {"description": _ERROR_TEXT[code], "content": json_content(ref)} for code in codes}
