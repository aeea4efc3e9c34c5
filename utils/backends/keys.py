"""Every Redis key crawlhive uses: its format, its Redis type, what it holds, and its parser.

Call sites never build a key by hand: they hold a :class:`Keys` (built once from the setting
``REDIS_KEY_PREFIX``) and call the method for the key they need. ``docs/redis-keys.md`` is generated
from this module (``python -m crawlhive.utils.backends.keys_doc``) and a test checks that it is current.
The parts the keys are built from (escaping, lanes, shard heads, crawl members, throttle keys) are
:mod:`crawlhive.utils.backends.key_parts`'s.

Key parts are joined with ``:``. Client-chosen ids (spiderid, appid, crawlid) may contain any
character, so they are escaped (:func:`escape`: ``%`` and ``:`` percent-encoded) and parsers unescape
them. A part that may itself contain ``:`` unescaped (a domain such as the IPv6 literal ``::1``, a
throttle key) always comes last, so parsers split from the left with a bounded count.
"""

from __future__ import annotations

from crawlhive.utils.backends.key_parts import RENDER_LANE, KeySpace, escape, key, lane, unescape
from crawlhive.utils.config.errors import KeyFormatError

#: Segment ids per :meth:`Keys.tail_segments` key (at most Redis's ``zset-max-listpack-entries``,
#: 128 by default, so each key stays a listpack); ``lib/tails.lua`` has the same number.
SEGMENTS_PER_BUCKET = 128


