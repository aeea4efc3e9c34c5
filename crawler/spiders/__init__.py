"""The built-in spider types (docs/contract.md §3.3) and how ``crawlhive crawler --spider NAME`` finds them."""

from __future__ import annotations

from scrapy import Spider
from scrapy.settings import Settings as ScrapySettings
from scrapy.spiderloader import SpiderLoader
from scrapy.utils.misc import load_object

from crawlhive.crawler.spiders.link import LinkSpider
from crawlhive.crawler.spiders.wandering import WanderingSpider
from crawlhive.utils.config.errors import SettingsError

SPIDERS: dict[str, type[Spider]] = {"link": LinkSpider, "wandering": WanderingSpider}
"""Spider type name -> class."""


def spider_class(name: str, spider_modules: list[str] | None = None) -> type[Spider]:
    """The spider class for *name* (docs/contract.md §11): a built-in type; ``package.module:Class``
    (or the dotted ``package.module.Class``); or the ``name`` of a spider class in one of
    *spider_modules* (Scrapy's ``SPIDER_MODULES``, found by Scrapy's own ``SpiderLoader``).

    Raises:
        UnknownSpider: nothing answers to *name*, or it is not a Spider subclass (exit code 2; the
            message names ``--spider`` and ``SPIDER_MODULES``).
    """
    if name in SPIDERS:
        return SPIDERS[name]
    if ":" in name or ("." in name and not spider_modules):
        path = name.replace(":", ".", 1) if ":" in name else name
        try:
            found = load_object(path)
        except (ImportError, NameError, ValueError, AttributeError) as exc:
            raise UnknownSpider(f"--spider: cannot load {name!r}: {exc}") from exc
        return _spider(found, name)
    modules = list(spider_modules or [])
    if modules:
        try:
            loader = SpiderLoader.from_settings(
                ScrapySettings({"SPIDER_MODULES": modules, "SPIDER_LOADER_WARN_ONLY": False})
            )
        except ImportError as exc:
            raise UnknownSpider(f"SPIDER_MODULES: cannot import {exc.name or exc}: {exc}") from exc
        if name in loader.list():
            return _spider(loader.load(name), name)
    where = f"the spiders of SPIDER_MODULES ({', '.join(modules)})" if modules else "SPIDER_MODULES (not set)"
    raise UnknownSpider(
        f"--spider: no spider named {name!r}: not built in ({', '.join(SPIDERS)}), not in {where}; "
        "give package.module:ClassName, or add the spider's module to SPIDER_MODULES"
    )


def _spider(found: object, name: str) -> type[Spider]:
    if not (isinstance(found, type) and issubclass(found, Spider)):
        raise UnknownSpider(f"--spider: {name!r} is not a scrapy.Spider subclass")
    return found


class UnknownSpider(SettingsError):
    """``--spider`` names no spider crawlhive can load; ``main()`` exits with 2."""

    exit_code = 2
