"""Property-based run of schemathesis against ``/openapi.json``: no input makes the service fail (5xx).

The real app runs with a real Redis and broker; schemathesis (its CLI, in a subprocess, with a
bounded number of examples per operation) generates valid and invalid requests from the published
document, including the four incoming schemas with their effective limits.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.rest import RunningRest, running_rest

from crawlhive.utils.config.settings import Settings

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
#: Test cases per operation: enough to reach every status of every endpoint, small enough for CI.
MAX_EXAMPLES = 30


@pytest.fixture
def rest(settings: Settings) -> Iterator[RunningRest]:
    # Short waits: generated requests with a uuid are never answered (no redis-monitor runs here).
    with running_rest(settings.copy_with(WAIT_FOR_RESPONSE_TIME=0.1, REST_MAX_BODY_BYTES=65536)) as running:
        yield running


@pytest.mark.timeout(300)
def test_no_generated_request_gets_a_server_error(rest: RunningRest, tmp_path: Path) -> None:
    if not SCHEMATHESIS.exists():
        pytest.skip("schemathesis is not installed (make install)")
    command = [
        str(SCHEMATHESIS),
        "run",
        f"{rest.url}/openapi.json",
        "--checks",
        "not_a_server_error",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        "6",
        "--workers",
        "1",  # schemathesis compiles code in its workers; CPython 3.11's compiler is not thread-safe
        "--generation-database",
        "none",
        "--suppress-health-check",
        "all",
        "--no-color",
        "--request-timeout",
        "20",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=280, cwd=tmp_path, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "Test cases:" in output and " passed" in output, output[-3000:]
