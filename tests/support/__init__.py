"""What the tests share: real sites, real clusters, real processes (none of it is a mock).

``tests`` is on ``sys.path`` (pyproject.toml's ``[tool.pytest.ini_options] pythonpath``), so a test
imports ``from support.crawler import TestSite``. One module a subject:

* :mod:`support.crawler`: crawler processes, settings and environments, test sites, topic collectors;
* :mod:`support.cluster_crawl`: a whole stack (monitors, crawlers) on many loopback hosts;
* :mod:`support.redis_cluster`: a local Redis Cluster (3 primaries, 3 replicas);
* :mod:`support.chaos`: processes killed and restarted, a Redis with AOF, the leftovers audit;
* :mod:`support.proxies`: loopback proxies and a TLS site;
* :mod:`support.rest`: a running REST service and a stand-in redis-monitor's answers;
* :mod:`support.sinks`: sink processes, PostgreSQL tables and what they hold;
* :mod:`support.corpus`: the extraction corpus and its token F1;
* :mod:`support.docker`: the Docker engine, images and compose deployment of the container tier.
"""
