-- The end of one visit of a scheduled page (docs/contract.md §19): its new state and slot entry,
-- or its leaving the schedule, and the crawl's counters (utils/frontier/recrawl.py Schedule.queue_visit).
-- KEYS: 1 state bucket, 2 crawl's slot index (recrawl_slots), 3 shard's due index, 4 crawl's shard
--       part (counters), 5 slot list of ARGV[4], 6 the crawl's stop marker (crawl_stopped): a visit
--       that ends after a stop or an expiry schedules nothing.
-- ARGV: 1 fingerprint (field), 2 packed state ('' = the page leaves), 3 packed slot entry,
--       4 slot start (epoch s), 5 crawl ref, 6 outcome ('first', 'changed', 'unchanged', 'gone'
--       or '' for a visit that ended without a fetch), 7 TTL the shard part keeps at least (s).
-- Returns 1 if the page is scheduled, 0 if it left.
local part = KEYS[4]
if redis.call('EXISTS', KEYS[6]) == 1 then
  -- the crawl was stopped or expired while this visit was on: it counts nothing, schedules nothing
  -- (the stop's purge emptied the schedule and its counters; a restart starts them afresh)
  if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then
    redis.call('HINCRBY', part, 'rc-scheduled', -1)
  end
  return 0
end
if ARGV[6] ~= '' then
  redis.call('HINCRBY', part, 'rc-visits', 1)
end
if ARGV[6] ~= 'first' then
  redis.call('HINCRBY', part, 'rc-ended', 1)  -- a released page's visit is over (info's due)
  if ARGV[6] ~= '' then
    redis.call('HINCRBY', part, 'rc-' .. ARGV[6], 1)
  end
end
local ttl = tonumber(ARGV[7])
if redis.call('TTL', part) < ttl then
  redis.call('EXPIRE', part, ttl)  -- its option sets live until the page's next visit
end
if ARGV[2] == '' then
  if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then
    redis.call('HINCRBY', part, 'rc-scheduled', -1)
  end
  return 0
end
if redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', part, 'rc-scheduled', 1)
end
local start = tonumber(ARGV[4])
redis.call('RPUSH', KEYS[5], ARGV[3])
redis.call('ZADD', KEYS[2], start, start)
local first = redis.call('ZSCORE', KEYS[3], ARGV[5])
if not first or tonumber(first) > start then
  redis.call('ZADD', KEYS[3], start, ARGV[5])
end
return 1
