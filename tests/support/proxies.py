"""Loopback forward proxies for the proxy tests (docs/contract.md §21): HTTP (absolute-URL requests)
and ``CONNECT`` tunnels, on asyncio in a thread of the test.

Each proxy records what it was asked (:attr:`LoopProxy.asked`: method, target, the
``Proxy-Authorization`` it got), adds ``X-Via-Proxy: <name>`` to what it forwards (so the site
records which proxy each request came through), checks credentials when given some, and can be
told to ban (answer a status, or a CAPTCHA page, for a host after N requests), to be slow, or to
refuse connections (:meth:`LoopProxy.refuse`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.server
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CAPTCHA = b"<html><body><h1>Please solve this CAPTCHA</h1></body></html>"


@dataclass
class Asked:
    method: str
    target: str
    authorization: str | None


@dataclass
class Ban:
    """Answer *status* (and *body*) to requests for *host* after *after* requests for it."""

    host: str
    status: int = 403
    body: bytes = b"<html>banned</html>"
    after: int = 0
    seen: int = 0


@dataclass
class LoopProxy:
    name: str
    user: str | None = None
    password: str | None = None
    asked: list[Asked] = field(default_factory=list)
    bans: dict[str, Ban] = field(default_factory=dict)
    delay_s: float = 0.0
    port: int = 0
    #: The loopback address tunnels leave from (None: the system's choice), so that a site can
    #: tell which proxy a TLS connection came through.
    source: str | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _server: asyncio.base_events.Server | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    __test__ = False

    @property
    def url(self) -> str:
        creds = f"{self.user}:{self.password}@" if self.user else ""
        return f"http://{creds}127.0.0.1:{self.port}"

    @property
    def id(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> LoopProxy:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._listen())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def refuse(self) -> None:
        """Stop listening: connections to the proxy are refused from now on."""
        assert self._loop is not None and self._server is not None
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)

    def resume(self) -> None:
        """Listen again on the same port."""
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)

    async def _close(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    def stop(self) -> None:
        if self._loop is None:
            return
        with contextlib.suppress(Exception):
            self.refuse()
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop.close()

    def ban(self, host: str, status: int = 403, body: bytes = b"<html>banned</html>", after: int = 0) -> None:
        with self._lock:
            self.bans[host] = Ban(host, status, body, after)

    def unban(self, host: str) -> None:
        with self._lock:
            self.bans.pop(host, None)

    def targets(self) -> list[str]:
        with self._lock:
            return [a.target for a in self.asked]

    def _authorized(self, headers: dict[str, str]) -> bool:
        if self.user is None:
            return True
        expected = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        return headers.get("proxy-authorization", "") == f"Basic {expected}"

    def _banned(self, host: str) -> Ban | None:
        with self._lock:
            ban = self.bans.get(host)
            if ban is None:
                return None
            ban.seen += 1
            return ban if ban.seen > ban.after else None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._one(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        raw_headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
                raw_headers.append((name.strip(), value.strip()))
        with self._lock:
            self.asked.append(Asked(method, target, headers.get("proxy-authorization")))
        if not self._authorized(headers):
            await self._answer(writer, 407, b"proxy authentication required", {"Proxy-Authenticate": "Basic"})
            return
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            local = (self.source, 0) if self.source else None
            upstream_reader, upstream_writer = await asyncio.open_connection(
                host.strip("[]"), int(port), local_addr=local
            )
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
            return
        parts = urlsplit(target)
        host = parts.hostname or ""
        ban = self._banned(host)
        if ban is not None:
            await self._answer(writer, ban.status, ban.body, {"Content-Type": "text/html"})
            return
        length = int(headers.get("content-length") or 0)
        body = await reader.readexactly(length) if length else b""
        upstream_reader, upstream_writer = await asyncio.open_connection(host, parts.port or 80)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        out = [f"{method} {path} HTTP/1.1"]
        for name, value in raw_headers:
            if name.lower() not in ("proxy-authorization", "proxy-connection", "connection", "keep-alive"):
                out.append(f"{name}: {value}")
        out += [f"X-Via-Proxy: {self.name}", "Connection: close"]
        upstream_writer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + body)
        await upstream_writer.drain()
        response = await upstream_reader.read()  # the site closes after the response (Connection: close)
        upstream_writer.close()
        head_end = response.index(b"\r\n\r\n")
        response_head = [
            line
            for line in response[:head_end].split(b"\r\n")
            if not line.lower().startswith((b"connection:", b"keep-alive:"))
        ]
        writer.write(b"\r\n".join([*response_head, b"Connection: close"]) + response[head_end:])
        await writer.drain()

    @staticmethod
    async def _answer(writer: asyncio.StreamWriter, status: int, body: bytes, headers: dict[str, Any]) -> None:
        head = [f"HTTP/1.1 {status} Proxy Says", f"Content-Length: {len(body)}", "Connection: close"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await writer.drain()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


class TlsSite:
    """An HTTPS site on 127.0.0.1 and 127.0.0.2 (one port), a self-signed certificate (crawlers do
    not verify certificates, as Scrapy's default); answers every path with a small page and records
    the paths it served."""

    __test__ = False

    def __init__(self, tmp: Path) -> None:
        self.seen: list[tuple[str, str]] = []
        self.port = 0
        cert, key = tmp / "site.pem", tmp / "site.key"
        _self_signed(cert, key)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.servers: list[http.server.ThreadingHTTPServer] = []

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"https://{host}:{self.port}{path}"

    def start(self) -> TlsSite:
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                site.seen.append((str(self.server.server_address[0]), self.path))
                body = b"<html><head><title>tls</title></head><body>secure</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        for host in ("127.0.0.1", "127.0.0.2"):
            server = http.server.ThreadingHTTPServer((host, self.port), Handler)
            server.socket = self.context.wrap_socket(server.socket, server_side=True)
            self.port = server.server_address[1]
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)
        return self

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


def _self_signed(cert_path: Path, key_path: Path) -> None:
    """A self-signed certificate for 127.0.0.1 and 127.0.0.2 (cryptography, Scrapy's own dependency)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "crawlhive test site")])
    now = datetime.datetime.now(datetime.UTC)
    sans = [x509.IPAddress(ipaddress.ip_address(h)) for h in ("127.0.0.1", "127.0.0.2")]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
