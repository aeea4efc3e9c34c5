"""The rendering crawlers' guard proxy (crawler/render/guard_proxy.py), spoken to as Chromium speaks to it:
absolute-form plain HTTP requests and CONNECT tunnels, against a real server on loopback."""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import Iterator

import pytest
from twisted.internet.error import DNSLookupError

from crawlhive.crawler.netguard import BlockedNetwork
from crawlhive.crawler.render.guard_proxy import GuardProxy, listening_socket


class _Site(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, dict[str, str]]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        _Site.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        body = b"hello from the site"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def site() -> Iterator[int]:
    _Site.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


async def _lookup(host: str) -> str:
    if host == "blocked.test":
        raise BlockedNetwork("blocked network: blocked.test (10.0.0.1) is in 10.0.0.0/8")
    if host == "nowhere.test":
        raise DNSLookupError(host)
    return "127.0.0.1"  # every other name "resolves" to the test site


async def _exchange(proxy: GuardProxy, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


def _run(coro_factory, **limits: float) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        proxy = GuardProxy(listening_socket(), _lookup, **limits)
        await proxy.start()
        try:
            await coro_factory(proxy)
        finally:
            await proxy.close()

    asyncio.run(main())


def test_a_plain_request_is_sent_on_in_origin_form_without_hop_headers(site: int) -> None:
    async def check(proxy: GuardProxy) -> None:
        request = (
            f"GET http://allowed.test:{site}/page?q=1 HTTP/1.1\r\nHost: allowed.test:{site}\r\n"
            "Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\nAccept: text/html\r\n\r\n"
        ).encode()
        answer = await _exchange(proxy, request)
        assert answer.startswith(b"HTTP/1.0 200") or answer.startswith(b"HTTP/1.1 200")
        assert answer.endswith(b"hello from the site")
        assert proxy.connections == 1 and proxy.refused == 0

    _run(check)
    ((path, headers),) = _Site.seen
    assert path == "/page?q=1"
    assert headers["accept"] == "text/html" and headers["connection"] == "close"
    assert "proxy-connection" not in headers and "proxy-authorization" not in headers


def test_a_tunnel_copies_bytes_both_ways(site: int) -> None:
    async def check(proxy: GuardProxy) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(f"CONNECT allowed.test:{site} HTTP/1.1\r\nHost: allowed.test:{site}\r\n\r\n".encode())
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 200 Connection established\r\n\r\n"
        writer.write(b"GET /through HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        assert answer.endswith(b"hello from the site")

    _run(check)
    assert [path for path, _ in _Site.seen] == ["/through"]


def test_a_blocked_host_is_never_connected_to(site: int) -> None:
    async def check(proxy: GuardProxy) -> None:
        tunnel = await _exchange(proxy, b"CONNECT blocked.test:443 HTTP/1.1\r\nHost: blocked.test:443\r\n\r\n")
        assert tunnel.startswith(b"HTTP/1.1 403")
        # A plain request gets no answer at all, so the browser cannot take one for the site's.
        plain = await _exchange(proxy, b"GET http://blocked.test/x HTTP/1.1\r\nHost: blocked.test\r\n\r\n")
        assert plain == b""
        assert proxy.refused == 2 and proxy.connections == 0

    _run(check)
    assert _Site.seen == []


def test_bad_requests_get_an_error_and_nothing_is_connected(site: int) -> None:
    async def check(proxy: GuardProxy) -> None:
        ftp = await _exchange(proxy, b"GET ftp://allowed.test/x HTTP/1.1\r\n\r\n")
        assert ftp.startswith(b"HTTP/1.1 400")
        unknown = await _exchange(proxy, b"GET http://nowhere.test/ HTTP/1.1\r\n\r\n")
        assert unknown.startswith(b"HTTP/1.1 502")
        garbage = await _exchange(proxy, b"\x00\x01 not http\r\n\r\n")
        assert garbage.startswith(b"HTTP/1.1 400")
        assert proxy.connections == 0

    _run(check)
    assert _Site.seen == []


class _RawSite:
    """A site that records every byte each connection sends it: answers the first request head
    with ``Connection: close``, half-closes, and reads on until the proxy closes (or 2 s)."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok")
        await writer.drain()
        writer.write_eof()
        try:
            while chunk := await asyncio.wait_for(reader.read(65536), 2):
                data += chunk
        except TimeoutError:
            pass
        self.received.append(data)
        writer.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def test_a_kept_alive_connection_carries_one_request_only() -> None:
    """Requests pipelined after the first on one browser connection are never sent on unparsed to
    the first request's site: the proxy forwards one request (and its body) per connection, answers
    with ``Connection: close`` and closes."""
    raw = _RawSite()

    async def check(proxy: GuardProxy) -> None:
        port = await raw.start()
        first = (
            f"POST http://allowed.test:{port}/one HTTP/1.1\r\nHost: allowed.test:{port}\r\n"
            "Proxy-Connection: keep-alive\r\nContent-Length: 5\r\n\r\nhello"
        )
        second = "GET http://blocked.test/two HTTP/1.1\r\nHost: blocked.test\r\n\r\n"
        answer = await _exchange(proxy, (first + second).encode())
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and body == b"ok"
        assert b"\r\nConnection: close" in head and b"keep-alive" not in head
        deadline = asyncio.get_running_loop().time() + 5
        while not raw.received and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        raw.close()

    _run(check)
    (received,) = raw.received
    assert received.startswith(b"POST /one HTTP/1.1\r\n") and received.endswith(b"\r\n\r\nhello")
    assert b"two" not in received and received.count(b"HTTP/1.1") == 1


def test_an_idle_connection_is_closed(site: int) -> None:
    """A connection that sends no request head, and a tunnel nobody speaks on, are closed after
    the idle timeout."""

    async def check(proxy: GuardProxy) -> None:
        started = asyncio.get_running_loop().time()
        assert await _exchange(proxy, b"") == b""
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(f"CONNECT allowed.test:{site} HTTP/1.1\r\nHost: allowed.test:{site}\r\n\r\n".encode())
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        assert asyncio.get_running_loop().time() - started < 4

    _run(check, idle_timeout_s=0.5)


def test_connections_over_the_cap_are_closed_at_once(site: int) -> None:
    async def check(proxy: GuardProxy) -> None:
        held = [await asyncio.open_connection("127.0.0.1", proxy.port) for _ in range(2)]
        await asyncio.sleep(0.2)
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        assert await asyncio.wait_for(reader.read(), 2) == b""  # closed unanswered
        writer.close()
        for _, held_writer in held:
            held_writer.close()
        await asyncio.sleep(0.2)
        request = f"GET http://allowed.test:{site}/after HTTP/1.1\r\nHost: allowed.test:{site}\r\n\r\n"
        assert (await _exchange(proxy, request.encode())).endswith(b"hello from the site")

    _run(check, max_connections=2)
    assert [path for path, _ in _Site.seen] == ["/after"]
