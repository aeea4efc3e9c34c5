"""Budgets (docs/contract.md §10.7, §19.1): which limit holds for a crawl, and the setting that names it.

* a crawl's **page budget**: requests admitted into the frontier, across all domains (the request's
  ``max_pages``, else CRAWL_MAX_PAGES_DEFAULT; the smaller when both are set);
* a recurring crawl's **schedule cap**: pages on its recrawl schedule (the request's ``max_pages``,
  else RECRAWL_MAX_PAGES_DEFAULT);
* an appid's **ceiling**: pages on the recrawl schedules of all its crawls together
  (APPID_MAX_SCHEDULED_PAGES), counted cluster-wide in ``Keys.app_scheduled``.

The crawler applies them, the redis-monitor's ``info`` and REST's ``GET /crawls`` say which one
stopped a crawl's admission, by the name returned here. A limit of 0 or less is none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: How an answer names a request's own ``max_pages`` (the settings are named as they are set).
REQUEST_MAX_PAGES = "max_pages"


@dataclass(frozen=True, slots=True)
class Limit:
    """A limit that holds: its value and what set it (``max_pages`` or a setting's name)."""

    value: int
    name: str


def page_budget(max_pages: int | None, default: int | None) -> Limit | None:
    """The page budget of a crawl sent with *max_pages* (None: unset) under CRAWL_MAX_PAGES_DEFAULT
    *default*: the smaller of the two that are set; None when neither is (§10.7)."""
    limits = []
    if max_pages is not None and max_pages > 0:
        limits.append(Limit(max_pages, REQUEST_MAX_PAGES))
    if default is not None and default > 0:
        limits.append(Limit(default, "CRAWL_MAX_PAGES_DEFAULT"))
    return min(limits, key=lambda limit: limit.value) if limits else None


def schedule_cap(max_pages: int | None, default: int | None) -> Limit | None:
    """The pages a recurring crawl sent with *max_pages* may keep on its schedule (§19.1): its
    ``max_pages``, else RECRAWL_MAX_PAGES_DEFAULT *default*; None when neither is set."""
    if max_pages is not None and max_pages > 0:
        return Limit(max_pages, REQUEST_MAX_PAGES)
    if default is not None and default > 0:
        return Limit(default, "RECRAWL_MAX_PAGES_DEFAULT")
    return None


def app_ceiling(ceiling: int | None) -> Limit | None:
    """The pages all recurring crawls of one appid may keep on their schedules together
    (APPID_MAX_SCHEDULED_PAGES *ceiling*); None when unset."""
    return Limit(ceiling, "APPID_MAX_SCHEDULED_PAGES") if ceiling is not None and ceiling > 0 else None


def budget_fields(budget: Limit | None, admitted: int) -> dict[str, Any]:
    """What an info answer about a crawl says of its page *budget* (§4.2, §10.7), given the
    requests it *admitted*: ``max_pages`` (the budget that holds), ``total_admitted`` and, once the
    budget is used up, ``admission_stopped`` naming it; nothing without a budget."""
    if budget is None:
        return {}
    fields: dict[str, Any] = {"max_pages": budget.value, "total_admitted": admitted}
    if admitted >= budget.value:
        fields["admission_stopped"] = budget.name
    return fields


__all__ = ["REQUEST_MAX_PAGES", "Limit", "app_ceiling", "budget_fields", "page_budget", "schedule_cap"]
