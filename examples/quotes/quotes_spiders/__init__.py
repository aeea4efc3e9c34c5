"""An example crawlhive spider project: an ordinary Scrapy spider, its items and a pipeline (docs/spiders.md)."""
