"""The admit: one atomic check of a fetched page's lease, and the filter of its links.

When a page has been parsed, one Lua script (``utils/backends/lua/crawler_admit.lua``) checks that the lease
is still this process's and its crawl not stopped, renews the lease, and runs the page's links
through the per-crawl dupefilter, page caps and page budget (docs/contract.md §3.6, §3.9, §10.7).

Why our own dupefilter (not scrapy-redis's ``RFPDupeFilter``): its one ``SADD`` per request cannot be
batched with the page caps and the lease check into one atomic round trip per page, has no per-crawl
key or expiry, and is not idempotent: a page refetched after its crawler died would find its own
links already seen and lose them. Here each fingerprint records the page that first queued it, and
that page may queue it again. Fingerprints are Scrapy's (``crawler.request_fingerprinter``), stored
as their first 12 bytes (:func:`stored_fingerprint`), the page that queued a link as the first 4
bytes of its own: about 70 bytes of Redis memory per URL of a crawl (docs/operations.md).
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import logging
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.utils.request import RequestFingerprinter

from crawlhive.crawler.requests import child_request, link_children, url_fingerprint
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import is_cluster
from crawlhive.utils.backends.redis_types import RedisClient
from crawlhive.utils.backends.scripts import scripts
from crawlhive.utils.rules.budgets import page_budget

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

    from crawlhive.crawler.batching import ScriptBatcher
    from crawlhive.crawler.leases import LeaseContext
    from crawlhive.utils.frontier import FrontierRequest

logger = logging.getLogger(__name__)

#: Bytes of a request fingerprint the dupefilter and page caps store (binary): 96 bits, so two
#: of a billion URLs of one crawl share one with a probability of about 10^-11, in the smallest
#: allocation Redis makes for a string (16 bytes with its header) instead of 48 for 40 hex digits.
STORED_FINGERPRINT_BYTES = 12


def stored_fingerprint(fingerprint: str) -> bytes:
    """The dupefilter field of the hex request *fingerprint* (its first :data:`STORED_FINGERPRINT_BYTES`)."""
    return bytes.fromhex(fingerprint[: 2 * STORED_FINGERPRINT_BYTES])


#: Index in an admit's ARGV (0-based) of its first link's fingerprint (crawler_admit.lua).
LINKS_AT = 10


def _key_index(script_keys: list[Any], known: dict[str, int], domain: str, key: str) -> int:
    """The index into a script's KEYS (1-based) of *domain*'s *key*, appended on first use."""
    if domain not in known:
        script_keys.append(key)
        known[domain] = len(script_keys)
    return known[domain]


class Verdict(enum.Enum):
    """What :meth:`Admission.admit` found about a fetched page's lease."""

    EMIT = 1
    """The lease is ours (renewed): emit the item and queue the admitted links."""
    EMIT_NO_LINKS = 2
    """The crawl is stopped but this lease was taken after the stop (a resubmitted seed, §3.9):
    emit the item, follow no link."""
    CANCELLED = 3
    """The crawl was stopped or expired while the page was in flight: no item, no links; ack."""
    LOST = 0
    """The lease is gone (reclaimed after expiry): no item, no links, no ack (another crawler has
    the request now)."""


