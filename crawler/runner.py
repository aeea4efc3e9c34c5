"""Run one crawler process: ``crawlhive crawler [--spider NAME]`` (docs/contract.md §8.2)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.crawler import CrawlerProcess

from crawlhive.crawler.netguard import NetworkPolicy
from crawlhive.crawler.render.settings import render_settings
from crawlhive.crawler.settings import apply_custom_settings, scrapy_settings, spider_lists, spider_modules
from crawlhive.crawler.spiders import spider_class
from crawlhive.utils.backends.kafka_clients import ensure_topics
from crawlhive.utils.backends.redis_clients import check_redis, redis_from_settings
from crawlhive.utils.config.errors import CrawlhiveError
from crawlhive.utils.process.loop import ClusterGone, Shutdown
from crawlhive.utils.rules.proxy_pools import pools_from_settings

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)


class CrawlerFailed(CrawlhiveError):
    """The crawler stopped because of an error (logged), not a shutdown request."""


def run_crawler(settings: Settings, spider: str) -> None:
    """Crawl for spider type *spider* until SIGINT/SIGTERM (graceful: in-flight pages finish and
    unstarted leases go back to the frontier; a second signal stops at once).

    Raises:
        SettingsError: unknown spider type or bad settings.
        BackendUnavailable: Redis or Kafka cannot be reached at start-up.
        CrawlerFailed: the crawl stopped on an error.
        ClusterGone: the ``crawlhive up`` whose Redis and broker it used has exited.
    """
    spider_cls = spider_class(spider, spider_modules(settings))
    # The spider type served is the class's ``name`` (``--spider`` may be a path or a module's spider).
    values = scrapy_settings(settings, str(spider_cls.name))  # a wrong SCRAPY_SETTINGS stops here, before connecting
    values = apply_custom_settings(values, spider_cls)  # so does a wrong custom_settings
    NetworkPolicy.from_settings(settings)  # so do wrong CRAWLER_*_NETWORKS
    pools_from_settings(settings)  # and wrong PROXY_POOLS, PROXY_POOLS_FILE, PROXY_POOL_DEFAULT
    if settings.RENDER:
        values = render_settings(values, settings)  # and a missing browser or scrapy-playwright
    if not settings.KAFKA_ENABLED:
        spider_lists(settings)  # and wrong REDIS_*_KEY formats
    redis = redis_from_settings(settings)
    try:
        check_redis(redis, settings)
    finally:
        redis.close()
    if settings.KAFKA_ENABLED:
        ensure_topics(settings, [settings.topic(t) for t in ("crawled_firehose", "items", "dead_letter")])
    else:
        logger.info(
            "Redis-only mode (KAFKA_ENABLED=false): no Kafka connection; seeds from %s",
            spider_lists(settings).start_urls(str(spider_cls.name)),
        )

    process = CrawlerProcess(values)
    # Scrapy's logging defaults put its loggers at DEBUG; ours (configured once in main) decide.
    logging.getLogger("scrapy").setLevel(logging.getLogger().getEffectiveLevel())
    errors: list[Any] = []
    crawler = process.create_crawler(spider_cls)
    crawl = process.crawl(crawler)
    crawl.addErrback(errors.append)
    process.start()  # installs Scrapy's SIGINT/SIGTERM handlers: first graceful, second forced
    from crawlhive.crawler.runtime import existing_runtime

    runtime = existing_runtime(crawler)
    if runtime is not None and runtime.gone is not None:
        raise ClusterGone(runtime.gone)  # one line from main(); exit 1
    if errors and errors[0].check(Shutdown):  # SIGINT/SIGTERM while Scrapy was still starting
        logger.info("crawler stopped while starting (%s)", errors[0].value)
        raise errors[0].value  # a graceful stop: main() exits 0 (leases taken meanwhile are reclaimed)
    if errors:
        failure = errors[0]
        logger.error("crawler failed", exc_info=(failure.type, failure.value, failure.tb))
        raise CrawlerFailed(f"crawler stopped on {failure.type.__name__}: {failure.value}")
