"""The built-in spider types (docs/contract.md §3.3) and how ``crawlhive crawler --spider NAME`` finds them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.utils.misc import load_object

from crawlhive.crawler.spiders.link import LinkSpider
from crawlhive.crawler.spiders.wandering import WanderingSpider
from crawlhive.utils.errors import SettingsError

if TYPE_CHECKING:
    from scrapy import Spider

SPIDERS: dict[str, type[Spider]] = {"link": LinkSpider, "wandering": WanderingSpider}
"""Spider type name -> class."""


def spider_class(name: str) -> type[Spider]:
    """The spider class for *name*: a built-in type, or a dotted path to a Spider subclass whose
    ``name`` is the spider type it crawls.

    Raises:
        SettingsError: unknown name or unloadable path (names ``--spider``).
    """
    if name in SPIDERS:
        return SPIDERS[name]
    if "." in name:
        try:
            cls: type[Spider] = load_object(name)
        except (ImportError, NameError, ValueError) as exc:
            raise SettingsError(f"--spider: cannot load {name!r}: {exc}") from exc
        return cls
    raise SettingsError(f"--spider: unknown spider type {name!r}; built-in: {', '.join(SPIDERS)}")
