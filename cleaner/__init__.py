"""The cleaning stage (docs/contract.md §13): ``crawlhive cleaner`` turns the crawled firehose into
clean, structured records on ``<prefix>.cleaned``."""
