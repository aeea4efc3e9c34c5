-- Move a lease back into its crawl's queue. The KEYS and ARGV layout of lease_requeue.lua and
-- lease_reclaim.lua, which share it:
-- KEYS: 1 leases, 2 crawl leases, 3 crawl record, 4 crawl queue, 5 domain crawls, 6 domains,
--       7 crawl domains, 8 queue sequence.
-- ARGV: 1 leased member, 2 member to queue, 3 priority, 4 crawl member, 5 domain, 6 option set
--       field of the crawl record ('' for a self-contained member), 7 option set JSON.
--! include lib/score.lua

-- Returns 1 if moved, 0 if the lease had already ended.
local function requeue_lease()
  if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
    return 0
  end
  redis.call('SREM', KEYS[2], ARGV[1])
  redis.call('HINCRBY', KEYS[3], 'inflight', -1)
  local score = queue_score(ARGV[3], redis.call('INCR', KEYS[8]))
  redis.call('ZADD', KEYS[4], 'NX', score, ARGV[2])
  redis.call('ZADD', KEYS[5], 'LT', score, ARGV[4])
  redis.call('ZADD', KEYS[6], 'NX', 0, ARGV[5])
  redis.call('SADD', KEYS[7], ARGV[5])
  if ARGV[6] ~= '' then
    redis.call('HSET', KEYS[3], ARGV[6], ARGV[7])
  end
  return 1
end
