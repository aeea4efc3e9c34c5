"""The impersonating fetch: browser-grade TLS and HTTP/2 fingerprints for plain crawlers
(docs/contract.md §25).

A site behind a bot wall looks at the connection before it reads a header: the TLS ClientHello
(its ciphers, extensions, groups and their order: JA3/JA4) and the HTTP/2 preface (SETTINGS, the
connection WINDOW_UPDATE, pseudo-header order: the "Akamai" fingerprint). Twisted's OpenSSL
connection is not a browser's, whatever User-Agent it sends. :class:`FetchDownloadHandler` is the
crawler's handler for ``http`` and ``https``: a request whose meta says ``impersonate``
(:data:`FETCH_META`, set by :class:`~crawlhive.crawler.fetch.FetchChoiceMiddleware`) is fetched
with ``curl_cffi`` as a real browser would fetch it, every other request by Scrapy's own HTTP/1.1
handler, unchanged.

Why ``curl_cffi`` (0.17): it binds curl-impersonate, a libcurl built with BoringSSL and patched to
send the ClientHello and HTTP/2 preface of named Chrome, Firefox and Safari releases, with their
default headers in the browsers' order; it is maintained with new browser releases, ships wheels
for every platform we run, has an asyncio client (no thread per request), and, being libcurl,
takes ``CURLOPT_RESOLVE``, which pins the connection to the address the network guard checked.
``impit`` (Rust, reqwest/rustls) and ``primp`` (Rust, rquest/BoringSSL) impersonate well too, but
neither lets the caller pin a host's address per request (both resolve names themselves, which a
DNS-rebinding answer could slip past the guard), and their profiles are fewer and less
documented. Profiles are real browsers' (curl-impersonate's captured ones): nothing is randomised.

What the impersonated fetch keeps from the plain one (every middleware runs as before; this
handler only replaces the connection):

* **the network guard** (§10.2): the host is resolved by the crawler's
  :class:`~crawlhive.crawler.netguard.GuardedResolver` and curl connects to that checked address
  only (``CURLOPT_RESOLVE``); a refused host fails with its ``BlockedNetwork`` (a dead letter, no
  retry, as for plain pages). Through a proxy the target was checked before
  (:class:`~crawlhive.crawler.proxy.ProxyMiddleware`) and the proxy's own host is pinned the same
  way. curl follows no redirect (they go through the frontier, §10.7), speaks http and https only,
  and keeps no Alt-Svc cache (libcurl uses none unless told: no hop to another host or port);
* **fail-closed pinning**: the pin is not taken on trust. curl's pre-request callback
  (``CURLOPT_PREREQFUNCTION``: called once the connection is made or reused, before a byte of the
  request is written) compares the address and port curl is actually connected to
  (``conn_primary_ip``, the proxy's through a proxy) with the checked ones, and holds the address
  to the guard's policy once more; any difference aborts the transfer there, and the page ends as
  a ``blocked network: …`` dead letter (:class:`Pin`). After the headers arrive,
  ``CURLINFO_PRIMARY_IP``/``PRIMARY_PORT`` and ``CURLINFO_REDIRECT_COUNT`` are checked again before
  a byte of the body is delivered. curl_cffi has no setter for that callback (its ``setopt``
  refuses function options it has no C glue for), so :func:`_prereq_callback` is a cffi callback
  set with libcurl's own ``curl_easy_setopt`` on each handle the session hands out;
* DOWNLOAD_TIMEOUT (the request's ``download_timeout``, for the whole exchange) and
  DOWNLOAD_MAXSIZE, counted on the body as curl decodes it, so a compression bomb stops at the
  limit (``response too large`` dead letter via :class:`~crawlhive.crawler.limits.ResponseLimitMiddleware`);
* certificates are checked by the same setting as Scrapy's (``DOWNLOAD_VERIFY_CERTIFICATES``);
* proxies (``meta["proxy"]`` and the ``Proxy-Authorization`` Scrapy's HttpProxyMiddleware made);
  cookies only as the request's own ``Cookie`` header (curl's cookie engine is emptied for every
  request, so a ``Set-Cookie`` never reaches another page, §3.7); conditional headers of recrawls
  and a crawl's ``headers`` are sent as given.

What differs, on purpose: the ``User-Agent``, ``Accept``, ``Accept-Language`` and
``Accept-Encoding`` are the profile's browser's (a Chrome ClientHello with ``crawlhive/1.0`` would
be the most obvious bot of all); the body is decoded by curl (brotli and zstd included), the
response flagged ``decoded``.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import ipaddress
import logging
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from scrapy.core.downloader.handlers._base_streaming import BaseStreamingDownloadHandler, _BaseResponseArgs
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadCancelledError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    NotConfigured,
)
from scrapy.http import Headers
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.misc import build_from_crawler

from crawlhive.crawler.items import FETCH_META
from crawlhive.crawler.netguard import BlockedNetwork, NetworkPolicy, installed_resolver
from crawlhive.utils.config.errors import SettingsError

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

#: Request meta key of the browser profile an impersonated request uses (a key of :data:`PROFILES`
#: or a curl_cffi target); absent: FETCH_PROFILE.
PROFILE_META = "crawlhive_fetch_profile"
#: The profile names crawlhive offers, each a current release curl_cffi 0.17 ships. Pinned here,
#: not curl_cffi's moving aliases, so an upgrade changes fingerprints only in a reviewed commit.
PROFILES: dict[str, str] = {"chrome": "chrome152", "firefox": "firefox155", "safari": "safari270"}
#: Request headers the profile's browser sets itself: Scrapy's (or a crawl's) are not sent.
BROWSER_HEADERS = (b"User-Agent", b"Accept", b"Accept-Language", b"Accept-Encoding", b"Proxy-Authorization")
#: Response flag of a body curl decoded (its ``Content-Encoding`` is not to be decoded again).
DECODED = "decoded"

#: Said of a body over DOWNLOAD_MAXSIZE that curl was decoding (crawler/limits.py reads it).
ONCE_DECODED = "once decoded"

#: The extra curl options of the request being sent (see :class:`_PinnedSession`).
_REQUEST_OPTIONS: contextvars.ContextVar[dict[Any, Any]] = contextvars.ContextVar("crawlhive_curl_options")
#: The :class:`Pin` of the request being sent, checked by curl's pre-request callback.
_REQUEST_PIN: contextvars.ContextVar[Pin | None] = contextvars.ContextVar("crawlhive_curl_pin", default=None)
#: libcurl's ``CURL_PREREQFUNC_OK`` / ``CURL_PREREQFUNC_ABORT``.
_PREREQ_OK, _PREREQ_ABORT = 0, 1

logger = logging.getLogger(__name__)


def normal_address(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """*address* as one value whatever its spelling: an IPv6 scope (``%eth0``) and brackets
    dropped, an IPv4-mapped IPv6 address (``::ffff:127.0.0.1``) as its IPv4 address; None if it
    is not an address."""
    text = address.strip().strip("[]").split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


class Pin:
    """Where curl may connect for one request: the *address* and *port* the guard checked for
    *host* (the target's, or through a proxy the proxy's). :meth:`check` is asked before a byte of
    the request is written (curl's pre-request callback) and again once the headers arrived; the
    first refusal is kept in :attr:`refused` (the dead letter's ``error``).

    *policy* is the guard's :class:`~crawlhive.crawler.netguard.NetworkPolicy`, applied to the
    connected address once more (None through a proxy: the operator's proxies are not held to it,
    docs/contract.md §21.5; the target was checked before it went to the proxy)."""

    def __init__(self, host: str, address: str, port: int, policy: NetworkPolicy | None) -> None:
        self.host = host
        self.address = address
        self.port = port
        self.policy = policy
        self.expected = normal_address(address)
        self.refused: str | None = None

    def check(self, address: str, port: int) -> str | None:
        """Why a connection to *address*:*port* must carry nothing of this request, or None."""
        got = normal_address(address)
        if got is None or self.expected is None or got != self.expected or int(port) != self.port:
            reason = (
                f"blocked network: {self.host} was connected to {address or '(no address)'}:{port}, "
                f"not to the checked {self.address}:{self.port} (the address pin did not hold)"
            )
        elif self.policy is not None and (network := self.policy.blocking(str(got))) is not None:
            reason = self.policy.reason(self.host, str(got), network)
        else:
            reason = None
        if reason is not None and self.refused is None:
            self.refused = reason
            logger.warning("%s; the page ends as a dead letter", reason)
        return reason


def _prereq_callback() -> Any:
    """The cffi callback for ``CURLOPT_PREREQFUNCTION`` (made once): checks the :class:`Pin` its
    ``CURLOPT_PREREQDATA`` handle names; an exception in it aborts too (``error``)."""
    global _PREREQ
    if _PREREQ is None:
        from curl_cffi import ffi

        def prereq(clientp: Any, primary_ip: Any, _local_ip: Any, primary_port: int, _local_port: int) -> int:
            pin: Pin = ffi.from_handle(clientp)
            address = ffi.string(primary_ip).decode("ascii", "replace") if primary_ip else ""
            return _PREREQ_OK if pin.check(address, primary_port) is None else _PREREQ_ABORT

        _PREREQ = ffi.callback("int(void *, char *, char *, int, int)", prereq, error=_PREREQ_ABORT)
    return _PREREQ


_PREREQ: Any = None


def curl_target(profile: str) -> str:
    """The curl_cffi impersonation target of *profile* (a name of :data:`PROFILES`, or a target
    curl_cffi knows, such as ``chrome146``).

    Raises:
        SettingsError: curl_cffi has no such target; the message names FETCH_PROFILE.
    """
    from curl_cffi.requests.impersonate import BrowserTypeLiteral

    target = PROFILES.get(profile, profile)
    known = BrowserTypeLiteral.__args__  # type: ignore[attr-defined]
    if target not in known:
        names = ", ".join(sorted(PROFILES))
        raise SettingsError(
            f"FETCH_PROFILE: {profile!r} is not a browser profile (one of {names}, or a curl_cffi target)"
        )
    return target


def session_profile(session: str, profiles: list[str] | tuple[str, ...]) -> str:
    """The profile of sticky session *session* (its Redis key and proxy): one of *profiles*,
    the same for the session's life in every crawler; another session, or the same after a ban
    gave it another proxy, is another draw."""
    digest = hashlib.blake2b(session.encode(), digest_size=8).digest()
    return profiles[int.from_bytes(digest, "big") % len(profiles)]


def _resolve_entry(host: str, port: int, address: str) -> str:
    """A ``CURLOPT_RESOLVE`` entry pinning *host*:*port* to *address*."""
    shown = f"[{address}]" if ":" in address else address
    return f"{host}:{port}:{shown}"


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


async def _checked_address(host: str) -> str:
    """*host*'s address as the network guard's resolver gives it (checked).

    Raises:
        BlockedNetwork: the guard refuses it (NetworkGuardMiddleware makes it a dead letter).
        DNSLookupError: it does not resolve.
    """
    resolver = installed_resolver()
    if resolver is None:
        raise NotConfigured("the network guard's resolver is not installed (TWISTED_DNS_RESOLVER)")
    address: str = await maybe_deferred_to_future(resolver.getHostByName(host))
    return address


def _session_class() -> type:
    from curl_cffi.requests import AsyncSession

    class PinnedSession(AsyncSession):  # type: ignore[type-arg]
        """curl_cffi's AsyncSession whose curl options are the session's plus the request's own
        (``CURLOPT_RESOLVE`` of this request's checked address), read from a context variable:
        curl_cffi takes curl options per session only, and each request runs in a task of its own."""

        @property
        def curl_options(self) -> dict[Any, Any]:
            return {**self._base_options, **_REQUEST_OPTIONS.get({})}

        @curl_options.setter
        def curl_options(self, value: dict[Any, Any]) -> None:
            self._base_options = value

        async def pop_curl(self) -> Any:
            """A handle with this request's :class:`Pin` checked by curl before the request is
            written (module docstring); none set (a test's bare session): no check."""
            from curl_cffi import ffi, lib
            from curl_cffi.const import CurlOpt

            curl = await super().pop_curl()
            pin = _REQUEST_PIN.get()
            if pin is not None:
                handle = ffi.new_handle(pin)
                self._pin_handles[id(curl)] = handle  # alive while the transfer may call back
                lib._curl_easy_setopt(curl._curl, CurlOpt.PREREQFUNCTION, _prereq_callback())
                lib._curl_easy_setopt(curl._curl, CurlOpt.PREREQDATA, handle)
            return curl

        def release_curl(self, curl: Any) -> None:
            super().release_curl(curl)  # reset: the callback is unset with every other option
            self._pin_handles.pop(id(curl), None)

        @property
        def _pin_handles(self) -> dict[int, Any]:
            pins: dict[int, Any] | None = self.__dict__.get("_crawlhive_pins")
            if pins is None:
                pins = self.__dict__["_crawlhive_pins"] = {}
            return pins

    return PinnedSession


if TYPE_CHECKING:
    _Base = BaseStreamingDownloadHandler[Any]
else:
    _Base = BaseStreamingDownloadHandler


class ImpersonatingDownloadHandler(_Base):
    """Fetches a request with curl_cffi under a browser profile (module docstring). Scrapy's
    streaming handler base reads the body (DOWNLOAD_MAXSIZE, the ``bytes_received`` signals)."""

    supports_proxies: ClassVar[bool] = True

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self.default_profile = str(crawler.settings.get("FETCH_PROFILE") or "chrome")
        curl_target(self.default_profile)  # SettingsError at start, not at the first page
        self.verify = crawler.settings.getbool("DOWNLOAD_VERIFY_CERTIFICATES")
        self.dropped = {h.lower() for h in BROWSER_HEADERS}
        self._session: Any = None

    def _client(self) -> Any:
        if self._session is None:  # made on the reactor's loop, at the first impersonated page
            from curl_cffi.const import CurlOpt

            self._session = _session_class()(
                max_clients=max(self._pool_size_total, 1),
                verify=self.verify,
                trust_env=False,  # no *_PROXY from the environment: proxies are the crawler's choice
                allow_redirects=False,
                curl_options={
                    CurlOpt.PROTOCOLS_STR: b"http,https",
                    CurlOpt.REDIR_PROTOCOLS_STR: b"http,https",
                },
            )
        return self._session

    def _headers(self, request: Request) -> list[tuple[str, str]]:
        return [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, values in request.headers.items()
            if name.lower() not in self.dropped
            for value in values
        ]

    async def _pins(self, request: Request) -> tuple[list[str], Pin]:
        """``CURLOPT_RESOLVE`` entries and the :class:`Pin`: the target's checked address
        (direct) or the proxy's."""
        proxy = request.meta.get("proxy")
        url = urlsplit(proxy if proxy and "://" in proxy else f"http://{proxy}" if proxy else request.url)
        host = url.hostname or ""
        port = url.port or _default_port(url.scheme)
        address = await _checked_address(host)
        resolver = installed_resolver()
        pin = Pin(host, address, port, None if proxy or resolver is None else resolver.policy)
        with contextlib.suppress(ValueError):
            ipaddress.ip_address(host)
            return [], pin  # an address: curl connects to it as given, and it was checked
        # the name as curl may spell it too (curl compares names without case; a trailing dot kept or not)
        return [_resolve_entry(name, port, address) for name in dict.fromkeys((host, host.rstrip(".")))], pin

    @asynccontextmanager
    async def _make_request(self, request: Request, timeout: float) -> AsyncIterator[Any]:
        from curl_cffi.const import CurlOpt
        from curl_cffi.requests import exceptions as curl_errors

        profile = str(request.meta.get(PROFILE_META) or self.default_profile)
        target = curl_target(profile)
        pins, pin = await self._pins(request)
        proxy, auth = self._extract_proxy(request)
        proxy_headers = [f"Proxy-Authorization: {auth}".encode("latin-1")] if auth else []
        options: dict[Any, Any] = {CurlOpt.RESOLVE: pins} if pins else {}
        if proxy_headers:
            options[CurlOpt.PROXYHEADER] = proxy_headers
        token = _REQUEST_OPTIONS.set(options)
        pin_token = _REQUEST_PIN.set(pin)
        started = time.monotonic()
        try:
            response = await self._client().request(
                request.method,
                request.url,
                content=request.body or None,
                headers=self._headers(request),
                impersonate=target,
                timeout=timeout,
                proxy=proxy,
                stream=True,
                discard_cookies=True,
            )
        except curl_errors.Timeout as exc:
            raise DownloadTimeoutError(f"Getting {request.url} took longer than {timeout} seconds.") from exc
        except curl_errors.DNSError as exc:
            raise CannotResolveHostError(str(exc)) from exc
        except (curl_errors.ProxyError, curl_errors.ConnectionError) as exc:
            raise DownloadConnectionRefusedError(str(exc)) from exc
        except curl_errors.RequestException as exc:
            if pin.refused is not None:  # curl's pre-request check aborted it: nothing was sent
                raise BlockedNetwork(pin.refused) from None
            raise DownloadFailedError(str(exc)) from exc
        finally:
            _REQUEST_OPTIONS.reset(token)
            _REQUEST_PIN.reset(pin_token)
        refused = pin.refused or _connection_refusal(response, pin)
        if refused is not None:  # not one byte of the body is delivered
            await response.aclose()
            raise BlockedNetwork(refused)
        request.meta[PROFILE_META] = profile
        for name in BROWSER_HEADERS:  # not sent: the item's request_headers do not claim them (§25)
            request.headers.pop(name, None)
        try:
            yield _Timed(response, started + timeout, request.url, timeout)
        finally:
            await response.aclose()

    @staticmethod
    def _extract_headers(response: Any) -> Headers:
        return Headers(list(response.response.headers.multi_items()))

    @staticmethod
    def _build_base_response_args(response: Any, request: Request, headers: Headers) -> _BaseResponseArgs:
        raw = response.response
        address: Any = None
        with contextlib.suppress(ValueError):
            address = ipaddress.ip_address(raw.primary_ip or "")
        args: _BaseResponseArgs = {
            "status": raw.status_code,
            "url": request.url,
            "headers": headers,
            "ip_address": address,
            "protocol": _protocol(raw.http_version),
        }
        return args

    @staticmethod
    def _iter_body_chunks(response: Any) -> AsyncIterator[bytes]:
        timed: _Timed = response
        return timed.chunks()

    @staticmethod
    def _is_dataloss_exception(exc: Exception) -> bool:
        from curl_cffi.requests import exceptions as curl_errors

        return isinstance(exc, curl_errors.IncompleteRead | curl_errors.ChunkedEncodingError)

    async def _read_response(self, response: Any, request: Request) -> Response:
        try:
            result = await super()._read_response(response, request)
        except DownloadCancelledError as exc:
            if response.response.headers.get("content-encoding") and ONCE_DECODED not in str(exc):
                raise DownloadCancelledError(f"{exc} {ONCE_DECODED}") from None
            raise
        result.flags.append(DECODED)
        return result

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class _Timed:
    """A streamed curl_cffi response whose body must arrive by *deadline* (DOWNLOAD_TIMEOUT holds
    for the whole exchange, as with Scrapy's own handler; curl's own timeout counts too)."""

    def __init__(self, response: Any, deadline: float, url: str, timeout: float) -> None:
        self.response = response
        self.deadline = deadline
        self.url = url
        self.timeout = timeout

    async def chunks(self) -> AsyncIterator[bytes]:
        from curl_cffi.requests import exceptions as curl_errors

        try:
            async for chunk in self.response.aiter_content():
                yield chunk
                if time.monotonic() > self.deadline:
                    raise DownloadTimeoutError(f"Getting {self.url} took longer than {self.timeout} seconds.")
        except curl_errors.Timeout as exc:
            raise DownloadTimeoutError(f"Getting {self.url} took longer than {self.timeout} seconds.") from exc
        except (curl_errors.IncompleteRead, curl_errors.ChunkedEncodingError):
            raise
        except curl_errors.RequestException as exc:
            raise DownloadFailedError(str(exc)) from exc


def _connection_refusal(response: Any, pin: Pin) -> str | None:
    """Why a response whose headers arrived must be discarded: curl followed a redirect, or was
    connected elsewhere than *pin* says (``CURLINFO_PRIMARY_IP``/``PRIMARY_PORT``); None: keep it."""
    if int(getattr(response, "redirect_count", 0) or 0):
        reason = f"blocked network: curl followed a redirect of {pin.host} (redirects go through the frontier)"
        pin.refused = pin.refused or reason
        return reason
    return pin.check(str(getattr(response, "primary_ip", "") or ""), int(getattr(response, "primary_port", 0) or 0))


def _protocol(version: int) -> str:
    """Scrapy's ``Response.protocol`` of curl's ``CURLINFO_HTTP_VERSION``."""
    return {1: "HTTP/1.0", 2: "HTTP/1.1", 3: "h2", 30: "h3"}.get(int(version or 0), "HTTP/1.1")


class FetchDownloadHandler:
    """The ``http``/``https`` download handler of plain crawlers: impersonated requests
    (:data:`FETCH_META` is ``"impersonate"``) through :class:`ImpersonatingDownloadHandler`, all
    others through Scrapy's HTTP/1.1 handler, exactly as before."""

    lazy = False

    def __init__(self, plain: Any, impersonating: ImpersonatingDownloadHandler) -> None:
        self.plain = plain
        self.impersonating = impersonating
        self._closed = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FetchDownloadHandler:
        # One for both schemes: Scrapy builds one per scheme, and each would keep a curl pool.
        shared = _SHARED.get(crawler)
        if shared is not None:
            return shared
        handler = _SHARED[crawler] = cls(
            build_from_crawler(HTTP11DownloadHandler, crawler), ImpersonatingDownloadHandler(crawler)
        )
        return handler

    async def download_request(self, request: Request) -> Response:
        if request.meta.get(FETCH_META) == "impersonate":
            return await self.impersonating.download_request(request)
        response: Response = await self.plain.download_request(request)
        return response

    async def close(self) -> None:
        if not self._closed:  # once, though registered for two schemes
            self._closed = True
            await self.plain.close()
            await self.impersonating.close()


#: The download handler of each crawler (one for http and https).
_SHARED: weakref.WeakKeyDictionary[Any, FetchDownloadHandler] = weakref.WeakKeyDictionary()
