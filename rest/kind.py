"""REST as a process kind (:mod:`crawlhive.utils.process.kinds`): ``crawlhive rest``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from crawlhive.utils.process.kinds import Option, ProcessKind, UpGroup

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Run the REST service on REST_HOST:REST_PORT until SIGINT/SIGTERM (0 after a graceful stop)."""
    from crawlhive.rest.server import run_rest

    return run_rest(settings)


KIND = ProcessKind(
    name="rest",
    summary="run the REST service",
    epilog="""examples:
  crawlhive rest                              # on 127.0.0.1:5343
  REST_API_KEY=s3cret crawlhive rest --host 0.0.0.0   # reachable from other machines""",
    entry=run,
    options=(
        Option(("--host",), setting="REST_HOST", help="listen address (REST_HOST)"),
        Option(("--port",), setting="REST_PORT", help="listen port (REST_PORT)", arguments={"type": int}),
    ),
    order=90,
    up=(UpGroup(),),
    compose=("rest",),
    consumes=("outbound_firehose", "dead_letter", "frontier"),
    produces=("incoming",),
    view="crawlhive.rest.view.RestView",
)
