"""The bundled demo site: a few hundred interlinked pages over three loopback hosts.

Each host (127.0.0.1, 127.0.0.2, 127.0.0.3: three domains to the frontier, docs/contract.md §3.2) serves
``/`` linking to ten sections, each section linking to ten pages, and pages linking across hosts.
``/robots.txt`` disallows ``/private/`` (linked from every index, never fetched), and every index
links to ``/missing.html`` (a 404). A crawl of ``http://127.0.0.1:<port>/`` at ``maxdepth`` 3
reaches every page of every host.

Served by :class:`SiteServer` (the standard library's threading HTTP server): small,
dependency-free, and fast enough for a demo of a few hundred pages.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

from crawlhive.app.embedded import free_port

HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
SECTIONS = 10
PAGES_PER_SECTION = 10
ROBOTS = "User-agent: *\nDisallow: /private/\n"


class SiteServer(ThreadingHTTPServer):
    """The standard library's threading HTTP server with a listen backlog a crawler cannot overflow.

    ``socketserver`` listens with a backlog of 5. Several crawlers opening their connections at
    once (a throttle window opening: one burst of new connections) overflow it, and the kernel then
    drops the extra SYNs, which the clients resend only after a second: those requests reach the
    server a second after the others. A site that measures politeness from arrival times (the
    throttle benchmark, the tests) would see the late ones inside the next window. Production
    servers listen with hundreds (nginx: 511). Daemon threads, so a stuck client never blocks exit.
    """

    request_queue_size = 512
    daemon_threads = True


def expected_pages(hosts: int = len(HOSTS)) -> int:
    """Pages a full crawl returns an item for: per host the index, sections, pages; plus one 404."""
    return hosts * (1 + SECTIONS + SECTIONS * PAGES_PER_SECTION) + hosts


@dataclass
class DemoSite:
    """The demo site's servers; use as a context manager."""

    hosts: tuple[str, ...] = HOSTS
    servers: list[SiteServer] = field(default_factory=list)

    def __enter__(self) -> DemoSite:
        bases = []
        for host in self.hosts:
            port = free_port(host)
            bases.append(f"http://{host}:{port}")
        for i, host in enumerate(self.hosts):
            handler = type("Handler", (_Handler,), {"base": bases[i], "others": bases[:i] + bases[i + 1 :]})
            server = SiteServer((host, int(bases[i].rsplit(":", 1)[1])), handler)
            threading.Thread(target=server.serve_forever, name=f"demo-site-{host}", daemon=True).start()
            self.servers.append(server)
        self.bases = bases
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()

    @property
    def seed(self) -> str:
        return self.bases[0] + "/"


class _Handler(BaseHTTPRequestHandler):
    base: ClassVar[str]
    others: ClassVar[list[str]]
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib's name
        pass  # the demo prints its own summary

    def do_GET(self) -> None:  # noqa: N802 - stdlib's name
        path = self.path.split("?", 1)[0]
        if path == "/robots.txt":
            return self._send(HTTPStatus.OK, ROBOTS, "text/plain")
        page = self._page(path)
        if page is None:
            return self._send(HTTPStatus.NOT_FOUND, "<html><body><h1>Not Found</h1></body></html>")
        title, links = page
        items = "".join(f'<li><a href="{href}">{text}</a></li>' for href, text in links)
        head = f"<!DOCTYPE html><html><head><title>{title}</title></head>"
        body = f"{head}<body><h1>{title}</h1><ul>{items}</ul></body></html>"
        return self._send(HTTPStatus.OK, body)

    def _page(self, path: str) -> tuple[str, list[tuple[str, str]]] | None:
        host = self.base.split("//")[1]
        if path == "/":
            links = [(f"/s{s}/", f"Section {s}") for s in range(SECTIONS)]
            links += [(f"{o}/", f"Host {o.split('//')[1]}") for o in self.others]
            links += [("/private/secret.html", "Private"), ("/missing.html", "Missing page")]
            return f"{host} home", links
        parts = path.strip("/").split("/")
        if len(parts) == 1 and parts[0][:1] == "s" and parts[0][1:].isdigit() and int(parts[0][1:]) < SECTIONS:
            s = int(parts[0][1:])
            links = [(f"/s{s}/p{p}.html", f"Page {s}.{p}") for p in range(PAGES_PER_SECTION)]
            links.append(("/", "Home"))
            return f"{host} section {s}", links
        if len(parts) == 2 and parts[0][:1] == "s" and parts[1].startswith("p") and parts[1].endswith(".html"):
            section, page = parts[0][1:], parts[1][1:-5]
            if section.isdigit() and page.isdigit() and int(section) < SECTIONS and int(page) < PAGES_PER_SECTION:
                other = self.others[(int(section) + int(page)) % len(self.others)] if self.others else self.base
                links = [
                    ("/", "Home"),
                    (f"/s{section}/", f"Section {section}"),
                    (f"{other}/s{section}/p{page}.html", "Elsewhere"),
                ]
                return f"{host} page {section}.{page}", links
        return None

    def _send(self, status: HTTPStatus, body: str, content_type: str = "text/html") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", f"{content_type}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
