"""The network guard of rendering crawlers: :class:`GuardProxy`, the forward proxy on loopback
every connection of the browser goes through (docs/contract.md §10.2, §15).

The proxy's socket is bound before Scrapy starts (:func:`bind_proxy_socket`, by
:func:`~crawlhive.crawler.render.settings.render_settings`) and served once the engine runs
(:class:`~crawlhive.crawler.render.middleware.RenderMiddleware` takes it by its port).

Why a proxy written here rather than Playwright's request interception: Playwright's ``route``
handler is not called for redirects, and it would check a name that Chromium then resolves again
itself; a proxy that connects to the address it checked closes both gaps. The proxy libraries on
PyPI (proxy.py, mitmproxy) are whole servers with their own processes and TLS interception, which
this needs none of: it only checks an address and copies bytes.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from twisted.internet.error import DNSLookupError

from crawlhive.crawler.netguard import BlockedNetwork

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

#: Largest request head the proxy reads from the browser.
MAX_HEAD = 65536
#: Seconds the proxy waits for the browser's request head, and for a connection to a site.
PROXY_TIMEOUT_S = 30.0

#: Proxy sockets bound before Scrapy starts, by port (Scrapy deep-copies its settings, which a
#: socket cannot be, so the settings carry the port: ``CRAWLHIVE_RENDER_PROXY_PORT``).
_PROXY_SOCKETS: dict[int, socket.socket] = {}


def listening_socket() -> socket.socket:
    """A TCP socket listening on a free loopback port (the proxy serves it once the loop runs;
    the browser's connections wait in its backlog until then)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock


def bind_proxy_socket() -> int:
    """Bind a :func:`listening_socket` for a crawler's proxy and keep it until
    :func:`take_proxy_socket`; returns its port (the Scrapy setting ``CRAWLHIVE_RENDER_PROXY_PORT``)."""
    sock = listening_socket()
    port = int(sock.getsockname()[1])
    _PROXY_SOCKETS[port] = sock
    return port


def take_proxy_socket(port: int) -> socket.socket:
    """The socket :func:`bind_proxy_socket` bound on *port*, handed over once (KeyError after)."""
    return _PROXY_SOCKETS.pop(port)


class GuardProxy:
    """A forward HTTP proxy on loopback that connects only to addresses the network guard allows.

    Handles ``CONNECT host:port`` (HTTPS, WebSockets: the bytes are copied, TLS stays end to end)
    and absolute-form plain HTTP requests. *lookup* resolves a host and raises
    :class:`BlockedNetwork` for a refused one; the connection is made to the address it returned,
    never to a second resolution.

    A plain request is parsed whole (head, then exactly the ``Content-Length`` bytes of its body) and
    is the only one its connection carries: it is sent on with ``Connection: close``, the site's
    answer goes back with ``Connection: close``, and the connection is closed, so nothing the
    browser sends after it on a kept-alive connection is ever sent on unparsed. A connection with
    nothing to read or copy for *idle_timeout_s* is closed, and one past *max_connections* open at
    once is closed as soon as it is accepted (any local user can connect to the port).
    """

    def __init__(
        self,
        sock: socket.socket,
        lookup: Callable[[str], Awaitable[str]],
        idle_timeout_s: float = PROXY_TIMEOUT_S,
        max_connections: int = 256,
    ) -> None:
        self.sock = sock
        self.lookup = lookup
        self.idle_timeout_s = idle_timeout_s
        self.max_connections = max_connections
        self.server: asyncio.Server | None = None
        self.refused = 0
        """Connections refused by the guard so far (tests and logs)."""
        self.connections = 0
        """Connections made to sites so far."""
        self.over_cap = 0
        """Browser connections closed unanswered because max_connections were open."""
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    async def start(self) -> None:
        if self.server is None:
            self.server = await asyncio.start_server(self._serve, sock=self.sock, limit=MAX_HEAD)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            for task in list(self._tasks):
                task.cancel()
            self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._tasks) >= self.max_connections:
            self.over_cap += 1
            if self.over_cap == 1 or self.over_cap % 1000 == 0:
                logger.warning(
                    "render proxy: %d connections open, closing new ones (RENDER_PROXY_MAX_CONNECTIONS; "
                    "%d closed so far)",
                    self.max_connections,
                    self.over_cap,
                )
            writer.close()
            return
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._proxy(reader, writer)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # a browser connection gone, idle or malformed: nothing to answer
        except asyncio.CancelledError:
            pass  # the proxy is closing
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), min(self.idle_timeout_s, PROXY_TIMEOUT_S))
        line, _, header_block = head.partition(b"\r\n")
        method, target, version = line.split(b" ", 2)
        tunnel = method.upper() == b"CONNECT"
        length = 0
        if tunnel:
            parts = urlsplit("//" + target.decode("latin-1"))
            host, port = parts.hostname or "", parts.port or 443
            path = b""
        else:
            parts = urlsplit(target.decode("latin-1"))
            framing = _body_length(header_block)
            if parts.scheme != "http" or not parts.hostname or framing is None:
                writer.write(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
                return
            length = framing
            host, port = parts.hostname, parts.port or 80
            path = (parts.path or "/").encode("latin-1") + (
                b"?" + parts.query.encode("latin-1") if parts.query else b""
            )
        try:
            address = await self.lookup(host)
        except BlockedNetwork as exc:
            self.refused += 1
            logger.debug("render proxy refused %s:%s: %s", host, port, exc)
            if tunnel:  # the browser fails the tunnel (ERR_TUNNEL_CONNECTION_FAILED)
                writer.write(b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
            # A plain request gets no answer at all: an answer would be taken as the site's, and a
            # page redirected here would become an item of the proxy's 403.
            return
        except DNSLookupError:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
            return
        up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(address, port), PROXY_TIMEOUT_S)
        self.connections += 1
        idle = _Idle(self.idle_timeout_s)
        try:
            if tunnel:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await asyncio.gather(_copy(reader, up_writer, idle), _copy(up_reader, writer, idle))
                return
            up_writer.write(method + b" " + path + b" " + version + b"\r\n" + _forwarded_headers(header_block))
            while length > 0:  # the body, and not a byte more
                chunk = await asyncio.wait_for(reader.read(min(length, 65536)), idle.timeout_s)
                if not chunk:
                    return
                up_writer.write(chunk)
                await up_writer.drain()
                length -= len(chunk)
            answer = await asyncio.wait_for(up_reader.readuntil(b"\r\n\r\n"), idle.timeout_s)
            status, _, answer_headers = answer.partition(b"\r\n")
            writer.write(status + b"\r\n" + _forwarded_headers(answer_headers))
            await _copy(up_reader, writer, idle)
        finally:
            up_writer.close()


def _body_length(block: bytes) -> int | None:
    """The length of a plain request's body by its header *block*: its one ``Content-Length``, 0
    without one; None for a ``Transfer-Encoding`` (Chromium sends none on HTTP/1.1) or a malformed
    or repeated length."""
    lengths = []
    for header in block.split(b"\r\n"):
        name, _, value = header.partition(b":")
        name = name.strip().lower()
        if name == b"transfer-encoding":
            return None
        if name == b"content-length":
            lengths.append(value.strip())
    if not lengths:
        return 0
    if len(set(lengths)) != 1 or not lengths[0].isdigit() or len(lengths[0]) > 15:
        return None
    return int(lengths[0])


def _forwarded_headers(block: bytes) -> bytes:
    """A request's or an answer's header block as sent on: hop-by-hop headers dropped, ``Connection:
    close`` added (one request per proxied connection)."""
    hop = {b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization"}
    lines = [h for h in block.split(b"\r\n") if h and h.split(b":", 1)[0].strip().lower() not in hop]
    return b"\r\n".join([*lines, b"Connection: close", b"", b""])


class _Idle:
    """When a proxied connection last moved a byte, either way: it is idle only when neither
    direction has (a download does not time out the quiet upload side of its tunnel)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.last = time.monotonic()

    async def read(self, source: asyncio.StreamReader) -> bytes:
        """The next bytes of *source*; TimeoutError once nothing has moved either way for the timeout."""
        while True:
            wait = self.last + self.timeout_s - time.monotonic()
            if wait <= 0:
                raise TimeoutError("idle")
            try:
                chunk = await asyncio.wait_for(source.read(65536), wait)
            except TimeoutError:
                continue  # the other direction may have moved meanwhile
            self.last = time.monotonic()
            return chunk


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter, idle: _Idle) -> None:
    """Copy *source* to *sink* until end of stream, then half-close *sink*.

    Raises:
        TimeoutError: nothing moved on the connection for the idle timeout.
    """
    try:
        while chunk := await idle.read(source):
            sink.write(chunk)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (OSError, RuntimeError):
        sink.close()
