"""The REST API's routes, one router per group (docs/contract.md §7), in the order the
application includes them (and ``/openapi.json`` lists them):

* :mod:`~crawlhive.rest.routes.feed`: Scrapy-Cluster-compatible ``/``, ``/feed`` and ``/poll``;
* :mod:`~crawlhive.rest.routes.crawls`: ``/crawls`` and one crawl's status and stop;
* :mod:`~crawlhive.rest.routes.watch`: ``/metrics``, ``/dashboard`` and its data.

Each route receives the process's service through the :data:`~crawlhive.rest.http.Rest` dependency.
"""
