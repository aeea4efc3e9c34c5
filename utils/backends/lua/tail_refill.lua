-- Put the requests of one tail segment back into its crawl queue's head.
-- KEYS: 1 crawl queue, 2 its tail (Keys.tail_queue), 3 domain crawls, 4 domains (spider, lane),
--       5 crawl domains, 6 tail stats of the shard, 7 the base of the shard's live-segments keys
--       (Keys.tail_segments_base).
-- ARGV: 1 tail member of the segment, 2 crawl member, 3 domain, then per request: queue member,
--       score.
-- The pointer leaves the tail in the same step as its requests enter the head, so a refill counts
-- once: a second refiller of the same segment (another redis-monitor, a retry after a crash) finds
-- the pointer gone and changes nothing; so does one that lost the race with a stop (the tail purged).
-- Returns the requests queued, or -1 when the pointer was already gone (the caller may delete
-- nothing: the segment is another refiller's, or the stop's).
--! include lib/tails.lua

if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return -1 end
local best
local n = 0
for first = 4, #ARGV, 1000 do
  local args = {}
  for i = first, math.min(first + 999, #ARGV), 2 do
    local score = ARGV[i + 1]
    args[#args + 1] = score
    args[#args + 1] = ARGV[i]
    if not best or tonumber(score) < tonumber(best) then best = score end
    n = n + 1
  end
  redis.call('ZADD', KEYS[1], 'NX', unpack(args))
end
if best then redis.call('ZADD', KEYS[3], 'LT', best, ARGV[2]) end
redis.call('ZADD', KEYS[4], 'NX', 0, ARGV[3])
redis.call('SADD', KEYS[5], ARGV[3])
local count, size, id = tail_member(ARGV[1])
if id then segments_forget(KEYS[7], id) end
redis.call('HINCRBY', KEYS[6], 'requests', -(count or n))
redis.call('HINCRBY', KEYS[6], 'segments', -1)
redis.call('HINCRBY', KEYS[6], 'bytes', -(size or 0))
redis.call('HINCRBY', KEYS[6], 'refilled', n)
return n
