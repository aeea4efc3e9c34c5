-- Leases: a spider's lease zset maps each leased member to its deadline (a score, Redis clock).
--! include lib/time.lua

-- Push the deadline of the lease member in zset leases to now + lease_us, if it is still leased.
local function renew_lease(leases, member, lease_us)
  redis.call('ZADD', leases, 'XX', secs(now_us() + tonumber(lease_us)), member)
end

-- True when the lease exists and its deadline has passed on the Redis clock (a lease renewed
-- after a reaper listed it is left alone).
local function lease_expired(leases, member)
  local deadline = redis.call('ZSCORE', leases, member)
  if not deadline then
    return false
  end
  local t = redis.call('TIME')
  return tonumber(deadline) <= tonumber(t[1]) + tonumber(t[2]) / 1000000
end

-- End a lease: remove it, take it off its crawl's in-flight count and, unless counter is '',
-- count it as counter ('crawled' or 'failed'). Returns 1 if it was still leased, else 0 (it had
-- been reclaimed or cancelled by a stop: the caller's result no longer counts).
local function end_lease(leases, record, crawl_leases, member, counter, record_ttl)
  if redis.call('ZREM', leases, member) == 0 then
    return 0
  end
  redis.call('SREM', crawl_leases, member)
  redis.call('HINCRBY', record, 'inflight', -1)
  if counter ~= '' then
    redis.call('HINCRBY', record, counter, 1)
  end
  redis.call('HSET', record, 'last_activity', redis.call('TIME')[1])
  redis.call('EXPIRE', record, record_ttl)
  return 1
end
