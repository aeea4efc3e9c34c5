"""The start-up check of Chromium's sandbox (crawler/sandbox.py's sandbox_problem)."""

from __future__ import annotations

import pwd
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

from crawlhive.crawler.sandbox import browser_user, sandbox_problem
from crawlhive.utils.config.settings import Settings


@pytest.fixture
def batch_processor() -> Iterator[None]:
    """An OpenTelemetry batch processor alive in this process, as in a crawler that traces: it
    restarts its worker thread in every forked child of the process."""
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    yield
    provider.shutdown()


def test_the_sandbox_check_holds_in_a_crawler_that_traces(batch_processor: None) -> None:
    """The check makes a user namespace, which unshare(2) refuses (EINVAL) to a process with more
    than one thread: run in a fork of this process, it failed every time once tracing was on, and
    a rendering crawler that traces refused to start. This machine allows user namespaces (the
    rendering tests need them), so the check finds no problem, time after time."""
    user = browser_user(Settings.from_overrides())
    assert [sandbox_problem(user) for _ in range(20)] == [None] * 20


def test_the_sandbox_check_names_what_refused_it() -> None:
    """The browser as root is refused before any namespace is tried, naming the setting."""
    problem = sandbox_problem(pwd.getpwnam("root"))
    assert problem is not None and "RENDER_BROWSER_USER" in problem