class Keys(KeySpace):
    """The key formats of one crawlhive cluster, all under ``<prefix>:``.

    **Shards** (docs/contract.md §18.2). With *shards* > 1 the frontier is divided into that many
    virtual shards by a hash of the queue's domain (:meth:`shard_of`), and every key carries a
    Redis Cluster hash tag right after the prefix: ``<prefix>:{<prefix>.<shard>}:`` for the keys
    of one shard, ``<prefix>:{<prefix>}:`` for the cluster-wide ones (crawl records, control
    stream, stats…). Every script then touches keys of one slot. The tag comes before any part a
    client chose (an appid may contain ``{``), so no client can move a key to another slot. With
    one shard (a single Redis) no key has a tag: the layout is the one releases before 2.1 wrote.
    A key method that takes a ``shard`` belongs to one shard; one that takes a domain derives it.
    """

    # --- frontier (layout: utils/frontier.py) ----------------------------------------------------

    @key("zset")
    def crawl_queue(self, spider: str, appid: str, crawlid: str, domain: str, render: bool = False) -> str:
        """Pending requests of one crawl in one domain: member = ``FrontierRequest.member`` (URL,
        depth, option set id; JSON when it has more), score = -priority
        (higher first) plus an arrival sequence (FIFO among equals), see ``utils/frontier/model.py``.
        Lane keys (this one, ``dq``, ``domains``, ``crawl-domains``, ``wake``) have a ``-render`` twin
        (``cq-render`` …) holding the requests of crawls with ``render: true``, which only rendering
        crawlers pop (§15)."""
        head = self._heads[self.shard_of(domain)]
        return f"{head}{lane('cq', render)}:{escape(spider)}:{escape(appid)}:{escape(crawlid)}:{domain}"

    def parse_crawl_queue(self, key_: str) -> tuple[str, str, str, str]:
        """``<prefix>:cq:link:app:c1:example.com`` -> ``("link", "app", "c1", "example.com")``."""
        spider, appid, crawlid, domain = self._parse(key_, "cq", 4)
        return unescape(spider), unescape(appid), unescape(crawlid), domain

    def parse_lane_queue(self, key_: str) -> tuple[str, str, str, str, bool]:
        """A :meth:`crawl_queue` key of either lane -> ``(spider, appid, crawlid, domain, render)``.

        Raises:
            KeyFormatError: *key_* is not a crawl queue key of this prefix.
        """
        try:
            spider, appid, crawlid, domain = self._parse(key_, "cq", 4)
            render = False
        except KeyFormatError:
            spider, appid, crawlid, domain = self._parse(key_, lane("cq", True), 4)
            render = True
        return unescape(spider), unescape(appid), unescape(crawlid), domain, render

    @key("zset")
    def tail_queue(self, spider: str, appid: str, crawlid: str, domain: str, render: bool = False) -> str:
        """The tail of :meth:`crawl_queue` (docs/contract.md §23, FRONTIER_TAIL_URL): its requests
        beyond the head, in segments of the tail store. Member = ``<segment id>:<requests>`` (the
        object ``utils/frontier/tails.py segment_path`` names), score = the best (lowest) score in
        the segment; the redis-monitors refill the head from the best segment first. Only a pointer
        per segment is in Redis."""
        head = self._heads[self.shard_of(domain)]
        return f"{head}{lane('tq', render)}:{escape(spider)}:{escape(appid)}:{escape(crawlid)}:{domain}"

    @key("zset")
    def tail_spill_wanted(self, shard: int = 0) -> str:
        """Crawl queues of one shard that a push made long enough to spill part of into their tail:
        member = :meth:`crawl_queue` key, score = from when (epoch s) a redis-monitor should look
        (later after a failed spill, or a small cold queue's; a push or pop brings it forward to
        now). The redis-monitor removes a member once it looked."""
        return f"{self._heads[shard]}tail-spill"

    @key("zset")
    def tail_refill_wanted(self, shard: int = 0) -> str:
        """Crawl queues of one shard whose head a pop found short (under half of FRONTIER_HEAD_SIZE,
        or empty) while their tail holds segments: member = :meth:`crawl_queue` key, score = from
        when (epoch s) a redis-monitor should refill it. Removed once refilled."""
        return f"{self._heads[shard]}tail-refill"

    @key("hash")
    def tail_stats(self, shard: int = 0) -> str:
        """Counters of one shard's tails: ``requests`` and ``segments`` in the store now, ``bytes``
        written and still referenced, lifetime ``spilled`` and ``refilled`` requests, and
        ``waiting``: requests beyond the heads a failed spill left in Redis (0 once the store answers)."""
        return f"{self._heads[shard]}tail-stats"

    @key("pub/sub channel")
    def tail_wake_channel(self) -> str:
        """Published (the shard number) by a pop that asked for a refill, so an idle redis-monitor's
        tail mover refills at once instead of at its next poll."""
        return f"{self.prefix}:tail-wake"

    @key("zset")
    def tail_segments(self, shard: int = 0, *, bucket: int | str) -> str:
        """The segments of one shard that a pointer names, SEGMENTS_PER_BUCKET consecutive ids a key
        (bucket = the id's number // SEGMENTS_PER_BUCKET, so each stays a compact listpack: about 30
        bytes a segment where one zset of them all took 100): member = segment id, score = when it
        was written (epoch s). The redis-monitors' sweep deletes objects of the store older than an
        hour that are not here (left by a kill between a write and its script, or before a delete).
        The scripts get :meth:`tail_segments_base` and add ``:<bucket>`` themselves."""
        return f"{self.tail_segments_base(shard)}:{bucket}"

    def tail_segments_base(self, shard: int = 0) -> str:
        """What :meth:`tail_segments` keys of *shard* start with (before ``:<bucket>``): passed to the
        scripts that add or remove a segment id (``lib/tails.lua segments_key``). It is also the name
        of the one zset of every live segment that releases before the buckets kept: the sweep still
        counts a segment it names as live, and refills and stops remove their ids from it, so a
        cluster upgraded with tails in its store loses none and the old key empties."""
        return f"{self._heads[shard]}tail-segments"

    @staticmethod
    def tail_segment_bucket(segment_id: str) -> int:
        """The :meth:`tail_segments` bucket of *segment_id* (``<number>.<token>``)."""
        number = segment_id.partition(".")[0]
        return int(number) // SEGMENTS_PER_BUCKET if number.isdigit() else 0

    @key("string", ttl="30 s, renewed while it holds")
    def tail_full(self) -> str:
        """Present while some shard has more than FRONTIER_TAIL_BACKLOG_MAX requests waiting in Redis
        for a tail store that cannot be written: holds FRONTIER_TAIL_URL's error. kafka-monitors read
        no new crawl requests meanwhile."""
        return f"{self._global}tail-full"

    @key("zset")
    def domain_crawls(self, spider: str, domain: str, render: bool = False) -> str:
        """Crawls with pending requests in one domain: member = :meth:`crawl_member`, score = the
        best (lowest) score queued in that crawl's queue there, so a domain serves its best crawl."""
        return f"{self._heads[self.shard_of(domain)]}{lane('dq', render)}:{escape(spider)}:{domain}"

    def parse_domain_crawls(self, key_: str) -> tuple[str, str]:
        spider, domain = self._parse(key_, "dq", 2)
        return unescape(spider), domain

    @key("zset")
    def domains(self, spider: str, render: bool = False, shard: int = 0) -> str:
        """Domains with pending requests for one spider type: member = domain, score = Redis time (s)
        from which the domain may be fetched again (0 = now). New domains are added here, so the
        scheduler never scans with ``KEYS``. With ``QUEUE_MODERATED`` a domain whose last request
        was leased stays until its next fetch may start (a link queued meanwhile waits for it)."""
        return f"{self._heads[shard]}{lane('domains', render)}:{escape(spider)}"

    @key("set", ttl="CRAWL_RECORD_TTL")
    def crawl_domains(self, spider: str, appid: str, crawlid: str, render: bool = False, shard: int = 0) -> str:
        """Domains of one shard in which one crawl has pending requests (what ``info`` and ``stop`` walk)."""
        head = self._heads[shard]
        return f"{head}{lane('crawl-domains', render)}:{escape(spider)}:{escape(appid)}:{escape(crawlid)}"

    @key("set", ttl="CRAWL_RECORD_TTL")
    def app_crawls(self, spider: str, appid: str) -> str:
        """Crawl ids of one appid with pending or in-flight requests (``info`` by appid)."""
        return f"{self._global}app-crawls:{escape(spider)}:{escape(appid)}"

    @key("hash", ttl="CRAWL_RECORD_TTL after the last change")
    def app_scheduled(self, appid: str) -> str:
        """Pages on the recrawl schedules of one appid's crawls, counted cluster-wide (§19.1,
        APPID_MAX_SCHEDULED_PAGES): field :meth:`crawl_ref` -> that crawl's pages, ``*`` -> their
        sum. A crawler adds a page as it joins a schedule (``recrawl_join.lua``, refused past a
        limit); the redis-monitor writes the true counts every few seconds and drops a stopped
        crawl's field."""
        return f"{self._global}app-scheduled:{escape(appid)}"

    @key("hash", ttl="CRAWL_RECORD_TTL after the last activity")
    def crawl(self, spider: str, appid: str, crawlid: str) -> str:
        """The crawl record: ``appid``, ``crawlid``, ``spiderid``, ``expires`` (epoch s, armed timer),
        counters ``inflight``, ``crawled``, ``failed``, ``last_activity``, ``started`` and, once it
        ended, ``ended`` (epoch s) and ``ended_as`` (``complete``, ``stopped`` or ``expired``);
        ``schedule_stopped``: the limit that last kept a fetched page off its recrawl schedule
        (``max_pages``, RECRAWL_MAX_PAGES_DEFAULT or APPID_MAX_SCHEDULED_PAGES); and
        ``o:<id>``: the crawl's option sets (JSON, ``utils/frontier/model.py OptionSet``) that its
        queued members name by id."""
        return f"{self._global}crawl:{escape(spider)}:{escape(appid)}:{escape(crawlid)}"

    @key("hash", ttl="CRAWL_RECORD_TTL after the last page counted")
    def crawl_fetch(self, spider: str, appid: str, crawlid: str) -> str:
        """How a crawl's pages were fetched (docs/contract.md §25.7): per rung (``plain``,
        ``impersonate``, ``render``) the pages it fetched, and ``climbs``, the climbs of its
        ``auto`` ladder; the crawlers add to it with their stats, ``info`` and ``GET /crawls`` read it."""
        return f"{self._global}crawl-fetch:{escape(spider)}:{escape(appid)}:{escape(crawlid)}"

    @key("hash", ttl="CRAWL_RECORD_TTL after the last activity")
    def crawl_shard(self, spider: str, appid: str, crawlid: str, shard: int = 0) -> str:
        """One shard's part of a crawl record: its counters ``inflight``, ``crawled``, ``failed`` and
        option sets ``o:<id>`` (what the shard's scripts update and read). With one shard it is
        :meth:`crawl` itself."""
        if self.shards == 1:
            return self.crawl(spider, appid, crawlid)
        return f"{self._heads[shard]}crawl:{escape(spider)}:{escape(appid)}:{escape(crawlid)}"

    @key("set")
    def active_crawls(self) -> str:
        """Every crawl with pending or in-flight work: member = :meth:`crawl_ref`. The redis-monitor
        emits ``complete`` for a member once it has neither, and removes it."""
        return f"{self._global}active-crawls"

    @key("zset", ttl="CRAWL_RECORD_TTL after the last crawl ended; older entries are trimmed")
    def finished_crawls(self) -> str:
        """Crawls that ended (complete, stopped or expired) within CRAWL_RECORD_TTL: member =
        :meth:`crawl_ref`, score = end time (epoch s); what ``GET /crawls`` lists after the active ones."""
        return f"{self._global}finished-crawls"

    @key("zset")
    def expiries(self) -> str:
        """Armed expiry timers: member = :meth:`crawl_ref`, score = ``expires`` (epoch s)."""
        return f"{self._global}expiries"

    @key("pub/sub channel")
    def wake_channel(self, spider: str, render: bool = False) -> str:
        """Published after new requests are queued for a spider type, so idle crawlers wake at once
        instead of polling."""
        return f"{self.prefix}:{lane('wake', render)}:{escape(spider)}"

    @key("set", ttl="CRAWL_RECORD_TTL")
    def crawl_leases(self, spider: str, appid: str, crawlid: str, shard: int = 0) -> str:
        """Leased (in-flight) requests of one crawl, the members of :meth:`leases` that ``stop``
        cancels."""
        return f"{self._heads[shard]}crawl-leases:{escape(spider)}:{escape(appid)}:{escape(crawlid)}"

    @key("string", ttl="CRAWL_RECORD_TTL")
    def crawl_stopped(self, spider: str, appid: str, crawlid: str, shard: int = 0) -> str:
        """Present while a crawl is blacklisted by ``stop`` or expiry: its in-flight fetches are
        dropped when they finish and a resubmitted seed's links are not followed."""
        return f"{self._heads[shard]}stopped:{escape(spider)}:{escape(appid)}:{escape(crawlid)}"

    @key("hash")
    def domain_config(self, shard: int = 0) -> str:
        """Throttle overrides set by ``domain-update``: field = domain, value = JSON
        ``{"hits", "window", "scale"}``; the effective limit is ``floor(hits * scale)`` per window."""
        return f"{self._heads[shard]}domain-config"

    @key("set")
    def domain_blacklist(self, shard: int = 0) -> str:
        """Domains that ``blacklist-update`` stopped fetching from (their requests stay queued)."""
        return f"{self._heads[shard]}domain-blacklist"

    def throttle_prefix(self, spider: str | None = None, egress_id: str | None = None, shard: int = 0) -> str:
        """``throttle_prefix(spider, egress, shard_of(domain)) + domain ==
        throttle(throttle_key(domain, spider, egress))``, for scripts that pick the domain inside Redis."""
        return f"{self._heads[shard]}throttle:{self.throttle_key('-', spider, egress_id)[:-1]}"

    # --- proxies and the adaptive throttle (docs/contract.md §21) ------------------------------

    @key("zset", ttl="PROXY_STATE_TTL_S (a day) after the last use")
    def proxy_lru(self, pool: str, domain: str, site: str | None = None) -> str:
        """When each proxy of a pool last served a domain (or *site*, a tenant of the shared suffix
        that is bucket *domain*: ``<scope>`` is the site then, else the domain): member = proxy
        ``host:port``, score = Redis time (s); the choice takes the least recently used proxy that
        is not resting. In the domain's shard."""
        return f"{self._heads[self.shard_of(domain)]}proxy-lru:{pool}:{site or domain}"

    @key("hash", ttl="PROXY_STATE_TTL_S (a day) after the last use")
    def proxy_health(self, pool: str, domain: str, site: str | None = None) -> str:
        """The health of a pool's proxies for a domain (or *site*, a tenant of the shared suffix that
        is bucket *domain*, alone: ``<scope>``), from bans every crawl shares (statuses, failures to
        reach the proxy): ``f:<host:port>`` bans in a row, ``n:<host:port>`` rests so far (each
        doubles PROXY_COOLDOWN), ``r:<host:port>`` Redis time (us) until which the proxy rests. In
        the domain's shard."""
        return f"{self._heads[self.shard_of(domain)]}proxy-health:{pool}:{site or domain}"

    @key("hash", ttl="PROXY_STATE_TTL_S (a day) after the last use")
    def proxy_crawl_health(
        self, spider: str, appid: str, crawlid: str, pool: str, domain: str, site: str | None = None
    ) -> str:
        """The health of a pool's proxies for one crawl in a domain (or *site*: ``<scope>``), from
        the bans only that crawl's ``ban_regex`` saw: fields as :meth:`proxy_health`; they rest a
        proxy for that crawl alone. In the domain's shard."""
        head = self._heads[self.shard_of(domain)]
        return f"{head}proxy-crawl-health:{escape(spider)}:{escape(appid)}:{escape(crawlid)}:{pool}:{site or domain}"

    @key("hash", ttl="SESSION_TTL from its start")
    def proxy_session(self, spider: str, appid: str, crawlid: str, domain: str, site: str | None = None) -> str:
        """A sticky session of one crawl in one domain (or *site*, a tenant of the shared suffix
        that is bucket *domain*: ``<scope>``; ``"sticky": "domain"``): ``proxy`` (``host:port``),
        ``pool``, ``count`` (requests served), ``cookies`` (JSON ``{"<domain> <path> <name>":
        [value, domain, host only, path, secure, expires, port]}``, the session's cookie jar, sent
        with cookie-jar rules: ``crawler/cookies.py``). In the domain's shard."""
        head = self._heads[self.shard_of(domain)]
        return f"{head}proxy-session:{escape(spider)}:{escape(appid)}:{escape(crawlid)}:{site or domain}"

    @key("zset")
    def proxy_rests(self, shard: int = 0) -> str:
        """Rests in force in one shard, from bans every crawl shares: member =
        ``<pool>|<host:port>|<scope>`` (the domain, or the tenant site of a shared suffix), score =
        Redis time (s) when the rest ends; older members are trimmed by the writes and ignored by
        readers."""
        return f"{self._heads[shard]}proxy-rests"

    @key("zset")
    def proxy_waiting(self, shard: int = 0) -> str:
        """Domains (or tenant sites of a shared suffix) of one shard whose every proxy rests for
        every crawl (their requests wait): member = ``<pool>|<scope>``, score = Redis time (s) when
        the first proxy is back."""
        return f"{self._heads[shard]}proxy-waiting"

    @key("zset")
    def proxy_sessions(self, shard: int = 0) -> str:
        """Sticky sessions of one shard: member = ``<pool>|<host:port>|<proxy_session key>``, score =
        Redis time (s) when it ends (a session dropped after a ban is removed)."""
        return f"{self._heads[shard]}proxy-sessions"

    @key("hash")
    def proxy_stats(self) -> str:
        """Requests through proxies by outcome: field = ``<pool>|<host:port>|<outcome>`` (``ok``,
        ``ban``, ``error``), value = count since the cluster started (``stats proxies``, /metrics)."""
        return f"{self._global}proxy-stats"

    @key("hash")
    def autothrottle(self, shard: int = 0) -> str:
        """Domains of one shard the adaptive throttle slowed down: field = domain (or the tenant site
        of a shared suffix, slowed alone: the site gate spaces its fetches), value =
        ``"<factor> <since us> <step>"``: the fraction of the configured rate in force at Redis time
        *since*, regained by *step* per throttle window after it (``utils/backends/lua/lib/throttle.lua``).
        Must be ``domain_config`` with ``autothrottle`` for ``domain-config`` (the Lua derives it)."""
        return f"{self._heads[shard]}autothrottle"

    @key("string", ttl="CLEANER_DEDUPE_TTL")
    def cleaned_content(self, appid: str, crawlid: str, content_hash: str) -> str:
        """A ``content_hash`` a cleaner emitted for a crawl; holds the origin (topic, partition,
        offset) of the record that emitted it, so a redelivered record is not its own duplicate."""
        return f"{self._global}cleaned:{escape(appid)}:{escape(crawlid)}:{content_hash}"

    @key("hash", ttl="2 x NEAR_DUPLICATE_TTL from its window's start")
    def near_duplicates(self, appid: str, window: int) -> str:
        """The near-duplicate index of one appid (docs/contract.md §26.1) for records cleaned in
        window *window* (epoch s // NEAR_DUPLICATE_TTL): field ``b<band>:<hex digits>`` -> the
        SimHashes (8 bytes each, the 64 latest) of records whose SimHash has those digits in that
        band (NEAR_DUPLICATE_DISTANCE + 1 bands: two SimHashes within that distance share one band,
        by pigeonhole), and ``u<SimHash>`` (8 bytes) -> ``<crawlid> <url>`` of the first record with
        that SimHash. With shards, an appid's windows share a hash tag of their own (one slot, one script)."""
        tag = f"{{{self.prefix}.nd.{escape(appid)}}}:" if self.shards > 1 else ""
        return f"{self.prefix}:{tag}near-dup:{escape(appid)}:{window}"

    @key("hash", ttl="2 x CLEANER_MAX_POLL_INTERVAL_MS + 60 s")
    def cleaner_emitted(self, group: str) -> str:
        """``<topic>/<partition>`` -> the offset after a batch whose outputs a cleaner of *group*
        produced but whose commit failed: the records before it are not emitted again when the
        broker delivers them again."""
        return f"{self._global}cleaner:emitted:{escape(group)}"

    @key("hash", ttl="2 x HEARTBEAT_TIMEOUT (refreshed by every sink's heartbeat)")
    def sink_state(self) -> str:
        """Sink node id -> JSON ``{"sink", "kind", "topic", "group", "lag", "at"}``: what each sink
        process last said of itself (``stats: sink``, ``/metrics``, the dashboard; §20.7)."""
        return f"{self._global}sinks"

    @key("string", ttl="CRAWL_DELAY_TTL_S (a day; refreshed whenever a crawler reads the robots.txt)")
    def crawl_delay(self, domain: str) -> str:
        """Seconds a domain's robots.txt asks between two fetches (``Crawl-delay`` for our user
        agent, capped at ROBOTSTXT_MAX_CRAWL_DELAY): the pop script never fetches it faster (§14)."""
        return f"{self._heads[self.shard_of(domain)]}crawl-delay:{domain}"

    @key("string", ttl="FETCH_LADDER_TTL")
    def fetch_rung(self, domain: str, site: str | None = None) -> str:
        """The fetch rung (``impersonate``) that got an ``auto`` page of *domain* (or of *site*, a
        tenant of the shared suffix that is bucket *domain*) past a wall: its next pages start
        there (docs/contract.md §25). In *domain*'s shard."""
        return f"{self._heads[self.shard_of(domain)]}fetch-rung:{site or domain}"

    @key("string", ttl="the wait it holds (PX)")
    def site_wait(self, domain: str, site: str) -> str:
        """Present while no crawler may fetch from *site*, a tenant of the shared suffix that is
        bucket *domain* (``mallory.github.io`` in ``github.io``): its own ``Retry-After``, or the
        spacing of its own ``Crawl-delay`` (:class:`~crawlhive.crawler.middlewares.pacing.SiteGateMiddleware`).
        In *domain*'s shard."""
        return f"{self._heads[self.shard_of(domain)]}site-wait:{site}"

    @key("string", ttl="CRAWL_DELAY_TTL_S (a day; refreshed whenever a crawler reads the robots.txt)")
    def site_delay(self, domain: str, site: str) -> str:
        """Seconds the robots.txt of *site*, a tenant of the shared suffix that is bucket *domain*,
        asks between two fetches: applied to that site alone, not to its siblings. In *domain*'s shard."""
        return f"{self._heads[self.shard_of(domain)]}site-delay:{site}"

    def crawl_delay_prefix(self, shard: int = 0) -> str:
        """``crawl_delay_prefix(shard_of(domain)) + domain == crawl_delay(domain)``, for the pop script."""
        return f"{self._heads[shard]}crawl-delay:"

    def script_prefixes(self, spider: str, render: bool = False, shard: int = 0) -> dict[str, str]:
        """Key prefixes a Lua script completes with a :meth:`crawl_member` or a domain (the queue
        keys of the lane *render* selects; the crawl record and its leases are shared by both lanes).

        Scripts that discover a crawl or a domain inside Redis cannot call this module, so they get
        these prefixes; ``tests/unit/test_keys.py`` checks that each prefix + suffix equals the key
        its method builds.
        """
        s = escape(spider)
        head = self._heads[shard]
        return {
            "crawl_queue": f"{head}{lane('cq', render)}:{s}:",  # + crawl member + ":" + domain
            "tail_queue": f"{head}{lane('tq', render)}:{s}:",  # + crawl member + ":" + domain
            "domain_crawls": f"{head}{lane('dq', render)}:{s}:",  # + domain
            "crawl_domains": f"{head}{lane('crawl-domains', render)}:{s}:",  # + crawl member
            "crawl": f"{head}crawl:{s}:",  # + crawl member: the shard's part of the record
            "crawl_leases": f"{head}crawl-leases:{s}:",  # + crawl member
        }

    def crawl_ref_prefixes(self, shard: int = 0) -> dict[str, str]:
        """Key prefixes a Lua script completes with a :meth:`crawl_ref` (``<spider>:<appid>:<crawlid>``,
        escaped), for scripts that walk crawls of every spider type (e.g. :meth:`active_crawls`).

        ``app_crawls`` is completed with ``<spider>:<appid>`` (the ref without its last part) and
        holds the crawl id unescaped. ``tests/unit/test_keys.py`` checks each against its method.
        """
        head = self._heads[shard]
        return {
            "crawl_domains": f"{head}crawl-domains:",  # + crawl ref
            "render_crawl_domains": f"{head}{lane('crawl-domains', True)}:",  # + crawl ref
            "crawl_leases": f"{head}crawl-leases:",  # + crawl ref
            "crawl_shard": f"{head}crawl:" if self.shards > 1 else f"{self._global}crawl:",  # + crawl ref
            "crawl": f"{self._global}crawl:",  # + crawl ref
            "app_crawls": f"{self._global}app-crawls:",  # + escaped spider + ":" + escaped appid
        }

    @key("string (integer)")
    def queue_sequence(self, shard: int = 0) -> str:
        """Arrival counter of a shard: every push takes the next value, so equal priorities pop in order."""
        return f"{self._heads[shard]}queue-seq"

    @key("string (integer)")
    def frontier_shards(self) -> str:
        """The frontier's shard count (FRONTIER_SHARDS), written by the first component to start;
        a component configured with another count refuses to start (docs/contract.md §18.2)."""
        return f"{self.prefix}:frontier-shards"  # the same name whatever the count: it is what is checked

    @key("string", ttl="1 minute")
    def replication_mark(self, shard: int | None = None) -> str:
        """Written just before a ``WAIT`` for REDIS_WAIT_REPLICAS on the node of *shard* (None: of
        the cluster-wide keys): replication is ordered, so once replicas have this write they have
        every earlier write to that node, whichever connection made it (utils/backends/replication.py)."""
        return f"{self._global if shard is None else self._heads[shard]}replication-mark"

    @key("string", ttl="1 day")
    def seed_origin(self, origin: str, shard: int = 0) -> str:
        """Marker that the crawl request of Kafka record ``<topic>/<partition>/<offset>@<timestamp>``
        was queued, written in the same ``MULTI`` as the seed: a record redelivered after its seed
        was already crawled (a kafka-monitor killed between its Redis write and its offset commit)
        queues nothing again, so the seed's subtree is not crawled twice."""
        return f"{self._heads[shard]}seed-origin:{origin}"

    # --- continuous crawling (utils/frontier/recrawl.py, docs/contract.md §19) ---------------------

    @key("hash", ttl="none: removed by stop, expiry or when the page leaves")
    def recrawl_state(self, spider: str, appid: str, crawlid: str, bucket: int, shard: int = 0) -> str:
        """Schedule state of the pages of one crawl in one shard whose fingerprint falls in *bucket*
        (RECRAWL_STATE_BUCKETS): field = the page's schedule fingerprint (8 bytes), value = its packed
        state (``utils/frontier/recrawl.py PageState``: next visit, interval, validators, body hash,
        visit and gone counts, whether a visit is on). Small buckets stay listpacks."""
        return f"{self._heads[shard]}rc-state:{self.crawl_ref(spider, appid, crawlid)}:{bucket}"

    @key("zset", ttl="none: removed by stop, expiry or when empty")
    def recrawl_slots(self, spider: str, appid: str, crawlid: str, shard: int = 0) -> str:
        """The time slots of one crawl's schedule in one shard: member = score = slot start (epoch s)."""
        return f"{self._heads[shard]}rc-slots:{self.crawl_ref(spider, appid, crawlid)}"

    @key("list", ttl="none: emptied by the release")
    def recrawl_slot(self, spider: str, appid: str, crawlid: str, start: int, shard: int = 0) -> str:
        """Pages of one crawl due from *start* (epoch s) on, one packed entry each (due time,
        fingerprint, domain, priority, lane, queue member: ``utils/frontier/recrawl.py SlotEntry``).
        Slots are wider the further away they are (a timing wheel); an entry whose page's state no
        longer names its due time is stale and skipped."""
        return f"{self._heads[shard]}rc-slot:{self.crawl_ref(spider, appid, crawlid)}:{start}"

    @key("zset")
    def recrawl_due(self, shard: int = 0) -> str:
        """The due index of a shard: member = :meth:`crawl_ref` of a crawl with scheduled pages
        there, score = its earliest slot start, so the release finds due pages without a scan."""
        return f"{self._heads[shard]}rc-due"

    def recrawl_prefixes(self, shard: int = 0) -> dict[str, str]:
        """Key prefixes the recrawl scripts complete with a :meth:`crawl_ref` (``state`` and
        ``slot`` then ``":" + bucket`` or ``":" + start``); ``tests/unit/test_recrawl_schedule.py`` checks them."""
        head = self._heads[shard]
        return {"state": f"{head}rc-state:", "slots": f"{head}rc-slots:", "slot": f"{head}rc-slot:"}

    # --- crawler: dedupe and page caps (crawler/runtime.py) -------------------------------------

    @key("hash", ttl="DUPEFILTER_TIMEOUT after the crawl's last fetch")
    def dupefilter(self, spider: str, appid: str, crawlid: str, shard: int = 0) -> str:
        """Per-crawl dupefilter (docs/contract.md §3.8), one per frontier shard (a link is in the
        shard of its domain): field = request fingerprint (its first 12
        bytes, binary), value = the first 4 bytes of the fingerprint of the page that first queued
        it, so that page, refetched after a lost lease, queues its links again instead of finding
        them already seen."""
        return f"{self._heads[shard]}dupefilter:{escape(spider)}:{escape(appid)}:{escape(crawlid)}"

    @key("hash", ttl="DUPEFILTER_TIMEOUT after the crawl's last fetch")
    def dupefilter_bloom(self, spider: str, appid: str, crawlid: str, shard: int = 0) -> str:
        """The Bloom filter a crawl's seen-set continues in, in one shard, once its
        :meth:`dupefilter` holds DUPEFILTER_BLOOM_ABOVE entries (utils/frontier/bloom.py): fields
        ``count`` (fingerprints added), ``hits`` (links it answered "seen" for), ``exp`` (log2 of
        its first layer's bytes) and ``layers``; its bits are in :meth:`dupefilter_bloom_layer`."""
        return f"{self._heads[shard]}dupefilter-bloom:{escape(spider)}:{escape(appid)}:{escape(crawlid)}"

    @key("string", ttl="DUPEFILTER_TIMEOUT after the crawl's last fetch")
    def dupefilter_bloom_layer(self, spider: str, appid: str, crawlid: str, layer: int, shard: int = 0) -> str:
        """The bits of layer *layer* (0, 1, ...) of :meth:`dupefilter_bloom`, each layer twice the
        bytes of the one before (a scalable Bloom filter). crawler_admit.lua builds these names
        itself, as ``<dupefilter_bloom>:<layer>`` (one slot: the same hash tag)."""
        return self.bloom_layer_of(self.dupefilter_bloom(spider, appid, crawlid, shard), layer)

    # The parts of a Bloom filter named from its state key (:meth:`dupefilter_bloom`), as the
    # compactor, which finds the filter by that key in :meth:`bloom_wanted`, and the scripts do.
    @staticmethod
    def bloom_layer_of(state: str, layer: int) -> str:
        """:meth:`dupefilter_bloom_layer` of the filter whose state key is *state*."""
        return f"{state}:{layer}"

    @staticmethod
    def bloom_piece_of(state: str, gen: int, piece: int) -> str:
        """:meth:`dupefilter_bloom_piece` of the filter whose state key is *state*."""
        return f"{state}:g{gen}:{piece}"

    @staticmethod
    def bloom_log_of(state: str) -> str:
        """:meth:`dupefilter_bloom_log` of the filter whose state key is *state*."""
        return f"{state}:log"

    @staticmethod
    def bloom_lock_of(state: str) -> str:
        """:meth:`dupefilter_bloom_lock` of the filter whose state key is *state*."""
        return f"{state}:lock"

    @key("string", ttl="DUPEFILTER_TIMEOUT after the crawl's last fetch")
    def dupefilter_bloom_piece(
        self, spider: str, appid: str, crawlid: str, gen: int, piece: int, shard: int = 0
    ) -> str:
        """Piece *piece* (0, 1, ...) of generation *gen* of the compacted base of
        :meth:`dupefilter_bloom` (its fields ``gen`` and ``pieces``: the pieces' bytes), the bits of
        one Bloom filter over all of them (utils/frontier/bloom.py). A redis-monitor writes a new
        generation (10 minutes to live until its swap gives it the filter's expiry) and
        bloom_swap.lua makes it the filter's; lib/bloom.lua builds these names itself, as
        ``<dupefilter_bloom>:g<gen>:<piece>``."""
        return self.bloom_piece_of(self.dupefilter_bloom(spider, appid, crawlid, shard), gen, piece)

    @key("string", ttl="DUPEFILTER_TIMEOUT after the crawl's last fetch")
    def dupefilter_bloom_log(self, spider: str, appid: str, crawlid: str, shard: int = 0) -> str:
        """The fingerprints (12 bytes each, back to back) added to :meth:`dupefilter_bloom` since
        the last seal, while its field ``log`` is ``1``: a redis-monitor seals them into an object
        of FRONTIER_TAIL_URL (bloom_seal.lua drops what it sealed), the log a compaction rebuilds
        the filter from (utils/frontier/bloom_compactor.py). lib/bloom.lua builds this name
        itself, as ``<dupefilter_bloom>:log``."""
        return self.bloom_log_of(self.dupefilter_bloom(spider, appid, crawlid, shard))

    @key("string", ttl="2 minutes, renewed while its holder works")
    def dupefilter_bloom_lock(self, spider: str, appid: str, crawlid: str, shard: int = 0) -> str:
        """The redis-monitor sealing or compacting :meth:`dupefilter_bloom` (value: its token), so
        two do not do the same work; a dead holder's lapses."""
        return self.bloom_lock_of(self.dupefilter_bloom(spider, appid, crawlid, shard))

    @key("zset")
    def bloom_wanted(self, shard: int = 0) -> str:
        """Bloom filters of one shard whose log asks to be sealed or that asks to be compacted:
        member = :meth:`dupefilter_bloom` key, score = from when (epoch s; 0 = now). crawler_admit.lua
        adds one (NX), the redis-monitors' compactor removes it when done."""
        return f"{self._heads[shard]}bloom-wanted"

    @key("set", ttl="CRAWL_RECORD_TTL; deleted when the page's lease ends")
    def dupefilter_bloom_page(self, spider: str, appid: str, crawlid: str, page: bytes | str, shard: int = 0) -> str:
        """The fingerprints (12 bytes, binary) that one page in flight added to :meth:`dupefilter_bloom`
        (its links new to the crawl), *page* being the page's 12 bytes and its owner's 4 as the admit
        gets them (ARGV 4 of crawler_admit.lua, which builds this name itself as
        ``<dupefilter_bloom>:p:<page in hex>``), or their hex: the filter keeps no owner, so this
        record is what lets the page, refetched after its crawler died between its admit and its
        ack, queue those links again (docs/contract.md §3.8). Only pages in flight have one:
        lease_ack.lua deletes it."""
        hexed = page.hex() if isinstance(page, bytes) else page  # (a str: its hex already)
        return f"{self.dupefilter_bloom(spider, appid, crawlid, shard)}:p:{hexed}"

    @key("set", ttl="DUPEFILTER_TIMEOUT after the crawl's last fetch")
    def page_caps(self, spider: str, appid: str, crawlid: str, domain: str) -> str:
        """Fingerprints (as in :meth:`dupefilter`) of the requests admitted for one crawl in one domain while a page cap
        (``domain_max_pages``, GLOBAL_PAGE_PER_DOMAIN_LIMIT) applies; its size is the count capped."""
        head = self._heads[self.shard_of(domain)]
        return f"{head}page-caps:{escape(spider)}:{escape(appid)}:{escape(crawlid)}:{domain}"

    # --- throttle -------------------------------------------------------------------------------

    @key("zset", ttl="window")
    def throttle(self, throttle_key: str) -> str:
        """Fetch starts of one throttle key (domain, plus spider type and egress id when enabled)
        in the current rolling window: member = unique start id, score = Redis server time (s)."""
        return f"{self._heads[self.shard_of(throttle_key.split(':', 2)[-1])]}throttle:{throttle_key}"

    def parse_throttle(self, key_: str) -> str:
        (throttle_key,) = self._parse(key_, "throttle", 1)
        return throttle_key

    # --- leases ---------------------------------------------------------------------------------

    @key("zset")
    def leases(self, spider: str, shard: int = 0) -> str:
        """In-flight requests of one spider type: member = ``<score>:<crawl member>:<length of
        domain>:<domain><queue member>`` (``utils/frontier/model.py lease_member``), score = lease
        deadline (Redis server time, s). Written atomically with the pop that took the request."""
        return f"{self._heads[shard]}leases:{spider}"

    def parse_leases(self, key_: str) -> str:
        """``<prefix>:leases:link`` -> ``"link"``."""
        (spider,) = self._parse(key_, "leases", 1)
        return spider

    # --- control stream (utils/state/control.py) -------------------------------------------------------

    @key("stream")
    def control_stream(self) -> str:
        """Action, stats and domain-config requests waiting for a redis-monitor, and the
        notifications its timers cause (``expire``, ``complete``, ``dead-letter``): fields ``kind``
        and ``request`` (JSON). Read through the consumer group ``redis-monitor``; entries are
        deleted once their answer is acknowledged by Kafka."""
        return f"{self._global}control"

    @key("string", ttl="1 day")
    def control_origin(self, origin: str) -> str:
        """Marker that the Kafka record ``<topic>/<partition>/<offset>`` was appended to the control
        stream, so a redelivered record is not appended twice."""
        return f"{self._global}control-origin:{origin}"

    # --- stats and heartbeats -----------------------------------------------------------------

    @key("zset", ttl="longest STATS_TIMES window + one bucket")
    def stats_window(self, component: str, name: str) -> str:
        """Rolling-window counter ``name`` of ``component`` (e.g. ``kafka-monitor``, ``total``):
        member = ``<window s>:<bucket index>`` (60 buckets per window), score = count in that bucket."""
        return f"{self._global}stats:{component}:{name}"

    def parse_stats_window(self, key_: str) -> tuple[str, str]:
        component, name = self._parse(key_, "stats", 2)
        return component, name

    @key("string (integer)", ttl="none; a per-host (``machine:``) counter's: as stats_window")
    def stats_lifetime(self, component: str, name: str) -> str:
        """Lifetime total of counter ``name`` of ``component``."""
        return f"{self._global}stats-lifetime:{component}:{name}"

    @key("hyperloglog", ttl="longest STATS_TIMES window, renewed on write")
    def stats_unique(self, component: str, name: str) -> str:
        """Lifetime count of distinct values (e.g. crawl ids) seen by counter ``name``."""
        return f"{self._global}stats-unique:{component}:{name}"

    @key("hash")
    def metrics_response_seconds(self, spider: str) -> str:
        """Response-time histogram of spider type ``spider`` for ``/metrics``
        (``crawlhive_response_seconds``, docs/contract.md §22.3): field ``b<i>`` = responses that
        took at most bucket *i*'s bound and more than the one before (utils/state/response_metrics.py),
        ``inf`` = slower than every bound, ``sum`` = their seconds (float), ``count``."""
        return f"{self._global}metrics-response-seconds:{spider}"

    @key("zset")
    def metrics_domains(self) -> str:
        """Responses per domain (member = domain, score = count), the busiest first for
        ``/metrics``'s per-domain counters; trimmed to 20 x METRICS_TOP_DOMAINS domains."""
        return f"{self._global}metrics-domains"

    @key("hash")
    def metrics_domain_failures(self) -> str:
        """Failed responses per domain (field = domain): an HTTP status of 400 or more, or a
        network failure; the successes are ``metrics_domains`` minus these. Trimmed with it."""
        return f"{self._global}metrics-domain-failures"

    @key("set")
    def stats_index(self) -> str:
        """Every ``component:name`` that has stats keys, so readers never need ``KEYS``."""
        return f"{self._global}stats-index"

    @key("string (JSON)", ttl="HEARTBEAT_TIMEOUT")
    def heartbeat(self, component: str, node_id: str) -> str:
        """One live process: ``{"host", "pid", "node_id", "component", "started"}``, renewed every
        HEARTBEAT_INTERVAL; gone when the process stops or dies."""
        return f"{self._global}heartbeat:{component}:{node_id}"

    def parse_heartbeat(self, key_: str) -> tuple[str, str]:
        component, node_id = self._parse(key_, "heartbeat", 2)
        return component, node_id

    @key("zset")
    def heartbeat_index(self, component: str) -> str:
        """Node ids of ``component`` that have sent a heartbeat: score = when it expires (Redis
        time, s); entries past their score are pruned by readers."""
        return f"{self._global}nodes:{component}"

    # --- REST answers (rest/answers.py) ----------------------------------------------------------

    @key("string (JSON)", ttl="POLL_RESULT_TTL")
    def poll_result(self, uuid: str) -> str:
        """An outbound message with a ``uuid`` that no ``POST /feed`` delivered, kept for
        ``POST /poll`` (any REST instance; read and deleted in one ``GETDEL``)."""
        return f"{self._global}poll:{escape(uuid)}"

    @key("string", ttl="POLL_RESULT_TTL")
    def poll_origin(self, origin: str) -> str:
        """Marker that the outbound record ``<topic>/<partition>/<offset>`` was stored for ``/poll``:
        every REST instance consumes every answer, and only the first stores it, so a polled
        answer is not stored again by a slower instance."""
        return f"{self._global}poll-origin:{origin}"

    @key("string", ttl="WAIT_FOR_RESPONSE_TIME + KAFKA_FEED_TIMEOUT + a margin")
    def poll_waiter(self, uuid: str) -> str:
        """Present while some REST instance's ``POST /feed`` waits for the answer to ``uuid``: the
        other instances then do not store that answer for ``/poll``; the waiting one stores it
        itself if its wait ends first."""
        return f"{self._global}poll-waiter:{escape(uuid)}"


