"""rest: the HTTP front (feed, poll, crawl status, metrics, dashboard)."""
