"""The crawler as a process kind (:mod:`crawlhive.utils.process.kinds`): ``crawlhive crawler``,
``up --crawlers``, ``up --render-crawlers``. Imports no Scrapy: ``crawlhive --help`` stays quick."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from crawlhive.utils.process.kinds import Option, ProcessKind, UpGroup

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

#: The crawler's built-in spider types, listed by ``crawler --help`` without importing Scrapy
#: (a test checks it against ``crawlhive.crawler.spiders.SPIDERS``).
BUILTIN_SPIDERS = ("link", "wandering")


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Run one crawler process until SIGINT/SIGTERM (0 after a graceful stop)."""
    from crawlhive.crawler.runner import run_crawler

    run_crawler(settings, args.spider)
    return 0


KIND = ProcessKind(
    name="crawler",
    summary="run one crawler process",
    epilog=f"""spiders: {", ".join(BUILTIN_SPIDERS)}, package.module:ClassName, or a spider name in SPIDER_MODULES
examples:
  crawlhive crawler                           # the link spider
  crawlhive crawler --spider wandering
  crawlhive crawler --spider mypackage.spiders:ShopSpider
  SPIDER_MODULES='["mypackage.spiders"]' crawlhive crawler --spider shop
  crawlhive crawler --spider shop --no-kafka  # Redis only: redis-cli rpush shop:start_urls https://…
  crawlhive crawler --render                  # pages of crawls sent with "render": true, in Chromium""",
    entry=run,
    options=(
        Option(
            ("--spider",),
            help=f"spider: {', '.join(BUILTIN_SPIDERS)}, package.module:Class or a name in SPIDER_MODULES "
            "(default link)",
            arguments={"default": "link"},
        ),
        Option(
            ("--no-kafka",),
            setting="KAFKA_ENABLED",
            help="Redis-only mode: no Kafka; seeds from <spider>:start_urls, items to <spider>:items "
            "(KAFKA_ENABLED=false)",
            arguments={"dest": "kafka_enabled", "action": "store_const", "const": False},
        ),
        Option(
            ("--render",),
            setting="RENDER",
            help="a rendering crawler: pages of crawls sent with render: true, loaded in headless Chromium "
            "(RENDER=true)",
            arguments={"action": "store_const", "const": True},
        ),
    ),
    order=30,
    up=(
        UpGroup(option="crawlers", default=1, help="link crawler processes (default 1)", args=("--spider", "link")),
        UpGroup(
            option="render_crawlers",
            default=0,
            metavar="N",
            help='rendering crawlers for crawls sent with "render": true (default 0; needs Chromium; §15)',
            args=("--spider", "link", "--render"),
            label="crawler-render",
        ),
    ),
    compose=("crawler", "crawler-render"),
    consumes=("frontier",),
    produces=("crawled_firehose", "crawled_<appid>", "items", "items_<appid>", "dead_letter", "frontier"),
    view="crawlhive.crawler.view.CrawlerView",
)
