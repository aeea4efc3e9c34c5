"""A local HTTPS site that fingerprints its clients (the impersonated fetch's tests, contract §25).

:class:`FingerprintSite` listens on loopback with a certificate of a ``trustme`` CA. For every
connection it reads the TLS ClientHello before the handshake (``MSG_PEEK``) and computes its JA3
and JA4; it offers ``h2`` and ``http/1.1`` by ALPN, and over HTTP/2 reads the client's preface
(SETTINGS, the connection's WINDOW_UPDATE, PRIORITY frames, the first HEADERS' pseudo-header order)
into the Akamai HTTP/2 fingerprint. Every request is recorded (:class:`Hello`) with the fingerprint
of its connection and its headers in the order they came; pages are answered by handlers that see
that record, so a handler can be a wall that refuses clients that are not browsers.

JA3 and JA4 as their authors define them (FoxIO's JA4 specification; Salesforce's JA3), computed
here from the bytes: no library for them is kept on PyPI that reads a raw ClientHello.
"""

from __future__ import annotations

import hashlib
import socket
import ssl
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import h2.config
import h2.connection
import h2.events
import hpack
import trustme

#: TLS GREASE values (RFC 8701): 0x0a0a, 0x1a1a ... 0xfafa.
GREASE = frozenset((b << 8) | b for b in range(0x0A, 0x100, 0x10))
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


@dataclass
class ClientHello:
    """The parts of a ClientHello the fingerprints are made of (GREASE values included)."""

    legacy_version: int
    ciphers: list[int]
    extensions: list[int]
    groups: list[int] = field(default_factory=list)
    point_formats: list[int] = field(default_factory=list)
    signature_algorithms: list[int] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    alpn: list[str] = field(default_factory=list)
    sni: str | None = None

    @property
    def grease(self) -> bool:
        return any(c in GREASE for c in self.ciphers) or any(e in GREASE for e in self.extensions)

    def ja3(self) -> str:
        """The JA3 string (not its MD5: the string is what a test wants to read)."""

        def dashed(values: list[int]) -> str:
            return "-".join(str(v) for v in values if v not in GREASE)

        return ",".join(
            [
                str(self.legacy_version),
                dashed(self.ciphers),
                dashed(self.extensions),
                dashed(self.groups),
                dashed(self.point_formats),
            ]
        )

    def ja4(self) -> str:
        ciphers = [c for c in self.ciphers if c not in GREASE]
        extensions = [e for e in self.extensions if e not in GREASE]
        versions = [v for v in self.versions if v not in GREASE] or [self.legacy_version]
        version = {0x0304: "13", 0x0303: "12", 0x0302: "11", 0x0301: "10"}.get(max(versions), "00")
        alpn = self.alpn[0] if self.alpn else ""
        alpn_code = f"{alpn[0]}{alpn[-1]}" if alpn else "00"
        a = f"t{version}{'d' if self.sni else 'i'}{min(len(ciphers), 99):02d}{min(len(extensions), 99):02d}{alpn_code}"
        b = _sha12(",".join(f"{c:04x}" for c in sorted(ciphers)))
        kept = sorted(e for e in extensions if e not in (0x0000, 0x0010))
        text = ",".join(f"{e:04x}" for e in kept)
        if self.signature_algorithms:
            text += "_" + ",".join(f"{s:04x}" for s in self.signature_algorithms)
        return f"{a}_{b}_{_sha12(text)}"


