-- Check a fetched page's lease and filter its links, in one step.
-- KEYS: 1 leases(spider), 2 crawl stopped marker, 3 dupefilter(crawl), 4.. page-cap sets.
-- ARGV: 1 leased member, 2 lease (us), 3 filter TTL (ms), 4 page fingerprint, 5 page cap-set index
--       into KEYS (0 = none), then per link: fingerprint, cap-set index (0 = none), cap.
-- Returns {verdict, admitted flags...}: verdict 1 = lease ours and renewed, links checked;
-- 2 = crawl stopped, lease taken after the stop (a resubmitted seed: emit, queue no links);
-- 3 = crawl stopped while in flight (drop); 0 = lease lost (drop, do not ack).
--! include lib/lease.lua

local alive = redis.call('ZSCORE', KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  if alive then return {2} end
  return {3}
end
if not alive then return {0} end
renew_lease(KEYS[1], ARGV[1], ARGV[2])
local owner = ARGV[4]
local ttl = tonumber(ARGV[3])
redis.call('HSETNX', KEYS[3], owner, owner)
local own = tonumber(ARGV[5])
if own > 0 then redis.call('SADD', KEYS[own], owner) end
local out = {1}
for i = 6, #ARGV, 3 do
  local fp = ARGV[i]
  local idx = tonumber(ARGV[i + 1])
  local ok = fp ~= owner and (redis.call('HSETNX', KEYS[3], fp, owner) == 1 or redis.call('HGET', KEYS[3], fp) == owner)
  if ok and idx > 0 and redis.call('SISMEMBER', KEYS[idx], fp) == 0 then
    if redis.call('SCARD', KEYS[idx]) < tonumber(ARGV[i + 2]) then
      redis.call('SADD', KEYS[idx], fp)
    else
      ok = false
    end
  end
  out[#out + 1] = ok and 1 or 0
end
for k = 3, #KEYS do redis.call('PEXPIRE', KEYS[k], ttl) end
return out
