"""``crawlhive rest``: serve the REST application with uvicorn until SIGINT/SIGTERM.

Before it binds, :func:`check_exposure` refuses a non-loopback ``REST_HOST`` without an API key
(docs/contract.md §10.1); once bound, the address actually listened on is logged (port 0 included).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from typing import TYPE_CHECKING, cast

import uvicorn

from crawlhive.rest.app import create_app
from crawlhive.utils.config.errors import UnsafeSettings
from crawlhive.utils.process.loop import ClusterGone

if TYPE_CHECKING:
    from fastapi import FastAPI

    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)


def is_loopback_host(host: str) -> bool:
    """Whether *host* (an address or a name) only ever means this machine.

    A name counts as loopback when every address it resolves to is loopback (``localhost``); an
    empty host or a wildcard (``0.0.0.0``, ``::``) is every interface, so not loopback.
    """
    host = host.strip().strip("[]")
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses)


def check_exposure(settings: Settings, host: str | None = None) -> None:
    """Refuse to serve strangers without a key; warn when the operator chose to anyway.

    Raises:
        UnsafeSettings: REST_HOST is not loopback, REST_API_KEY is empty and REST_INSECURE is off.
    """
    host = settings.REST_HOST if host is None else host
    if is_loopback_host(host) or settings.REST_API_KEY:
        return
    if not settings.REST_INSECURE:
        raise UnsafeSettings(
            f"REST_HOST={host!r} is reachable from other machines and REST_API_KEY is empty: set "
            "REST_API_KEY to a secret (clients send it as X-Api-Key), or REST_HOST=127.0.0.1, or "
            "REST_INSECURE=true to serve every caller without a key anyway"
        )
    logger.warning(
        "REST service on %s without REST_API_KEY (REST_INSECURE=true): anyone who reaches it can send crawls", host
    )


def rest_url(host: str, port: int) -> str:
    """``http://<host>:<port>`` (IPv6 hosts in brackets): how ``rest``, ``up`` and ``demo`` print it."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _Server(uvicorn.Server):
    """uvicorn's server that logs the address(es) it really bound once it is listening."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.started:
            return
        bound = [sock.getsockname() for server in self.servers for sock in server.sockets]
        urls = sorted({rest_url(str(name[0]), int(name[1])) for name in bound})
        logger.info("REST service on %s (dashboard: %s/dashboard)", ", ".join(urls), urls[0] if urls else "")


def server_for(settings: Settings, host: str | None = None, port: int | None = None) -> uvicorn.Server:
    """A uvicorn server of the app on REST_HOST:REST_PORT (or *host*:*port*), not started.

    Logging stays crawlhive's (configured once by ``main()``): uvicorn's own config is not applied.
    """
    host = host if host is not None else settings.REST_HOST
    config = uvicorn.Config(
        create_app(settings, bound_host=host),
        host=host,
        port=port if port is not None else settings.REST_PORT,
        log_config=None,
        access_log=False,  # one line per request would drown `up` (the dashboard polls); /metrics counts them
        lifespan="on",
        server_header=False,
    )
    return _Server(config)


def run_rest(settings: Settings) -> int:
    """Serve until interrupted; returns 0 after a graceful stop, 1 if the server could not start.

    Raises:
        UnsafeSettings: see :func:`check_exposure` (nothing was bound).
        ClusterGone: the ``crawlhive up`` whose Redis and broker it used has exited.
    """
    check_exposure(settings)
    server = server_for(settings)
    service = cast("FastAPI", server.config.app).state.rest  # the app create_app built

    def stop() -> None:
        server.should_exit = True

    service.on_gone = stop
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits when it cannot bind the port
        logger.error("REST service could not start (exit %s); check REST_HOST / REST_PORT", exc.code)
        return 1
    if service.gone is not None:
        raise ClusterGone(service.gone)  # one line from main(); exit 1
    return 0 if server.started else 1
