"""The Scrapy-Cluster-compatible routes (docs/contract.md §7.1): health (``/``), ``/feed`` and ``/poll``.

``/feed`` validates with the kafka-monitor's own :class:`RequestValidator` (same schemas, checks
and limits) and, for a request with a ``uuid``, waits WAIT_FOR_RESPONSE_TIME for its answer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, Request
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from crawlhive.rest.answers import KafkaUnavailable, RecordTooLarge, encodable
from crawlhive.rest.http import (
    CORRUPT_RESULT,
    NO_KAFKA,
    NO_POLL_ID,
    SCHEMA_FAILED,
    TOO_LARGE,
    ApiError,
    Docs,
    JSONResponse,
    Rest,
    envelope,
    in_thread,
    json_body,
    json_content,
    responses,
)
from crawlhive.rest.service import RestService
from crawlhive.utils.backends import tracing
from crawlhive.utils.contract.encoding import parse_json
from crawlhive.utils.contract.validation import Accepted, Rejected, json_pointer

logger = logging.getLogger(__name__)

router = APIRouter()

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

_HEALTH_DOC: Docs = {200: {"description": "Health (not enveloped)", "content": json_content(HEALTH_SCHEMA)}}


def _any_incoming_ref() -> dict[str, Any]:
    return {"anyOf": [{"$ref": f"#/components/schemas/{name}"} for name in SCHEMA_NAMES.values()]}


@router.get("/", summary="Health", responses=_HEALTH_DOC)
async def health(rest: Rest) -> JSONResponse:
    return JSONResponse(await asyncio.to_thread(rest.health))


@router.post("/", summary="Health", responses=_HEALTH_DOC)
async def health_post(rest: Rest) -> JSONResponse:
    return JSONResponse(await asyncio.to_thread(rest.health))


@router.post(
    "/feed",
    summary="Send a request to the cluster",
    responses=responses(400, 401, 413, 500),
    openapi_extra={"requestBody": {"required": True, "content": json_content(_any_incoming_ref())}},
)
async def feed(request: Request, rest: Rest) -> JSONResponse:
    value = await json_body(request, rest.settings.REST_MAX_BODY_BYTES)
    outcome = await asyncio.to_thread(validate, rest, value)  # off the event loop: others keep going
    trace = tracing.incoming_headers(request.headers.get(tracing.TRACEPARENT), request.headers.get(tracing.TRACESTATE))
    if isinstance(outcome, Rejected):
        raise ApiError(400, SCHEMA_FAILED, outcome.reason.removeprefix("Invalid request: "))
    if not tracing.ON:  # the caller's context goes on as the record's headers (§26.3)
        return JSONResponse(envelope(await send(rest, value, trace)))
    span = tracing.tracer().start_span(
        "crawlhive.rest.feed", context=tracing.context_of_headers(trace), kind=tracing.SpanKind.SERVER
    )
    try:
        return JSONResponse(envelope(await send(rest, value, tracing.headers_of(span))))
    except ApiError as exc:
        tracing.fail(span, f"{exc.status}: {exc}")
        raise
    finally:
        span.end()


@router.post(
    "/poll",
    summary="Fetch a stored answer by poll_id (one-shot)",
    responses=responses(400, 401, 404, 413, 500),
    openapi_extra={"requestBody": {"required": True, "content": json_content(POLL_SCHEMA)}},
)
async def poll(request: Request, rest: Rest) -> JSONResponse:
    value = await json_body(request, rest.settings.REST_MAX_BODY_BYTES)
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


def validate(rest: RestService, value: Any) -> Accepted | Rejected:
    """The kafka-monitor's verdict on *value*; a validator crash rejects it as the monitor would."""
    try:
        return rest.validator.validate(value)
    except Exception:  # the kafka-monitor dead-letters such input; /feed answers 400 the same way
        logger.error("validation failed on a /feed body", exc_info=True)
        return Rejected("Invalid request: internal error while validating")


async def send(rest: RestService, request: dict[str, Any], headers: list[tuple[str, bytes]] | None = None) -> Any:
    """Feed a validated *request* (:meth:`RestService.feed`) with the record *headers* (its trace
    context, §26.3); its failures become the errors of §7."""
    try:
        return await rest.feed(request, headers)
    except RecordTooLarge as exc:
        raise ApiError(413, TOO_LARGE, str(exc)) from exc
    except KafkaUnavailable as exc:
        logger.warning("feed failed: %s", exc)
        raise ApiError(500, NO_KAFKA) from exc
