-- End an expired lease whose retries are used up: counted as failed, and a dead-letter entry
-- appended to the control stream, atomically.
-- KEYS: 1 leases, 2 crawl record, 3 crawl leases, 4 control stream.
-- ARGV: 1 member, 2 'failed', 3 record TTL (s), 4 dead letter (JSON; '' with shards, where the
--       stream is in another slot: the caller appends it).
-- Returns 1 if done, 0 if the lease was gone or had been renewed (nothing changed).
--! include lib/lease.lua

if not lease_expired(KEYS[1], ARGV[1]) then
  return 0
end
end_lease(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3])
if ARGV[4] ~= '' then
  redis.call('XADD', KEYS[4], '*', 'kind', 'dead-letter', 'request', ARGV[4])
end
return 1
