"""Sinks: crawled and cleaned data into the stores people keep it in (docs/contract.md §20).

``crawlhive sink --to URL`` is a process kind of its own (:mod:`crawlhive.sink.kind`): a consumer
group per sink URL that writes each batch to its store and commits the offsets only once the store
holds it durably (:mod:`crawlhive.sink.worker`). The stores: PostgreSQL (:mod:`crawlhive.sink.postgres`),
files (:mod:`crawlhive.sink.files`) and WARC (:mod:`crawlhive.sink.warc`).
"""
