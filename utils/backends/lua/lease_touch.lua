-- Renew a lease unless its crawl was stopped.
-- KEYS: 1 leases, 2 crawl stopped marker. ARGV: 1 member, 2 lease (us).
-- Returns 1 renewed, 0 lease gone (reclaimed or cancelled), 2 crawl stopped (lease kept: the
-- caller drops its result and acks).
--! include lib/lease.lua

if redis.call('EXISTS', KEYS[2]) == 1 then
  return 2
end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
renew_lease(KEYS[1], ARGV[1], ARGV[2])
return 1
