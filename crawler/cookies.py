"""The cookie jar of a sticky session (docs/contract.md §21.2), with cookie-jar rules.

A session (``"sticky": "domain"``: one proxy and one jar per crawl and domain, or per tenant site of
a shared suffix) lives in Redis (``keys.proxy_session``) so that any crawler continues it. Its jar is
kept there as JSON, one record per cookie (:func:`dump`), and every request and response of the
session goes through a :class:`http.cookiejar.CookieJar` loaded from it, the standard library's
implementation of the cookie rules Scrapy's own jar wraps:

* a cookie set without ``Domain`` goes back to its host only (``DomainStrictNonDomain``); one with
  ``Domain`` to that domain's hosts, if the host that set it is one of them and the domain lies
  within the session's scope (never a whole public suffix);
* ``Path``, ``Secure`` (only over ``https``), ``Expires`` / ``Max-Age`` (an expired cookie deletes
  its namesake) are obeyed;
* a cookie goes back only to the port it was set from (stricter than browsers: a session's hosts
  on other ports are other services; the port of the origin, as §10.6 scopes a crawl's own cookies).

Only what a response changed is sent to Redis (:func:`changes`: cookies set, cookies deleted), and
``utils/backends/lua/proxy_session_cookies.lua`` merges it into the session's jar, so two responses of one
session answered at once both count. Bounded: the first MAX_SET_COOKIES ``Set-Cookie`` headers of a
response, each at most MAX_COOKIE_CHARS; a jar holds at most 64 cookies (the script's cap).

Written here: the rules are the standard library's; what is ours is the jar's storage (a cookie
as a JSON record, for a Lua merge in Redis), which neither it nor Scrapy provides.
"""

from __future__ import annotations

import json
import time
from http.cookiejar import Cookie, CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.parse import urlsplit
from urllib.request import Request as UrlRequest

from crawlhive.utils.rules.domains import DEFAULT_PORTS

#: ``Set-Cookie`` headers of one response read into a session's jar.
MAX_SET_COOKIES = 64
#: Longest ``Set-Cookie`` header read into a session's jar (longer ones are ignored).
MAX_COOKIE_CHARS = 4096


def _port(url: str) -> str:
    """The port of *url* as text, the scheme's default when it names none ('' when unparseable)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return ""
    return str(port if port is not None else DEFAULT_PORTS.get(parts.scheme.lower(), 0))


def _within(domain: str, scope: str) -> bool:
    domain = domain.lstrip(".").lower()
    if domain.endswith(".local") and "." not in domain[:-6].strip("[]").replace(":", ""):
        # http.cookiejar's name of a host without a dot: localhost.local, [::1].local
        domain = domain[:-6]
    domain = domain.strip("[]")
    return domain == scope or domain.endswith("." + scope)


class SessionPolicy(DefaultCookiePolicy):
    """The standard rules with host-only cookies kept to their host, ``Domain`` kept within the
    session's *scope* (its domain or tenant site) and every cookie kept to the port that set it."""

    def __init__(self, scope: str) -> None:
        super().__init__(strict_ns_domain=DefaultCookiePolicy.DomainStrictNonDomain)
        self.scope = scope.lower()

    def set_ok_domain(self, cookie: Cookie, request: Any) -> bool:
        return bool(super().set_ok_domain(cookie, request)) and (not self.scope or _within(cookie.domain, self.scope))

    def return_ok_port(self, cookie: Cookie, request: Any) -> bool:
        return cookie.port is None or cookie.port == _port(request.get_full_url())

    def return_ok_domain(self, cookie: Cookie, request: Any) -> bool:
        return bool(super().return_ok_domain(cookie, request)) and (
            not self.scope or _within(urlsplit(request.get_full_url()).hostname or "", self.scope)
        )


def _key(cookie: Cookie) -> str:
    return f"{cookie.domain} {cookie.path} {cookie.name}"


def _record(cookie: Cookie) -> list[Any]:
    return [
        cookie.value,
        cookie.domain,
        cookie.domain_specified,
        cookie.path,
        cookie.secure,
        cookie.expires,
        cookie.port,
    ]


def _cookie(name: str, record: list[Any]) -> Cookie | None:
    try:
        value, domain, domain_specified, path, secure, expires, port = record
        return Cookie(
            version=0,
            name=name,
            value=None if value is None else str(value),
            port=None if port is None else str(port),
            port_specified=False,
            domain=str(domain),
            domain_specified=bool(domain_specified),
            domain_initial_dot=str(domain).startswith("."),
            path=str(path),
            path_specified=True,
            secure=bool(secure),
            expires=None if expires is None else int(expires),
            discard=expires is None,
            comment=None,
            comment_url=None,
            rest={},
        )
    except (TypeError, ValueError):
        return None


def load(stored: str, scope: str) -> CookieJar:
    """The jar of a session from its stored JSON (:func:`dump`'s format; '' or a bad value: empty)."""
    jar = CookieJar(SessionPolicy(scope))
    try:
        records = json.loads(stored) if stored else {}
    except ValueError:
        records = {}
    if not isinstance(records, dict):
        return jar
    for key, record in records.items():
        name = str(key).split(" ", 2)[-1]
        cookie = _cookie(name, record) if isinstance(record, list) else None
        if cookie is not None:
            jar.set_cookie(cookie)
    return jar


def dump(jar: CookieJar) -> dict[str, list[Any]]:
    """``{"<domain> <path> <name>": [value, domain, domain given, path, secure, expires, port]}``."""
    return {_key(cookie): _record(cookie) for cookie in jar}


def header(stored: str, url: str, scope: str) -> str:
    """The ``Cookie`` header value the session's jar sends with a request for *url* ('' for none)."""
    if not stored:
        return ""
    jar = load(stored, scope)
    request = UrlRequest(url)
    jar.add_cookie_header(request)
    return str(request.get_header("Cookie") or "")


class _Headers:
    def __init__(self, values: list[str]) -> None:
        self.values = values

    def get_all(self, name: str, default: Any = None) -> Any:
        return self.values if name.lower() == "set-cookie" else default


class _Response:
    """What :meth:`CookieJar.extract_cookies` reads of a response: its ``Set-Cookie`` headers."""

    def __init__(self, values: list[str]) -> None:
        self._headers = _Headers(values)

    def info(self) -> _Headers:
        return self._headers


def changes(
    stored: str, url: str, set_cookies: list[bytes], scope: str
) -> tuple[dict[str, list[Any]], list[str]] | None:
    """What the ``Set-Cookie`` headers of a response to *url* change in the session's jar (as the
    request saw it, *stored*): ``(cookies set, keys deleted)``, or None when nothing changed."""
    values = [h.decode("latin-1") for h in set_cookies[:MAX_SET_COOKIES] if len(h) <= MAX_COOKIE_CHARS]
    if not values:
        return None
    jar = load(stored, scope)
    before = dump(jar)
    known = {id(cookie) for cookie in jar}
    jar.extract_cookies(_Response(values), UrlRequest(url))  # type: ignore[arg-type]
    port = _port(url)
    for cookie in jar:
        if id(cookie) not in known:
            cookie.port = port  # back to the port that set it only (SessionPolicy.return_ok_port)
    jar.clear_expired_cookies()
    after = dump(jar)
    now = time.time()
    added = {k: v for k, v in after.items() if before.get(k) != v and (v[5] is None or v[5] > now)}
    deleted = [k for k in before if k not in after]
    if not added and not deleted:
        return None
    return added, deleted