class SpiderLists:
    """Redis-only mode's lists (docs/contract.md §12), named as scrapy-redis names them: from the
    settings REDIS_START_URLS_KEY (``%(name)s``: the spider's name) and REDIS_ITEMS_KEY
    (``%(spider)s``), not under REDIS_KEY_PREFIX, so a developer's scrapy-redis tooling finds them.

    Raises:
        KeyFormatError: a format has a ``%`` placeholder other than its own (names the setting).
    """

    def __init__(self, start_urls_format: str, items_format: str) -> None:
        self.start_urls_format = start_urls_format
        self.items_format = items_format
        for setting, fmt, field in (
            ("REDIS_START_URLS_KEY", start_urls_format, "name"),
            ("REDIS_ITEMS_KEY", items_format, "spider"),
        ):
            try:
                fmt % {field: "x"}
            except (KeyError, ValueError, TypeError) as exc:
                raise KeyFormatError(f"{setting}: {fmt!r} is not a key format with %({field})s: {exc!r}") from exc

    def start_urls(self, spider: str) -> str:
        """List of seeds (a URL or a JSON crawl request per entry), popped by the crawler."""
        return self.start_urls_format % {"name": spider}

    @staticmethod
    def start_urls_lock(start_urls: str) -> str:
        """On a Redis Cluster, held (``SET NX PX``) by the crawler moving entries of the list
        *start_urls* (a :meth:`start_urls` key) to the frontier."""
        return f"{start_urls}:lock"

    def items(self, spider: str) -> str:
        """List of items (page items and the spider's own, JSON), pushed by the crawler."""
        return self.items_format % {"spider": spider}

    @staticmethod
    def dead_letter(spider: str) -> str:
        """List of dead letters (docs/contract.md §6, JSON), invalid seeds included."""
        return f"{spider}:dead_letter"


__all__ = ["RENDER_LANE", "Keys", "SpiderLists", "escape", "lane", "unescape"]
