"""The crawler's downloader and spider middlewares: behaviour every spider shares.

One module per role; ``crawler/settings.py`` names each class by its path in this package.
Downloader middlewares (outermost first):

* :mod:`~crawlhive.crawler.middlewares.outcomes`, how a download ended:

  * :class:`~.outcomes.LeaseOutcomeMiddleware` (order 50, so its ``process_exception`` runs after
    Scrapy's ``RetryMiddleware`` gave up): a request that finally failed ends its lease, as a crawl
    dead letter for a network error or as a policy drop for ``IgnoreRequest`` (robots.txt, …);
  * :class:`~.outcomes.ResponseStatsMiddleware` (order 950): counts every response by status, and
    every network failure as 504 (docs/contract.md §4.7).

* :mod:`~crawlhive.crawler.middlewares.shaping`: :class:`~.shaping.RequestShapingMiddleware`
  (order 400, before Scrapy's ``UserAgentMiddleware``) applies a crawl's ``useragent`` to each
  request, and its ``headers`` and cookies to those of the seed's origin only (docs/contract.md
  §3.7, §10.6), redirects included.
* :mod:`~crawlhive.crawler.middlewares.pacing`, what a site asks of our pace:

  * :class:`~.pacing.SiteGateMiddleware` (order 450): a request to one tenant site of a shared
    suffix (``mallory.github.io`` in bucket ``github.io``) waits while that site's own
    ``Retry-After`` or ``Crawl-delay`` says so, without parking its siblings;
  * :class:`~.pacing.RetryAfterMiddleware` (order 600, so it sees a response before Scrapy's
    ``RetryMiddleware``): a 429 with ``Retry-After`` backs the domain off cluster-wide (the site
    alone, for a tenant of a shared suffix);
  * :class:`~.pacing.CrawlDelayMiddleware` (order 960): a robots.txt ``Crawl-delay`` becomes a
    cluster-wide limit of its domain (of the site alone, for a tenant of a shared suffix).

* :mod:`~crawlhive.crawler.middlewares.redirects`, redirects and the hosts they name:

  * :class:`~.redirects.FrontierRedirectMiddleware` and
    :class:`~.redirects.FrontierMetaRefreshMiddleware` (600, 580): Scrapy's, in their place, ending
    the lease of a page whose redirects they give up on;
  * :class:`~.redirects.LocationHostGuardMiddleware` (order 610) and
    :class:`~.redirects.PageHostGuardMiddleware` (585): a redirect, ``<base>`` or meta refresh
    naming a host that cannot be a host name is refused before Scrapy IDNA-encodes it.

* elsewhere in the crawler, each beside what it serves: proxies (``crawler/proxy.py``), recrawl
  validators (``crawler/recrawl.py``), the response size limit (``crawler/limits.py``), the
  rendering crawlers' middleware (``crawler/render/middleware.py``) and
  :class:`~crawlhive.crawler.netguard.NetworkGuardMiddleware` (order 990, next to the downloader):
  a request the network guard refused is not retried and fails as ``blocked network: …``.

Spider middleware :class:`~crawlhive.crawler.middlewares.spider.FrontierSpiderMiddleware` (order
950, nearest the spider; :mod:`~crawlhive.crawler.middlewares.spider`) turns the requests a spider
yields into frontier requests of the same crawl, checks the lease and filters the links
(:meth:`CrawlRuntime.admit`), and passes the items on to the item pipelines, which end with
crawlhive's output (:mod:`crawlhive.crawler.pipelines`).

Retries are Scrapy's own ``RetryMiddleware`` (``get_retry_request``); its retry comes back to the
scheduler, which puts it into the frontier for any crawler. Scrapy's cookie jar is disabled
(``COOKIES_ENABLED = False``), so ``Set-Cookie`` is never carried to later requests, as in SC.

Nothing is re-exported here: Scrapy's settings and the code name each class in its module.
"""