class Admission:
    """Admits fetched pages and their links for one crawler process.

    Args:
        crawler: the Scrapy crawler (its request fingerprinter).
        redis: a bytes client (for :meth:`admit`, the blocking form).
        batcher: the hot path's batcher on an asyncio client (for :meth:`admit_async`).
        keys: the cluster's key formats.
        lease_s: LEASE_TIMEOUT (an admitted page's lease is renewed for this long).
        filter_ttl_s: DUPEFILTER_TIMEOUT.
        global_cap: GLOBAL_PAGE_PER_DOMAIN_LIMIT (None: no cluster-wide cap).
        bloom_after: DUPEFILTER_BLOOM_ABOVE (0: a crawl's seen-set stays in its dupefilters),
            cluster-wide: each shard's dupefilter takes its share.
        compact: FRONTIER_TAIL_URL is set: the Bloom filters' fingerprints are logged, and the
            redis-monitors compact them (utils/frontier/bloom_compactor.py).
    """

    def __init__(
        self,
        crawler: Crawler,
        redis: RedisClient,
        batcher: ScriptBatcher,
        keys: Keys,
        lease_s: float,
        filter_ttl_s: float,
        global_cap: int | None,
        default_budget: int | None = None,
        record_ttl_s: float = 7 * 86400,
        bloom_after: int = 0,
        compact: bool = False,
    ) -> None:
        self.crawler = crawler
        self.scripts = scripts(redis)
        self.batcher = batcher
        self.keys = keys
        self.lease_us = int(lease_s * 1_000_000)
        self.filter_ttl_ms = max(1, int(filter_ttl_s * 1000))
        self.global_cap = global_cap
        self.default_budget = default_budget
        self.record_ttl_s = int(record_ttl_s)
        #: TTL of a page's records of the links it added to a Bloom filter (CRAWL_RECORD_TTL: as
        #: long as its retry may wait in the queue; its ack deletes them before).
        self.record_ttl_ms = max(1, int(record_ttl_s * 1000))
        #: The entries of each shard's dupefilter before its Bloom filter (the shard's share).
        self.bloom_after = -(-max(0, bloom_after) // keys.shards)
        self.compact = compact and self.bloom_after > 0
        self.cluster = is_cluster(redis)
        self._reported_stopped: set[tuple[str, str]] = set()

    @property
    def default_fingerprints(self) -> bool:
        """The crawler fingerprints requests with Scrapy's own default fingerprinter (what
        :func:`~crawlhive.crawler.requests.url_fingerprint` reproduces)."""
        return type(self.crawler.request_fingerprinter) is RequestFingerprinter

    def budget(self, request: FrontierRequest) -> int:
        """The page budget of *request*'s crawl across all domains (§10.7): the smaller of its
        ``max_pages`` and CRAWL_MAX_PAGES_DEFAULT; 0 = none."""
        budget = page_budget(request.max_pages, self.default_budget)
        return budget.value if budget is not None else 0

    def page_cap(self, request: FrontierRequest) -> int:
        """The page cap of *request*'s crawl in any domain (§3.6); 0 = none."""
        caps = [c for c in (request.domain_max_pages, self.global_cap) if c]
        return min(caps) if caps else 0

    def child(
        self, context: LeaseContext, request: Request, spider: Spider, index: int = 0
    ) -> tuple[FrontierRequest, str]:
        """The frontier request (and fingerprint) of *request*, the *index*-th yielded on *context*'s page.

        A request with ``dont_filter`` gets a fingerprint of its own, derived from the page's and
        its position on the page: the dupefilter never holds it back (and a refetch of the page
        queues it again, as every link of a refetched page), while page caps still count it (§11).
        """
        fingerprint = self.crawler.request_fingerprinter.fingerprint(request).hex()
        if request.dont_filter:
            fingerprint = hashlib.sha1(f"{context.fingerprint}:{index}:{fingerprint}".encode()).hexdigest()
        return child_request(context.request, request, spider), fingerprint

    def link_children(self, context: LeaseContext, urls: list[str]) -> list[tuple[FrontierRequest, str]]:
        r"""The frontier requests (and fingerprints) of the links a built-in spider found on
        *context*'s page (:class:`~crawlhive.crawler.requests.FrontierLinks`): plain ``GET``\ s of
        canonical URLs, fingerprinted as Scrapy's default fingerprinter would (another
        REQUEST_FINGERPRINTER_CLASS is asked through a ``Request``)."""
        parent = context.request
        children = link_children(parent, urls)
        if self.default_fingerprints:
            return list(zip(children, map(url_fingerprint, urls), strict=True))
        fingerprinter = self.crawler.request_fingerprinter
        fingerprints = [fingerprinter.fingerprint(Request(url)).hex() for url in urls]
        return list(zip(children, fingerprints, strict=True))

    def admit(self, context: LeaseContext, children: list[tuple[FrontierRequest, str]]) -> Verdict:
        """Check *context*'s lease and filter its page's links (dedupe, page caps), atomically.

        Sets ``context.children`` to the admitted links. One blocking round trip; the crawler's
        spider middleware uses :meth:`admit_async`.
        """
        if self.cluster:
            wanted = self._wanted(context, children)
            grant = None if wanted is None else int(self.scripts["crawl_budget"](*self._budget_call(context, wanted)))
            calls, unique = self._cluster_calls(context, children, grant)
            replies = [self.scripts["crawler_admit"](keys=k, args=a) for k, a in calls]
            verdict = self._cluster_verdict(context, unique, calls, replies)
            unused = self._unused(grant, replies)
            if unused:
                self.scripts["crawl_budget"](*self._budget_call(context, -unused))
            return verdict
        keys, args, unique = self._call(context, children)
        return self._verdict(context, unique, self.scripts["crawler_admit"](keys=keys, args=args))

    async def admit_async(self, context: LeaseContext, children: list[tuple[FrontierRequest, str]]) -> Verdict:
        """:meth:`admit` without blocking the reactor (batched with other pages' calls)."""
        if self.cluster:
            wanted = self._wanted(context, children)
            grant = None
            if wanted is not None:
                grant = int(await self.batcher.call("crawl_budget", *self._budget_call(context, wanted)))
            calls, unique = self._cluster_calls(context, children, grant)
            futures = [self.batcher.call("crawler_admit", k, a) for k, a in calls]
            # every reply retrieved, so a call failing beside another leaves no unretrieved error
            outcomes = await asyncio.gather(*futures, return_exceptions=True)
            errors = [o for o in outcomes if isinstance(o, BaseException)]
            if errors:
                raise errors[0]
            replies: list[Any] = list(outcomes)
            verdict = self._cluster_verdict(context, unique, calls, replies)
            unused = self._unused(grant, replies)
            if unused:
                await self.batcher.call("crawl_budget", *self._budget_call(context, -unused))
            return verdict
        keys, args, unique = self._call(context, children)
        return self._verdict(context, unique, await self.batcher.call("crawler_admit", keys, args))

    # --- on a Redis Cluster: one call per shard, the budget reserved and given back ---------------

    def _budget_call(self, context: LeaseContext, wanted: int) -> tuple[list[Any], list[Any]]:
        r = context.request
        return [self.keys.crawl(r.spiderid, r.appid, r.crawlid)], [self.budget(r), wanted, self.record_ttl_s]

    def _wanted(self, context: LeaseContext, children: list[tuple[FrontierRequest, str]]) -> int | None:
        """On a cluster, the entries a budgeted crawl's admit reserves first (one per distinct link
        and one for the page, :file:`crawl_budget.lua`); None without a budget."""
        if not self.budget(context.request):
            return None
        return 1 + len({fingerprint for _, fingerprint in children})

    @staticmethod
    def _unused(grant: int | None, replies: list[list[Any]]) -> int:
        """Entries reserved but not written (each reply of a budgeted call ends with its count)."""
        if grant is None:
            return 0
        used = sum(int(reply[-1]) for reply in replies if int(reply[0]) == 1)
        return max(0, grant - used)

    def _cluster_calls(
        self, context: LeaseContext, children: list[tuple[FrontierRequest, str]], grant: int | None
    ) -> tuple[list[tuple[list[Any], list[Any]]], dict[str, FrontierRequest]]:
        """The admit on a Redis Cluster, where one script touches one slot: a call in the page's
        shard (lease check and renewal, the page's entry, its links there) and one per other shard
        its links fall in (their dedupe and caps only), all sent in the same round trip. A shard's
        links may be written before the page's lease turns out lost: harmless, since the page
        named in them may queue them again when it is refetched. With a budget, *grant* entries
        were reserved: the page and then its links in order get them, each call's share its limit.
        """
        r = context.request
        keys = self.keys
        cap = self.page_cap(r)
        page_shard = keys.shard_of(r.domain)
        unique: dict[str, FrontierRequest] = {}
        for child, fingerprint in children:
            unique.setdefault(fingerprint, child)
        by_shard: dict[int, list[tuple[str, FrontierRequest]]] = {page_shard: []}
        for fingerprint, child in unique.items():
            by_shard.setdefault(keys.shard_of(child.domain), []).append((fingerprint, child))
        left = grant if grant is not None else 0
        page_share = 0
        if grant is not None and left > 0:
            page_share, left = 1, left - 1
        calls = []
        page_fp = stored_fingerprint(context.fingerprint) + context.link_owner
        for shard, links in by_shard.items():
            dupefilter = keys.dupefilter(r.spiderid, r.appid, r.crawlid, shard)
            if shard == page_shard:
                script_keys = [
                    keys.leases(r.spiderid, shard),
                    keys.crawl_stopped(r.spiderid, r.appid, r.crawlid, shard),
                    dupefilter,
                ]
            else:
                script_keys = [dupefilter, dupefilter, dupefilter]
            blooms = ""
            if self.bloom_after:  # the Bloom filter the dupefilter continues in
                script_keys.append(keys.dupefilter_bloom(r.spiderid, r.appid, r.crawlid, shard))
                blooms = "3:4:0"
                if self.compact:  # and its shard's compaction flags
                    script_keys.append(keys.bloom_wanted(shard))
                    blooms = "3:4:5"
            cap_keys: dict[str, int] = {}

            def cap_index(
                domain: str, script_keys: list[Any] = script_keys, cap_keys: dict[str, int] = cap_keys
            ) -> int:
                return (
                    _key_index(script_keys, cap_keys, domain, keys.page_caps(r.spiderid, r.appid, r.crawlid, domain))
                    if cap
                    else 0
                )

            share = 0
            if grant is not None:
                share = min(left, len(links)) + (page_share if shard == page_shard else 0)
                left -= min(left, len(links))
            own_cap = cap_index(r.domain) if shard == page_shard else 0
            args: list[Any] = [context.lease.member if shard == page_shard else "", self.lease_us, self.filter_ttl_ms]
            args += [page_fp, own_cap, share if grant is not None else 0, -1 if grant is not None else 0]
            args += [self.bloom_after, blooms, self.record_ttl_ms]
            for fingerprint, child in links:
                args += [stored_fingerprint(fingerprint), 3, cap_index(child.domain), cap]
            calls.append((script_keys, args))
        return calls, unique

    def _cluster_verdict(
        self,
        context: LeaseContext,
        unique: dict[str, FrontierRequest],
        calls: list[tuple[list[Any], list[Any]]],
        replies: list[list[Any]],
    ) -> Verdict:
        """Merge the per-shard replies of :meth:`_cluster_calls` into one admit reply (the page's
        shard's call comes first and gives the verdict)."""
        by_fp: dict[bytes, int] = {}
        for (_, args), reply in zip(calls, replies, strict=True):
            if int(reply[0]) != 1:
                continue
            flags = reply[1 : 1 + (len(args) - LINKS_AT) // 4]
            for i, ok in enumerate(flags):
                by_fp[bytes(args[LINKS_AT + 4 * i])] = int(ok)
        verdict = [int(replies[0][0])]
        verdict += [by_fp.get(stored_fingerprint(fp), 0) for fp in unique]
        return self._verdict(context, unique, verdict)

    def _call(
        self, context: LeaseContext, children: list[tuple[FrontierRequest, str]]
    ) -> tuple[list[str], list[Any], dict[str, FrontierRequest]]:
        """KEYS and ARGV of the admit script for *context*'s page, and its links by fingerprint."""
        r = context.request
        keys = self.keys
        cap = self.page_cap(r)
        cap_keys: dict[str, int] = {}
        shard = keys.shard_of(r.domain)
        script_keys = [
            keys.leases(r.spiderid, shard),
            keys.crawl_stopped(r.spiderid, r.appid, r.crawlid, shard),
            keys.dupefilter(r.spiderid, r.appid, r.crawlid, shard),
        ]
        filters = {shard: 3}  # shard -> index into KEYS of the crawl's dupefilter there
        budget = self.budget(r)
        if budget and keys.shards > 1:  # the budget counts every shard's dupefilter
            for other in range(keys.shards):
                if other != shard:
                    script_keys.append(keys.dupefilter(r.spiderid, r.appid, r.crawlid, other))
                    filters[other] = len(script_keys)
        counted = len(script_keys) - 2
        blooms: list[str] = []  # "dupefilter index:its Bloom filter's index" (ARGV 9)

        def bloom_index(filter_shard: int) -> None:
            if self.bloom_after:
                script_keys.append(keys.dupefilter_bloom(r.spiderid, r.appid, r.crawlid, filter_shard))
                at = len(script_keys)
                if self.compact:
                    script_keys.append(keys.bloom_wanted(filter_shard))
                blooms.append(f"{filters[filter_shard]}:{at}:{len(script_keys) if self.compact else 0}")

        for filter_shard in list(filters):
            bloom_index(filter_shard)

        def filter_index(domain: str) -> int:
            link_shard = keys.shard_of(domain)
            if link_shard not in filters:
                script_keys.append(keys.dupefilter(r.spiderid, r.appid, r.crawlid, link_shard))
                filters[link_shard] = len(script_keys)
                bloom_index(link_shard)
            return filters[link_shard]

        def cap_index(domain: str) -> int:
            return (
                _key_index(script_keys, cap_keys, domain, keys.page_caps(r.spiderid, r.appid, r.crawlid, domain))
                if cap
                else 0
            )

        args: list[Any] = [context.lease.member, self.lease_us, self.filter_ttl_ms]
        args += [stored_fingerprint(context.fingerprint) + context.link_owner, cap_index(r.domain), budget, counted]
        args += [self.bloom_after, "", self.record_ttl_ms]
        unique: dict[str, FrontierRequest] = {}
        for child, fingerprint in children:
            unique.setdefault(fingerprint, child)
        for fingerprint, child in unique.items():
            args += [stored_fingerprint(fingerprint), filter_index(child.domain), cap_index(child.domain), cap]
        args[LINKS_AT - 2] = ",".join(blooms)
        return script_keys, args, unique

    def _verdict(self, context: LeaseContext, unique: dict[str, FrontierRequest], reply: list[Any]) -> Verdict:
        """The verdict of an admit *reply*; sets ``context.children`` to the admitted links, and adds
        to ``context.bloom_records`` the page's records of the links a Bloom filter took (flag 2),
        which its ack deletes."""
        r = context.request
        verdict = Verdict(int(reply[0]))
        if verdict is Verdict.EMIT:
            context.children = [c for c, ok in zip(unique.values(), reply[1:], strict=True) if int(ok)]
            page = stored_fingerprint(context.fingerprint) + context.link_owner
            for c, ok in zip(unique.values(), reply[1:], strict=True):
                if int(ok) == 2:  # in the page's record of a Bloom filter: its ack deletes it
                    shard = self.keys.shard_of(c.domain)
                    if shard not in context.bloom_records:
                        context.bloom_records[shard] = self.keys.dupefilter_bloom_page(
                            r.spiderid, r.appid, r.crawlid, page, shard
                        )
        elif verdict is not Verdict.LOST:
            crawl = (r.appid, r.crawlid)
            if crawl not in self._reported_stopped:  # log once per crawl
                self._reported_stopped.add(crawl)
                logger.info("crawl %s/%s is stopped; dropping its in-flight work", r.appid, r.crawlid)
        return verdict
