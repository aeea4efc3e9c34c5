"""crawler: the Scrapy project (distributed scheduler, spiders, middlewares, Kafka pipeline)."""
