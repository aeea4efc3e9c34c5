"""Every crawlhive setting, its type and its default, documented once: in this package.

Each setting is a module-level constant of one of the modules below, one module per component; its
annotation is the type that the settings loader (:mod:`crawlhive.utils.config.settings`) parses
environment variables and settings files into, and the docstring under it is the reference for
users. Names carry their unit where they have one, except the names fixed by the wire contract
(docs/contract.md §8.1), which keep Scrapy Cluster's spelling; their docstrings state the unit.

The modules, in the order the loader (and :mod:`crawlhive.utils.config.setting_types`) takes them,
:data:`COMPONENTS`:

1. :mod:`~crawlhive.utils.config.defaults.backends`: Redis, Kafka and the blob store;
2. :mod:`~crawlhive.utils.config.defaults.schemas`: what requests may ask for;
3. :mod:`~crawlhive.utils.config.defaults.monitors`: the kafka-monitor's and redis-monitor's plugins
   and loop;
4. :mod:`~crawlhive.utils.config.defaults.frontier`: the frontier and the cluster-wide throttle;
5. :mod:`~crawlhive.utils.config.defaults.recrawl`: continuous crawling;
6. :mod:`~crawlhive.utils.config.defaults.crawler`: the crawlers (rendering included);
7. :mod:`~crawlhive.utils.config.defaults.proxies`: proxies, sessions and the adaptive throttle;
8. :mod:`~crawlhive.utils.config.defaults.cleaner`: the cleaners;
9. :mod:`~crawlhive.utils.config.defaults.sink`: the sinks;
10. :mod:`~crawlhive.utils.config.defaults.stats`: stats, metrics and heartbeats;
11. :mod:`~crawlhive.utils.config.defaults.rest`: the REST service;
12. :mod:`~crawlhive.utils.config.defaults.local`: logging and local state.

A new setting goes into its component's module (a new component: a module here and one entry of
:data:`COMPONENTS`); a name declared in two modules is refused by ``tests/unit/test_settings.py``.
Every setting is also a name of this package (``defaults.QUEUE_HITS``). Nothing here is ever
written to: the loader copies the values.
"""

# ruff: noqa: F403 - every setting is a name of this package too, whichever module declares it

from types import ModuleType

from crawlhive.utils.config.defaults import (
    backends,
    cleaner,
    crawler,
    frontier,
    local,
    monitors,
    proxies,
    recrawl,
    rest,
    schemas,
    sink,
    stats,
)
from crawlhive.utils.config.defaults.backends import *
from crawlhive.utils.config.defaults.cleaner import *
from crawlhive.utils.config.defaults.crawler import *
from crawlhive.utils.config.defaults.frontier import *
from crawlhive.utils.config.defaults.local import *
from crawlhive.utils.config.defaults.monitors import *
from crawlhive.utils.config.defaults.proxies import *
from crawlhive.utils.config.defaults.recrawl import *
from crawlhive.utils.config.defaults.rest import *
from crawlhive.utils.config.defaults.schemas import *
from crawlhive.utils.config.defaults.sink import *
from crawlhive.utils.config.defaults.stats import *

COMPONENTS: tuple[ModuleType, ...] = (
    backends,
    schemas,
    monitors,
    frontier,
    recrawl,
    crawler,
    proxies,
    cleaner,
    sink,
    stats,
    rest,
    local,
)
"""The modules of the settings, in the order the loader declares them."""
