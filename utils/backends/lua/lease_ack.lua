-- End a lease: its item or dead letter was acknowledged by Kafka, or it was dropped.
-- KEYS: 1 leases, 2 crawl record, 3 crawl leases.
-- ARGV: 1 member, 2 counter ('crawled', 'failed' or '' for a policy drop), 3 record TTL (s).
-- Returns 1 if this call ended the lease, else 0 (reclaimed or cancelled meanwhile).
--! include lib/lease.lua

return end_lease(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3])