def _sha12(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _u16s(data: bytes) -> list[int]:
    return [v for (v,) in struct.iter_unpack("!H", data[: len(data) // 2 * 2])]


def parse_client_hello(record: bytes) -> ClientHello:
    """The ClientHello in *record* (TLS records as sent, the handshake in the first).

    Raises:
        ValueError: it is not a ClientHello.
    """
    if len(record) < 9 or record[0] != 0x16 or record[5] != 0x01:
        raise ValueError("not a TLS ClientHello")
    body = record[9:]
    pos = 0
    (legacy,) = struct.unpack_from("!H", body, pos)
    pos += 2 + 32
    pos += 1 + body[pos]  # session id
    (n,) = struct.unpack_from("!H", body, pos)
    ciphers = _u16s(body[pos + 2 : pos + 2 + n])
    pos += 2 + n
    pos += 1 + body[pos]  # compression methods
    hello = ClientHello(legacy, ciphers, [])
    (total,) = struct.unpack_from("!H", body, pos)
    pos += 2
    end = pos + total
    while pos + 4 <= end:
        kind, size = struct.unpack_from("!HH", body, pos)
        data = body[pos + 4 : pos + 4 + size]
        pos += 4 + size
        hello.extensions.append(kind)
        if kind == 0x0000 and len(data) > 5:
            hello.sni = data[5:].decode("ascii", "replace")
        elif kind == 0x000A:
            hello.groups = _u16s(data[2:])
        elif kind == 0x000B:
            hello.point_formats = list(data[1:])
        elif kind == 0x000D:
            hello.signature_algorithms = _u16s(data[2:])
        elif kind == 0x002B:
            hello.versions = _u16s(data[1:])
        elif kind == 0x0010:
            at = 2
            while at < len(data):
                size_ = data[at]
                hello.alpn.append(data[at + 1 : at + 1 + size_].decode("ascii", "replace"))
                at += 1 + size_
    return hello


@dataclass
class H2Preface:
    """What an HTTP/2 client says first: its SETTINGS (in order), the connection window increment,
    PRIORITY frames, and the pseudo-header order of its first request."""

    settings: list[tuple[int, int]] = field(default_factory=list)
    window_update: int = 0
    priorities: list[str] = field(default_factory=list)
    pseudo_headers: str = ""

    def akamai(self) -> str:
        """The Akamai HTTP/2 fingerprint (Blackhat EU 2017): ``S|WU|P|PS``."""
        settings = ";".join(f"{k}:{v}" for k, v in self.settings)
        return f"{settings}|{self.window_update}|{','.join(self.priorities) or '0'}|{self.pseudo_headers}"


def parse_h2_preface(data: bytes) -> H2Preface | None:
    """The preface in the first bytes *data* a client sent on an h2 connection, or None until its
    first HEADERS frame is complete."""
    if not data.startswith(H2_PREFACE):
        return None
    preface = H2Preface()
    pos = len(H2_PREFACE)
    decoder = hpack.Decoder()
    while pos + 9 <= len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        kind, flags = data[pos + 3], data[pos + 4]
        stream = int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
        payload = data[pos + 9 : pos + 9 + length]
        if len(payload) < length:
            return None
        pos += 9 + length
        if kind == 0x4 and not flags & 0x1:  # SETTINGS, not an ACK
            preface.settings += [struct.unpack_from("!HI", payload, i) for i in range(0, length, 6)]
        elif kind == 0x8 and stream == 0:
            preface.window_update = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
        elif kind == 0x2:
            dep, weight = struct.unpack_from("!IB", payload)
            preface.priorities.append(f"{stream}:{dep >> 31}:{dep & 0x7FFFFFFF}:{weight + 1}")
        elif kind == 0x1:
            block = payload
            if flags & 0x8:  # PADDED
                block = block[1 : len(block) - block[0]]
            if flags & 0x20:  # PRIORITY
                block = block[5:]
            headers = decoder.decode(block)
            preface.pseudo_headers = ",".join(str(n)[1] for n, _ in headers if str(n).startswith(":"))
            return preface
    return None


@dataclass
class Hello:
    """One request the site got, with the fingerprints of its connection."""

    server: str
    path: str
    method: str
    headers: list[tuple[str, str]]
    hello: ClientHello
    alpn: str | None
    h2: H2Preface | None
    peer: str = ""
    """The client's address (a proxy's tunnel, when it came through one)."""

    def header(self, name: str) -> str | None:
        return next((v for n, v in self.headers if n.lower() == name.lower()), None)

    @property
    def akamai(self) -> str | None:
        return self.h2.akamai() if self.h2 is not None else None


Answer = tuple[int, list[tuple[str, str]], bytes]
Page = Callable[[Hello], Answer]


def _peek_hello(sock: socket.socket) -> bytes:
    """The first TLS record(s) of *sock*, left unread (the handshake reads them again)."""
    for _ in range(200):
        data = sock.recv(65536, socket.MSG_PEEK)
        if not data:
            return b""
        if len(data) >= 5:
            need = 5 + int.from_bytes(data[3:5], "big")
            if len(data) >= need:
                return data[:need]
        threading.Event().wait(0.01)
    return b""


class FingerprintSite:
    """The site (module docstring): ``pages`` by path, every request in ``seen``."""

    def __init__(self, hosts: tuple[str, ...] = ("127.0.0.1",)) -> None:
        self.ca = trustme.CA()
        cert = self.ca.issue_cert("localhost", *hosts)
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(self.context)
        self.context.set_alpn_protocols(["h2", "http/1.1"])
        self.hosts = hosts
        self.pages: dict[str, Page] = {}
        self.seen: list[Hello] = []
        self.lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.port = 0
        self._stop = threading.Event()

    def url(self, path: str, host: str = "localhost") -> str:
        return f"https://{host}:{self.port}{path}"

    def page(self, path: str, body: bytes, status: int = 200) -> None:
        self.pages[path] = lambda _hello: (status, [("content-type", "text/html; charset=utf-8")], body)

    def hits(self, prefix: str) -> list[Hello]:
        with self.lock:
            return [s for s in self.seen if s.path.startswith(prefix)]

    def start(self) -> None:
        for host in self.hosts:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, self.port))
            self.port = sock.getsockname()[1]
            sock.listen(64)
            sock.settimeout(0.2)
            self._sockets.append(sock)
            threading.Thread(target=self._accept, args=(sock, host), daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        for sock in self._sockets:
            sock.close()

    def _accept(self, listener: socket.socket, host: str) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn, host, peer[0]), daemon=True).start()

    def _serve(self, conn: socket.socket, host: str, peer: str) -> None:
        conn.settimeout(30)
        tls: ssl.SSLSocket | None = None
        try:
            hello = parse_client_hello(_peek_hello(conn))
            tls = self.context.wrap_socket(conn, server_side=True)  # conn is detached into tls
            alpn = tls.selected_alpn_protocol()
            if alpn == "h2":
                self._serve_h2(tls, host, hello, peer)
            else:
                self._serve_h1(tls, host, hello, alpn, peer)
        except (OSError, ValueError, ssl.SSLError):
            pass
        finally:
            (tls or conn).close()

    def _answer(self, record: Hello) -> Answer:
        with self.lock:
            self.seen.append(record)
        page = self.pages.get(record.path.split("?", 1)[0])
        if page is None:
            return 404, [("content-type", "text/plain")], b"not found"
        return page(record)

    def _serve_h1(self, tls: ssl.SSLSocket, host: str, hello: ClientHello, alpn: str | None, peer: str) -> None:
        data = b""
        while True:
            while b"\r\n\r\n" not in data:
                chunk = tls.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, data = data.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = [(n.strip(), v.strip()) for n, v in (line.split(":", 1) for line in lines[1:] if ":" in line)]
            size = int(next((v for n, v in headers if n.lower() == "content-length"), "0"))
            while len(data) < size:
                data += tls.recv(65536)
            data = data[size:]
            status, out, body = self._answer(Hello(host, path, method, headers, hello, alpn, None, peer))
            lines_out = [f"HTTP/1.1 {status} X", *(f"{n}: {v}" for n, v in out), f"Content-Length: {len(body)}"]
            tls.sendall(("\r\n".join(lines_out) + "\r\n\r\n").encode("latin-1") + body)

    def _serve_h2(self, tls: ssl.SSLSocket, host: str, hello: ClientHello, peer: str) -> None:
        connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        connection.initiate_connection()
        tls.sendall(connection.data_to_send())
        first = b""
        preface: H2Preface | None = None
        requests: dict[int, list[tuple[str, str]]] = {}
        while True:
            data = tls.recv(65536)
            if not data:
                return
            if preface is None:
                first += data
                preface = parse_h2_preface(first)
            for event in connection.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    requests[event.stream_id] = [(str(n), str(v)) for n, v in event.headers or []]
                if isinstance(event, h2.events.StreamEnded) and event.stream_id in requests:
                    headers = requests.pop(event.stream_id)
                    self._respond_h2(connection, event.stream_id, headers, (host, peer), hello, preface)
            tls.sendall(connection.data_to_send())

    def _respond_h2(
        self,
        connection: Any,
        stream: int,
        headers: list[tuple[str, str]],
        where: tuple[str, str],
        hello: ClientHello,
        preface: H2Preface | None,
    ) -> None:
        pseudo = dict(h for h in headers if h[0].startswith(":"))
        plain = [h for h in headers if not h[0].startswith(":")]
        host, peer = where
        path, method = pseudo.get(":path", "/"), pseudo.get(":method", "GET")
        record = Hello(host, path, method, plain, hello, "h2", preface, peer)
        status, out, body = self._answer(record)
        connection.send_headers(stream, [(":status", str(status)), *out, ("content-length", str(len(body)))])
        # within the client's first windows (a browser's are megabytes): enough for these tests
        body = body[: max(connection.local_flow_control_window(stream), 0)]
        size = connection.max_outbound_frame_size
        for at in range(0, len(body), size):
            connection.send_data(stream, body[at : at + size])
        connection.end_stream(stream)
