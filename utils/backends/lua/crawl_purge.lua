-- Stop one crawl: delete its queued requests in every domain of both lanes (plain and rendering),
-- cancel its leases, disarm its expiry timer and mark it stopped (unless it had already ended).
-- KEYS: 1 crawl domains, 2 crawl leases, 3 leases, 4 crawl record, 5 expiries, 6 stopped marker,
--       7 crawl domains of the rendering lane.
-- ARGV: 1 crawl queue prefix + crawl member + ':', 2 domain crawls prefix, 3 crawl member,
--       4 crawl ref ('' with shards: the caller disarms the timer, whose key is in another slot), 5 stopped-marker TTL (s), 6 how the crawl ends ('stopped' or 'expired'),
--       7 and 8: ARGV 1 and 2 of the rendering lane, 9 when the stop took effect (epoch ms): the
--       marker's value, so a seed sent before it and read after it is not queued (§3.9),
--       10 and 11: tail queue prefix + crawl member + ':' of the plain and rendering lanes (their
--       tails are purged too, KEYS 8: the shard's tail stats, 9: the base of its
--       live-segments keys, Keys.tail_segments_base).
-- Returns {queued requests purged (tails included), tail members of the purged segments...}: the
-- caller deletes those segments from the tail store.
--! include lib/tails.lua

local purged = 0
local segments = {}
local lanes = {{KEYS[1], ARGV[1], ARGV[2], ARGV[10]}, {KEYS[7], ARGV[7], ARGV[8], ARGV[11]}}
for _, lane in ipairs(lanes) do
  for _, domain in ipairs(redis.call('SMEMBERS', lane[1])) do
    local cq = lane[2] .. domain
    purged = purged + redis.call('ZCARD', cq)
    redis.call('DEL', cq)
    local tq = lane[4] .. domain
    for _, member in ipairs(redis.call('ZRANGE', tq, 0, -1)) do
      local n, size, id = tail_member(member)
      if n then
        segments_forget(KEYS[9], id)
        purged = purged + n
        redis.call('HINCRBY', KEYS[8], 'requests', -n)
        redis.call('HINCRBY', KEYS[8], 'segments', -1)
        redis.call('HINCRBY', KEYS[8], 'bytes', -size)
      end
      segments[#segments + 1] = member
    end
    redis.call('DEL', tq)
    redis.call('ZREM', lane[3] .. domain, ARGV[3])
  end
  redis.call('DEL', lane[1])
end
for _, member in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  redis.call('ZREM', KEYS[3], member)
end
redis.call('DEL', KEYS[2])
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('HSET', KEYS[4], 'inflight', 0)
  -- a crawl that already ended (complete, expired) keeps how it ended: a later stop purges nothing
  redis.call('HSETNX', KEYS[4], 'ended_as', ARGV[6])
  redis.call('HDEL', KEYS[4], 'expires')
end
if ARGV[4] ~= '' then redis.call('ZREM', KEYS[5], ARGV[4]) end
redis.call('SET', KEYS[6], ARGV[9], 'EX', ARGV[5])
local out = {purged}
for _, member in ipairs(segments) do out[#out + 1] = member end
return out
