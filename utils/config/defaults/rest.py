"""The REST service (docs/contract.md §7).

Part of :mod:`crawlhive.utils.config.defaults` (read its docstring first)."""

# ruff: noqa: E501

REST_HOST: str = "127.0.0.1"
"""Address the REST service listens on. Loopback by default; any other address needs REST_API_KEY
(or REST_INSECURE) (docs/contract.md §10.1)."""

REST_PORT: int = 5343
"""Port the REST service listens on (alias: FLASK_PORT)."""

REST_API_KEY: str = ""
"""When non-empty, required as the X-Api-Key header on every endpoint but ``/`` and ``/metrics``."""

REST_INSECURE: bool = False
"""Allow REST_HOST to be a non-loopback address without REST_API_KEY (a WARNING at start-up)."""

REST_ALLOWED_HOSTS: list[str] = []
"""Host names (the ``Host`` header, port ignored) the REST service answers besides ``localhost``,
``127.0.0.1``, ``[::1]`` and REST_HOST itself; any other ``Host`` gets 400, so a web page whose
name was rebound to this machine's address (DNS rebinding) cannot use it. ``*.example.com`` allows
the subdomains of example.com, ``*`` any name. With REST_HOST=0.0.0.0, list the names clients use."""

WAIT_FOR_RESPONSE_TIME: float = 5.0
"""Seconds ``POST /feed`` waits for the answer to a request with a uuid."""

POLL_RESULT_TTL: float = 86400.0
"""Seconds an unclaimed answer stays available to ``POST /poll``."""

REST_MAX_BODY_BYTES: int = 1048576
"""Largest request body the REST service accepts."""
