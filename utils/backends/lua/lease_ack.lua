-- End a lease: its item or dead letter was acknowledged by Kafka, or it was dropped.
-- KEYS: 1 leases, 2 crawl record, 3 crawl leases, 4.. the page's records of the links it added to
--       a Bloom filter (Keys.dupefilter_bloom_page, crawler_admit.lua), deleted if this call ends
--       the lease (a reclaimed lease's record is its retry's now).
-- ARGV: 1 member, 2 counter ('crawled', 'failed' or '' for a policy drop), 3 record TTL (s).
-- Returns 1 if this call ended the lease, else 0 (reclaimed or cancelled meanwhile).
--! include lib/lease.lua

local ended = end_lease(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3])
if ended == 1 and #KEYS > 3 then
  redis.call('DEL', unpack(KEYS, 4))
end
return ended
