"""The network guard: crawlers never connect to blocked networks (docs/contract.md §10.2).

A crawl request is a stranger's instruction to open connections from inside the operator's network,
so the rule is checked on the **resolved address of every connection** a crawler opens: seeds,
links, redirects and robots.txt alike, after DNS and before connecting. A URL check could not do
this: a public name may resolve to ``127.0.0.1`` or to the cloud metadata address.

How it is wired into Scrapy:

* :class:`GuardedResolver` is the crawler's ``DNS_RESOLVER``. It is Scrapy's own caching resolver
  (one lookup per host name, the result cached, so the guard costs a dict lookup per connection)
  with one step added: an address inside ``CRAWLER_BLOCKED_NETWORKS`` and outside
  ``CRAWLER_ALLOWED_NETWORKS`` is never handed to the connection, so Twisted never connects to it.
  Every HTTP(S) connection Scrapy opens resolves its host through the reactor's resolver, IP
  literals included (``http://127.0.0.1/`` is "resolved" to itself and checked the same way).
* Twisted reports such a host as a failed lookup; :class:`NetworkGuardMiddleware` (nearest the
  downloader) recognises the hosts the resolver refused and marks the request so that it is not
  retried and ends as a crawl dead letter whose ``error`` is ``blocked network: …``.

Written here rather than taken from a library: the SSRF filters on PyPI wrap ``requests`` or
``urllib3`` sessions, which Scrapy does not use.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import TYPE_CHECKING, Any, Self

from scrapy.exceptions import CannotResolveHostError
from scrapy.resolver import CachingThreadedResolver
from scrapy.utils.datatypes import LocalCache
from twisted.internet.error import DNSLookupError

from crawlhive.crawler.requests import end_for_good
from crawlhive.utils.config.errors import SettingsError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from scrapy import Request
    from scrapy.crawler import Crawler
    from twisted.internet.base import ReactorBase
    from twisted.internet.defer import Deferred

    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: Host names whose refusal reason is remembered for the middleware (most recent first out).
REMEMBERED_HOSTS = 10000


class BlockedNetwork(DNSLookupError):
    """A host resolved to a blocked address. A ``DNSLookupError`` so that Twisted treats it as a
    failed lookup (no traceback logged, no connection attempted)."""


def parse_networks(name: str, values: list[Any]) -> list[Network]:
    """The CIDRs of setting *name*.

    Raises:
        SettingsError: a value is not a network; the message names the setting and the value.
    """
    networks: list[Network] = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(str(value).strip(), strict=False))
        except ValueError as exc:
            raise SettingsError(f"{name}: {value!r} is not a network such as 10.0.0.0/8 ({exc})") from None
    return networks


class NetworkPolicy:
    """Which addresses crawlers may connect to: not in *blocked*, unless in *allowed*."""

    def __init__(self, blocked: list[Network], allowed: list[Network]) -> None:
        self.blocked = blocked
        self.allowed = allowed
        self._verdicts: dict[str, Network | None] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """Raises SettingsError naming CRAWLER_BLOCKED_NETWORKS or CRAWLER_ALLOWED_NETWORKS."""
        return cls(
            parse_networks("CRAWLER_BLOCKED_NETWORKS", settings.CRAWLER_BLOCKED_NETWORKS),
            parse_networks("CRAWLER_ALLOWED_NETWORKS", settings.CRAWLER_ALLOWED_NETWORKS),
        )

    def blocking(self, address: str) -> Network | None:
        """The blocked network *address* is in (and no allowed one), or None when it may be used.

        An address that does not parse is blocked by the first blocked network (or ``0.0.0.0/0``).
        """
        try:
            return self._verdicts[address]
        except KeyError:
            pass
        verdict = self._decide(address)
        if len(self._verdicts) >= REMEMBERED_HOSTS:
            self._verdicts.clear()
        self._verdicts[address] = verdict
        return verdict

    def _decide(self, address: str) -> Network | None:
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return self.blocked[0] if self.blocked else ipaddress.ip_network("0.0.0.0/0")
        candidates = [ip]
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            candidates.append(ip.ipv4_mapped)  # ::ffff:127.0.0.1 is 127.0.0.1
        for candidate in candidates:
            if any(candidate in network for network in self.allowed):
                return None
        for candidate in candidates:
            for network in self.blocked:
                if candidate in network:
                    return network
        return None

    def reason(self, host: str, address: str, network: Network) -> str:
        """The dead-letter ``error`` of a request to *host* refused because *address* is in *network*."""
        shown = host if host == address else f"{host} ({address})"
        return (
            f"blocked network: {shown} is in {network}, which CRAWLER_BLOCKED_NETWORKS blocks "
            "(allow it with CRAWLER_ALLOWED_NETWORKS)"
        )


class GuardedResolver(CachingThreadedResolver):
    """Scrapy's caching resolver that refuses addresses the :class:`NetworkPolicy` blocks.

    The refusal reason of each host is remembered for :class:`NetworkGuardMiddleware`, which finds
    this resolver as the reactor's.
    """

    def __init__(self, reactor: ReactorBase, cache_size: int, timeout: float, policy: NetworkPolicy) -> None:
        super().__init__(reactor, cache_size, timeout)
        self.policy = policy
        self.refused: LocalCache[str, str] = LocalCache(REMEMBERED_HOSTS)
        #: Host names of the configured proxies (crawler/proxy.py): operator configuration, never
        #: a crawl's target, so not held to the policy (docs/contract.md §21.5).
        self.exempt: set[str] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler, reactor: ReactorBase) -> Self:
        # Scrapy passes its CrawlerProcess here; only its settings are read.
        settings: Settings = crawler.settings["CRAWLHIVE_SETTINGS"]
        cache_size = crawler.settings.getint("DNSCACHE_SIZE") if crawler.settings.getbool("DNSCACHE_ENABLED") else 0
        return cls(reactor, cache_size, crawler.settings.getfloat("DNS_TIMEOUT"), NetworkPolicy.from_settings(settings))

    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> Deferred[str]:
        return super().getHostByName(name, timeout).addCallback(self._check, name)

    def check_target(self, name: str) -> Deferred[str]:
        """Resolve and check *name* as a crawl's target, proxy hosts included (crawler/proxy.py
        calls it before a request goes to a proxy, and for a direct request to a proxy's host)."""
        return super().getHostByName(name).addCallback(self._check, name, True)

    def _check(self, address: str, name: str, target: bool = False) -> str:
        network = self.policy.blocking(address)
        if network is None or (not target and self.exempt and name.lower() in self.exempt):
            return address
        reason = self.policy.reason(name, address, network)
        if name.lower() in self.refused:
            logger.debug("%s", reason)
        else:  # once per host: its pages end as dead letters with this reason
            logger.warning("%s; its pages end as dead letters", reason)
        self.refused[name.lower()] = reason
        raise BlockedNetwork(reason)

    def refusal(self, host: str) -> str | None:
        """The reason *host* was last refused, or None."""
        return self.refused.get(host.lower())


