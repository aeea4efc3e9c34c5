"""The REST API's ASGI middleware (docs/contract.md §7.4, §10.1), outermost first: the ``Host``
check (:class:`AllowedHosts`), the API key (:class:`ApiKeyMiddleware`) and the response counter
(:class:`CountResponses`). Each refuses with the envelope of :mod:`crawlhive.rest.http`."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from starlette.middleware.trustedhost import TrustedHostMiddleware

from crawlhive.rest.http import BAD_API_KEY, BAD_HOST, failure

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from crawlhive.utils.config.settings import Settings


class ApiKeyMiddleware:
    """Checks ``X-Api-Key`` before routing (docs/contract.md §7.4) when REST_API_KEY is set.

    ``/`` and ``GET /metrics`` are exempt; ``GET /dashboard`` also accepts ``?api_key=``.
    """

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.api_key = api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.api_key:
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        reading = method in ("GET", "HEAD")
        if path == "/" or (path == "/metrics" and reading):
            await self.app(scope, receive, send)
            return
        provided = dict(scope["headers"]).get(b"x-api-key", b"")
        if not provided and path == "/dashboard" and reading:
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            provided = (query.get("api_key") or [""])[0].encode()
        if not hmac.compare_digest(provided, self.api_key):
            await failure(401, BAD_API_KEY)(scope, receive, send)
            return
        await self.app(scope, receive, send)


#: Host names every REST service answers, whatever REST_HOST and REST_ALLOWED_HOSTS say.
LOOPBACK_HOST_NAMES = ("localhost", "127.0.0.1", "[::1]")
#: The scope key :class:`AllowedHosts`' check sets on a request whose ``Host`` passed.
_HOST_PASSED = "crawlhive.host_passed"


def allowed_hosts(settings: Settings, bound_host: str | None = None) -> list[str]:
    """The ``Host`` names REST answers: loopback names, the address it binds (*bound_host*, by
    default REST_HOST; IPv6 in brackets) and REST_ALLOWED_HOSTS, lower case."""
    bound = str(settings.REST_HOST if bound_host is None else bound_host).strip().strip("[]")
    names = [*LOOPBACK_HOST_NAMES, f"[{bound}]" if ":" in bound else bound]
    names += [str(name).strip() for name in settings.REST_ALLOWED_HOSTS]
    return sorted({name.lower() for name in names if name})


class AllowedHosts:
    """Answers 400 to a request whose ``Host`` header names none of :func:`allowed_hosts`
    (DNS rebinding, docs/contract.md §10.1), before the API key is checked or anything routed.

    The matching (port ignored, IPv6 literals, ``*.example.com``, ``*``) is Starlette's
    :class:`TrustedHostMiddleware`; it only answers in plain text, so it runs as a check here and
    the refusal is the envelope, naming the setting to change.
    """

    def __init__(self, app: ASGIApp, hosts: list[str]) -> None:
        self.app = app
        self.hosts = hosts
        self.check = TrustedHostMiddleware(self._passed, allowed_hosts=hosts, www_redirect=False)

    @staticmethod
    async def _passed(scope: Scope, receive: Receive, send: Send) -> None:
        scope[_HOST_PASSED] = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def discard(message: Message) -> None:  # the check's own plain-text refusal
            return None

        await self.check(scope, receive, discard)
        if scope.pop(_HOST_PASSED, False):
            await self.app(scope, receive, send)
            return
        host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
        shown = repr(host[:100]) + ("..." if len(host) > 100 else "") if host else "missing"
        cause = f"Host {shown} is not a name of this REST service; add the name clients use to REST_ALLOWED_HOSTS"
        await failure(400, BAD_HOST, cause)(scope, receive, send)


class CountResponses:
    """Counts every response by method and status code (``crawlhive_rest_responses_total``)."""

    def __init__(self, app: ASGIApp, count: Callable[[str, int], None]) -> None:
        self.app = app
        self.count = count

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.count(scope["method"], int(message["status"]))
            await send(message)

        await self.app(scope, receive, counting_send)
