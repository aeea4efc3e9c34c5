"""Named proxy pools (docs/contract.md §21.1): read from PROXY_POOLS and PROXY_POOLS_FILE, checked.

A pool is a name and a list of forward proxies (``http://user:pass@host:port``; ``https://`` for a
proxy spoken to over TLS). A proxy is named everywhere outside the crawler's connection by
``host:port`` (:attr:`Proxy.id`): the credentials in its URL never reach an item, a log line, an
answer, a stat, a metric or the dashboard. The kafka-monitor checks a crawl's ``proxy_pool`` and
the redis-monitor a ``domain-update``'s against the same pools, so an unknown name is a validation
dead letter before anything is queued.

``PROXY_POOLS_FILE`` holds one ``name url`` a line (``#`` starts a comment). :meth:`ProxyPools.current`
reads it again when its modification time or size changed (looked at no more than once a second);
a file that no longer reads keeps the pools last read, with one WARNING naming the file and line.

Written here: Scrapy's ``HttpProxyMiddleware`` applies one proxy URL to a request (and turns its
credentials into ``Proxy-Authorization``), which crawlhive relies on; choosing among proxies,
cluster-wide, is not something Scrapy or a maintained library does (scrapy-rotating-proxies keeps
its state in one process).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from crawlhive.utils.config.errors import SettingsError
from crawlhive.utils.config.log import add_secrets, mask_url, url_secrets
from crawlhive.utils.contract.hosts import host_problem
from crawlhive.utils.contract.text import excerpt
from crawlhive.utils.rules.domains import domain_of_host, tenant_site

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

#: What a pool name may be (it is part of Redis keys and metric labels).
POOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")
#: Proxy URL schemes Scrapy's HTTP handler speaks to a proxy with.
PROXY_SCHEMES = ("http", "https")
#: Seconds between two looks at PROXY_POOLS_FILE's modification time.
FILE_CHECK_S = 1.0


class ProxyConfigError(SettingsError):
    """A pool or proxy URL that cannot be used; the message names the setting (or file and line)."""


@dataclass(frozen=True, slots=True)
class Proxy:
    """One proxy of a pool: ``url`` (with its credentials, for the connection only) and ``id``
    (``host:port``, what every output names it by)."""

    url: str
    id: str


def parse_proxy_url(url: str, where: str) -> Proxy:
    """The :class:`Proxy` of *url*.

    Raises:
        ProxyConfigError: not an ``http://`` or ``https://`` URL with a host (and optionally a port,
            credentials and a ``/`` path); the message names *where* and shows the URL masked.
    """
    shown = excerpt(mask_url(url))
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ProxyConfigError(f"{where}: {shown} is not a proxy URL ({exc})") from None
    if parts.scheme.lower() not in PROXY_SCHEMES:
        raise ProxyConfigError(f"{where}: {shown} is not an http:// or https:// proxy URL")
    if not parts.hostname or any(c in url for c in " \t\r\n"):
        raise ProxyConfigError(f"{where}: {shown} names no proxy host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ProxyConfigError(f"{where}: {shown} is a proxy URL: scheme, credentials, host and port only")
    port = port or (443 if parts.scheme.lower() == "https" else 80)
    host = parts.hostname
    shown_host = f"[{host}]" if ":" in host else host
    return Proxy(url=url.strip(), id=f"{shown_host}:{port}")


def parse_pools(raw: Any, where: str) -> dict[str, tuple[Proxy, ...]]:
    """``{"name": [url, …]}`` checked: names are POOL_NAME, URLs :func:`parse_proxy_url`, no
    proxy twice in a pool, no empty pool.

    Raises:
        ProxyConfigError: naming *where*, the pool and (masked) the URL.
    """
    if not isinstance(raw, dict):
        raise ProxyConfigError(f"{where}: expected a mapping of pool names to lists of proxy URLs")
    pools: dict[str, tuple[Proxy, ...]] = {}
    for name, urls in raw.items():
        if not isinstance(name, str) or not POOL_NAME.match(name):
            raise ProxyConfigError(f"{where}: pool name {excerpt(str(name))} must match {POOL_NAME.pattern}")
        if isinstance(urls, str):
            urls = [urls]
        if not isinstance(urls, list) or not urls or not all(isinstance(u, str) for u in urls):
            raise ProxyConfigError(f"{where}: pool {name} must be a non-empty list of proxy URLs")
        proxies = [parse_proxy_url(u, f"{where} (pool {name})") for u in urls]
        ids = [p.id for p in proxies]
        doubled = sorted({i for i in ids if ids.count(i) > 1})
        if doubled:
            raise ProxyConfigError(f"{where}: pool {name} names {', '.join(doubled)} more than once")
        pools[name] = tuple(proxies)
    return pools


def parse_pools_file(text: str, path: str) -> dict[str, tuple[Proxy, ...]]:
    """The pools of a PROXY_POOLS_FILE's *text*: ``name url`` a line, blank lines and ``#``
    comments ignored; a pool's proxies in the order of their lines.

    Raises:
        ProxyConfigError: naming *path* and the line.
    """
    raw: dict[str, list[str]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if not line:
            continue
        fields = line.split()
        if len(fields) != 2:
            raise ProxyConfigError(f"PROXY_POOLS_FILE {path}, line {number}: expected `name url`")
        raw.setdefault(fields[0], []).append(fields[1])
    pools: dict[str, tuple[Proxy, ...]] = {}
    for name, urls in raw.items():
        pools.update(parse_pools({name: urls}, f"PROXY_POOLS_FILE {path}"))
    return pools


def parse_domain_pools(raw: Any) -> dict[str, str]:
    """PROXY_DOMAIN_POOLS checked: ``{domain or tenant site: pool name}``, each key reduced as a
    request's host is (a bucket, §3.2, or the tenant site of a shared suffix).

    Raises:
        ProxyConfigError: naming PROXY_DOMAIN_POOLS and the key.
    """
    if not isinstance(raw, dict):
        raise ProxyConfigError("PROXY_DOMAIN_POOLS: expected a mapping of domains to pool names")
    pins: dict[str, str] = {}
    for key, pool in raw.items():
        scope = (tenant_site(key) or domain_of_host(key)) if isinstance(key, str) and not host_problem(key) else ""
        if not scope:
            raise ProxyConfigError(f"PROXY_DOMAIN_POOLS: {excerpt(str(key))} is not a domain")
        if not isinstance(pool, str) or not POOL_NAME.match(pool):
            raise ProxyConfigError(f"PROXY_DOMAIN_POOLS: the pool of {scope} must be a pool name")
        pins[scope] = pool
    return pins


class ProxyPools:
    """The pools in force: PROXY_POOLS, and over them (by pool name) those of PROXY_POOLS_FILE,
    read again when the file changes; which domains the operator pinned to a pool
    (PROXY_DOMAIN_POOLS) and which pools a request may name (PROXY_CLIENT_POOLS). Thread-safe (the
    kafka-monitor validates in threads)."""

    def __init__(
        self,
        pools: dict[str, tuple[Proxy, ...]],
        default: str = "",
        path: str = "",
        domain_pools: dict[str, str] | None = None,
        client_pools: list[str] | None = None,
        domain_updates: bool = False,
    ) -> None:
        self._base = dict(pools)
        self.default = default
        self.path = path
        self.domain_pools = dict(domain_pools or {})
        """The operator's pins: domain or tenant site -> pool (PROXY_DOMAIN_POOLS)."""
        self.client_pools = ["*"] if client_pools is None else list(client_pools)
        """The pools a request may name (PROXY_CLIENT_POOLS; ``*``: any)."""
        self.domain_updates = domain_updates
        """Whether a ``domain-update``'s pool applies (PROXY_POOL_DOMAIN_UPDATES)."""
        self._file: dict[str, tuple[Proxy, ...]] = {}
        self._stamp: tuple[float, int] | None = None
        self._checked = 0.0
        self._lock = threading.Lock()
        self.generation = 0
        """Goes up each time the pools in force change (callers cache what they derive from them)."""
        if path:
            self._file = self._read(strict=True)
            add_secrets(_secrets_of(self._file))
        self._check_default()

    @classmethod
    def from_settings(cls, settings: Settings) -> ProxyPools:
        """Raises ProxyConfigError naming PROXY_POOLS, PROXY_POOLS_FILE, PROXY_POOL_DEFAULT or
        PROXY_DOMAIN_POOLS."""
        pools = parse_pools(settings.PROXY_POOLS, "PROXY_POOLS")
        return cls(
            pools,
            str(settings.PROXY_POOL_DEFAULT or ""),
            str(settings.PROXY_POOLS_FILE or ""),
            domain_pools=parse_domain_pools(settings.PROXY_DOMAIN_POOLS),
            client_pools=list(settings.PROXY_CLIENT_POOLS),
            domain_updates=settings.PROXY_POOL_DOMAIN_UPDATES,
        )

    def _check_default(self) -> None:
        where = "PROXY_POOLS or PROXY_POOLS_FILE"
        if self.default and self.default not in self.pools():
            raise ProxyConfigError(f"PROXY_POOL_DEFAULT: no pool named {self.default!r} in {where}")
        for scope, pool in sorted(self.domain_pools.items()):
            if pool not in self.pools():
                raise ProxyConfigError(f"PROXY_DOMAIN_POOLS: no pool named {pool!r} (for {scope}) in {where}")

    def pin(self, domain: str, site: str | None = None) -> str | None:
        """The operator's pool of *domain* (or of *site*, its tenant site, first), else None."""
        if not self.domain_pools:
            return None
        return (self.domain_pools.get(site) if site else None) or self.domain_pools.get(domain)

    def refused(self, name: str, field: str = "proxy_pool") -> str | None:
        """A validation reason when a request may not name pool *name* (PROXY_CLIENT_POOLS), else None."""
        if "*" in self.client_pools or name in self.client_pools:
            return None
        if not self.client_pools:
            return f"{field} is not accepted: the operator chooses proxy pools here (PROXY_CLIENT_POOLS)"
        allowed = ", ".join(sorted(self.client_pools))
        return f"proxy pool {excerpt(name)} may not be named by a request (PROXY_CLIENT_POOLS: {allowed})"

    def _read(self, strict: bool) -> dict[str, tuple[Proxy, ...]]:
        try:
            stat = os.stat(self.path)
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            if strict:
                raise ProxyConfigError(f"PROXY_POOLS_FILE: cannot read {self.path}: {exc}") from None
            raise ProxyConfigError(f"PROXY_POOLS_FILE {self.path}: {exc}") from None
        pools = parse_pools_file(text, self.path)
        self._stamp = (stat.st_mtime, stat.st_size)
        return pools

    def _refresh(self) -> None:
        now = time.monotonic()
        if not self.path or now - self._checked < FILE_CHECK_S:
            return
        with self._lock:
            if now - self._checked < FILE_CHECK_S:
                return
            self._checked = now
            try:
                stat = os.stat(self.path)
                if (stat.st_mtime, stat.st_size) == self._stamp:
                    return
                pools = self._read(strict=False)
            except (OSError, ProxyConfigError) as exc:
                if self._stamp is not None:
                    logger.warning("%s; keeping the proxy pools last read", exc)
                    self._stamp = None  # one warning per change of the file
                return
            if pools != self._file:
                self._file = pools
                add_secrets(_secrets_of(pools))  # before anything logs them: the new credentials are masked
                self.generation += 1
                logger.info("proxy pools read again from %s: %s", self.path, ", ".join(sorted(pools)) or "none")

    def pools(self) -> dict[str, tuple[Proxy, ...]]:
        """Every pool in force, by name (the file's wins over PROXY_POOLS for the same name)."""
        self._refresh()
        return {**self._base, **self._file}

    def get(self, name: str) -> tuple[Proxy, ...] | None:
        """The proxies of pool *name*, or None when there is no such pool."""
        return self.pools().get(name)

    def __bool__(self) -> bool:
        return bool(self._base) or bool(self.path)

    def unknown(self, name: str | None) -> str | None:
        """A validation reason when *name* is not a pool in force, else None."""
        if not name or name in self.pools():
            return None
        known = ", ".join(sorted(self.pools())) or "none is configured (PROXY_POOLS, PROXY_POOLS_FILE)"
        return f"unknown proxy pool {excerpt(name)} (known: {known})"

    def secrets(self) -> list[str]:
        """The credentials in the pools' URLs (for the log formatter's redaction)."""
        return _secrets_of(self.pools())


def _secrets_of(pools: dict[str, tuple[Proxy, ...]]) -> list[str]:
    return [s for proxies in pools.values() for p in proxies for s in url_secrets(p.url)]


def pools_from_settings(settings: Settings) -> ProxyPools:
    """:meth:`ProxyPools.from_settings`, one object per settings object (the kafka-monitor's
    validation, the redis-monitor's domain-update and the crawler share it)."""
    cached = _BY_SETTINGS.get(id(settings))
    if cached is not None and cached[0] is settings:
        return cached[1]
    pools = ProxyPools.from_settings(settings)
    if len(_BY_SETTINGS) >= 64:
        _BY_SETTINGS.clear()
    _BY_SETTINGS[id(settings)] = (settings, pools)
    return pools


_BY_SETTINGS: dict[int, tuple[Any, ProxyPools]] = {}