def installed_resolver() -> GuardedResolver | None:
    """The reactor's resolver when it is the guard (it is in every crawler process)."""
    from twisted.internet import reactor

    resolver = getattr(reactor, "resolver", None)
    return resolver if isinstance(resolver, GuardedResolver) else None


class BlockedDownloadLogFilter(logging.Filter):
    """Drops Scrapy's ``Error downloading …`` lines (each with two chained tracebacks of a failed
    DNS lookup) for a host the guard refused: Twisted reports the refusal as ``DNS lookup failed:
    no results``, which hides the reason, and :class:`GuardedResolver` has already said it once, at
    WARNING, naming CRAWLER_ALLOWED_NETWORKS. Any other download error is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, BlockedNetwork):  # said once at WARNING where it was raised
            return False
        if not isinstance(exc, CannotResolveHostError | DNSLookupError):
            return True
        request = record.args.get("request") if isinstance(record.args, dict) else None
        resolver = installed_resolver()
        url = getattr(request, "url", None)
        if resolver is None or not isinstance(url, str):
            return True
        from urllib.parse import urlsplit

        try:
            host = urlsplit(url).hostname or ""
        except ValueError:
            return True
        return resolver.refusal(host) is None


#: The Scrapy loggers that write a download error with its traceback (the engine's scraper, and
#: the robots.txt middleware, which logs the page's request when its robots.txt failed).
DOWNLOAD_ERROR_LOGGERS = ("scrapy.core.scraper", "scrapy.downloadermiddlewares.robotstxt")


def install_blocked_download_filter() -> None:
    """Add :class:`BlockedDownloadLogFilter` to :data:`DOWNLOAD_ERROR_LOGGERS` (once)."""
    for name in DOWNLOAD_ERROR_LOGGERS:
        target = logging.getLogger(name)
        if not any(isinstance(f, BlockedDownloadLogFilter) for f in target.filters):
            target.addFilter(BlockedDownloadLogFilter())


class NetworkGuardMiddleware:
    """Turns the failed lookup of a host the guard refused into a ``blocked network: …`` outcome:
    no retry (``dont_retry``), and the reason in ``request.meta`` for the lease outcome
    (:class:`~crawlhive.crawler.middlewares.outcomes.LeaseOutcomeMiddleware`). Order 990, nearest the
    downloader, so it sees the failure before Scrapy's ``RetryMiddleware``."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        install_blocked_download_filter()
        return cls()

    def process_exception(self, request: Request, exception: Exception) -> None:
        if isinstance(exception, BlockedNetwork) and exception.args:
            # raised with its reason by the impersonated fetch's pin check (crawler/impersonate.py)
            end_for_good(request, str(exception.args[0]))
            return
        if not isinstance(exception, CannotResolveHostError | DNSLookupError):
            return
        resolver = installed_resolver()
        if resolver is None:
            return
        from urllib.parse import urlsplit

        reason = resolver.refusal(urlsplit(request.url).hostname or "")
        if reason is not None:
            end_for_good(request, reason)
