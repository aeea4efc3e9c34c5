"""The backends and how crawlhive talks to them: Redis clients and types, every Redis key format
(:mod:`.keys`), the Lua scripts (:mod:`.scripts`, ``lua/``), replication waits, Kafka clients
(librdkafka) and the blob store of pages sent by reference."""
