"""The crawl routes (docs/contract.md §7.2, §17.6): ``GET /crawls``, one crawl's status (info by
crawlid, §4.2) and its stop."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query

from crawlhive.rest.http import (
    BAD_PATH_PARAMETER,
    NO_CRAWL,
    ApiError,
    JSONResponse,
    Rest,
    envelope,
    in_thread,
    responses,
)
from crawlhive.rest.routes.feed import send, validate
from crawlhive.rest.service import new_uuid
from crawlhive.utils.contract.validation import Rejected
from crawlhive.utils.frontier import CrawlState
from crawlhive.utils.state.recrawl import recrawl_summaries

router = APIRouter()

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


@router.get("/crawls", summary="List crawls: active, then recently finished", responses=responses(400, 401, 500))
async def crawl_list(
    rest: Rest,
    state: Annotated[Literal["active", "finished", "all"], Query(description="which crawls (default all)")] = "all",
    limit: Annotated[int, Query(ge=1, le=1000, description="most crawls listed")] = 100,
) -> JSONResponse:
    crawls = await in_thread(rest.view.crawl_list, state, limit)
    return JSONResponse(envelope({"crawls": crawls}))


@router.get(
    "/crawls/{appid}/{crawlid}", summary="Crawl status (info by crawlid)", responses=responses(400, 401, 404, 500)
)
async def crawl_status(rest: Rest, appid: AppId, crawlid: CrawlId, spiderid: OptionalSpiderId = None) -> JSONResponse:
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


@router.delete("/crawls/{appid}/{crawlid}", summary="Stop a crawl", responses=responses(400, 401, 500))
async def crawl_stop(rest: Rest, appid: AppId, crawlid: CrawlId, spiderid: OptionalSpiderId = None) -> JSONResponse:
    if spiderid is None:  # the crawl's own spider type when it is known, else the default
        found = await in_thread(rest.view.crawl, None, appid, crawlid)
        spiderid = found.spiderid if found is not None else "link"
    request = {"action": "stop", "appid": appid, "crawlid": crawlid, "spiderid": spiderid, "uuid": new_uuid()}
    outcome = validate(rest, request)
    if isinstance(outcome, Rejected):
        raise ApiError(400, BAD_PATH_PARAMETER, outcome.reason.removeprefix("Invalid request: "))
    return JSONResponse(envelope(await send(rest, request)))
