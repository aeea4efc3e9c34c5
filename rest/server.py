"""``crawlhive rest``: serve the REST application with uvicorn until SIGINT/SIGTERM."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import uvicorn

from crawlhive.rest.app import create_app

if TYPE_CHECKING:
    from crawlhive.utils.settings import Settings

logger = logging.getLogger(__name__)


def server_for(settings: Settings, host: str | None = None, port: int | None = None) -> uvicorn.Server:
    """A uvicorn server of the app on REST_HOST:REST_PORT (or *host*:*port*), not started.

    Logging stays crawlhive's (configured once by ``main()``): uvicorn's own config is not applied.
    """
    config = uvicorn.Config(
        create_app(settings),
        host=host if host is not None else settings["REST_HOST"],
        port=port if port is not None else settings.getint("REST_PORT"),
        log_config=None,
        lifespan="on",
        server_header=False,
    )
    return uvicorn.Server(config)


def run_rest(settings: Settings) -> int:
    """Serve until interrupted; returns 0 after a graceful stop, 1 if the server could not start."""
    server = server_for(settings)
    logger.info("REST service on http://%s:%d", settings["REST_HOST"], settings.getint("REST_PORT"))
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits when it cannot bind the port
        logger.error("REST service could not start (exit %s); check REST_HOST / REST_PORT", exc.code)
        return 1
    return 0 if server.started else 1
