"""Budgets (docs/contract.md §10.7, §19.1): which limit holds and the name an answer gives it."""

from __future__ import annotations

from crawlhive.utils.config import defaults
from crawlhive.utils.rules.budgets import Limit, app_ceiling, budget_fields, page_budget, schedule_cap


def test_every_crawl_and_every_recurring_crawl_has_a_budget_by_default() -> None:
    """A request without ``max_pages`` is bounded (it once could queue a million pages, for ever
    with ``recrawl``): the defaults are budgets, well under the largest ``max_pages`` a request may ask."""
    budget = page_budget(None, defaults.CRAWL_MAX_PAGES_DEFAULT)
    cap = schedule_cap(None, defaults.RECRAWL_MAX_PAGES_DEFAULT)
    ceiling = app_ceiling(defaults.APPID_MAX_SCHEDULED_PAGES)
    assert budget is not None and budget.name == "CRAWL_MAX_PAGES_DEFAULT"
    assert cap is not None and cap.name == "RECRAWL_MAX_PAGES_DEFAULT"
    assert ceiling is not None and ceiling.name == "APPID_MAX_SCHEDULED_PAGES"
    assert cap.value <= budget.value < defaults.SCHEMA_MAX_PAGES_MAX
    assert budget.value <= ceiling.value


def test_the_smaller_budget_holds_and_zero_or_less_is_none() -> None:
    assert page_budget(7, 9) == Limit(7, "max_pages")
    assert page_budget(20, 9) == Limit(9, "CRAWL_MAX_PAGES_DEFAULT")
    assert page_budget(None, 9) == Limit(9, "CRAWL_MAX_PAGES_DEFAULT")
    assert page_budget(5, None) == Limit(5, "max_pages")
    assert page_budget(None, 0) is None and page_budget(None, -3) is None and page_budget(0, None) is None
    assert schedule_cap(50, 10) == Limit(50, "max_pages")  # the request's own max_pages is its cap
    assert schedule_cap(None, 10) == Limit(10, "RECRAWL_MAX_PAGES_DEFAULT")
    assert schedule_cap(None, 0) is None and app_ceiling(0) is None and app_ceiling(None) is None


def test_an_answer_names_the_budget_only_once_it_stopped_admission() -> None:
    budget = Limit(9, "CRAWL_MAX_PAGES_DEFAULT")
    assert budget_fields(budget, 8) == {"max_pages": 9, "total_admitted": 8}
    assert budget_fields(budget, 9) == {
        "max_pages": 9,
        "total_admitted": 9,
        "admission_stopped": "CRAWL_MAX_PAGES_DEFAULT",
    }
    assert budget_fields(None, 1000) == {}
