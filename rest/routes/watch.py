"""The routes that watch the cluster: ``/metrics`` (Prometheus, docs/contract.md §7.2) and the
dashboard (``/dashboard``, its page; ``/dashboard/data``, what the page shows)."""

from __future__ import annotations

from importlib import resources
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse, Response

from crawlhive.rest.http import JSONResponse, Rest, doc, envelope, in_thread, responses
from crawlhive.rest.metrics import CONTENT_TYPE

router = APIRouter()

#: The dashboard may not be framed by another site (clickjacking; docs/contract.md §10.1).
DASHBOARD_HEADERS = {"X-Frame-Options": "DENY", "Content-Security-Policy": "frame-ancestors 'none'"}


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses=doc(200, "Text format 0.0.4", {CONTENT_TYPE: {"schema": {"type": "string"}}}) | responses(500),
)
async def metrics(rest: Rest) -> Response:
    text = await in_thread(rest.metrics.render)
    return Response(text, media_type=CONTENT_TYPE)


@router.get(
    "/dashboard",
    summary="Live dashboard (HTML)",
    response_class=HTMLResponse,
    responses=doc(200, "Self-contained HTML page", {"text/html": {}}) | responses(401),
)
async def dashboard(api_key: Annotated[str | None, Query(description="the API key (browsers)")] = None) -> Response:
    return HTMLResponse(_dashboard_html(), headers=DASHBOARD_HEADERS)


@router.get("/dashboard/data", summary="Data the dashboard shows", responses=responses(401, 500))
async def dashboard_data(rest: Rest) -> JSONResponse:
    from crawlhive.rest.dashboard import dashboard_data as build

    data = await in_thread(build, rest)
    return JSONResponse(envelope(data))


_DASHBOARD: list[str] = []


def _dashboard_html() -> str:
    if not _DASHBOARD:
        _DASHBOARD.append(resources.files("crawlhive.rest").joinpath("dashboard.html").read_text(encoding="utf-8"))
    return _DASHBOARD[0]
