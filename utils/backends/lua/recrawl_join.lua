-- The count of pages on the recrawl schedules of one appid's crawls (docs/contract.md §19.1,
-- Keys.app_scheduled), cluster-wide: what a crawl's cap and the appid's ceiling are checked against.
-- KEYS: 1 the appid's count (hash: crawl ref -> pages, '*' -> the sum of the pages), 2 the crawl
--       record.
-- ARGV: 1 what happens:
--         'join': a page of the crawl is about to join its schedule (counted unless a limit refuses,
--                 or the crawl no longer recurs: stopped, or past its until);
--         'give': a page counted by 'join' did not join after all;
--         'sync': ARGV 8 is the crawl's true count, the pages on its schedule (the sum of its
--                 shards' 'rc-scheduled', recrawl_visit.lua): the count becomes it (a first visit
--                 counted by 'join' that never ended, a crawler killed mid-visit, is forgotten
--                 there; one in flight is counted again when it lands). Idempotent: several
--                 redis-monitors may sync at once. A crawl that no longer recurs leaves the count;
--         'forget': the crawl's schedule was purged (stop, expiry): all its pages leave the count;
--       2 crawl ref, 3 the crawl's cap (0 = none), 4 its name, 5 the appid's ceiling (0 = none),
--       6 its name, 7 TTL of the count (s), 8 the true count (for 'sync').
-- Returns for 'join' 1 when the page may join (counted), 0 when the crawl's cap refused it, -1
-- when the appid's ceiling did (the limit's name is then the crawl record's 'schedule_stopped'),
-- -2 when the crawl no longer recurs; for the others, the crawl's count after the change.
local ref = ARGV[2]
local mine = tonumber(redis.call('HGET', KEYS[1], ref) or '0')

-- take *n* pages off the crawl's count (never below 0)
local function take(n)
  n = math.min(n, mine)
  if n > 0 then
    redis.call('HINCRBY', KEYS[1], ref, -n)
    redis.call('HINCRBY', KEYS[1], '*', -n)
  end
  return mine - n
end

if ARGV[1] == 'forget' then
  take(mine)
  redis.call('HDEL', KEYS[1], ref)
  return 0
end
if ARGV[1] == 'give' then
  return take(1)
end
if ARGV[1] == 'sync' then
  if redis.call('HEXISTS', KEYS[2], 'recurring') == 0 then
    take(mine)
    redis.call('HDEL', KEYS[1], ref)
    return 0
  end
  local true_count = math.max(0, tonumber(ARGV[8]))
  if true_count ~= mine then
    redis.call('HSET', KEYS[1], ref, true_count)
    redis.call('HINCRBY', KEYS[1], '*', true_count - mine)
    redis.call('EXPIRE', KEYS[1], tonumber(ARGV[7]))
  end
  return true_count
end
if redis.call('HEXISTS', KEYS[2], 'recurring') == 0 then
  return -2  -- stopped, or past its until: nothing joins (a join after 'forget' would count forever)
end
local refused, code = nil, 0
local cap, ceiling = tonumber(ARGV[3]), tonumber(ARGV[5])
if cap > 0 and mine >= cap then
  refused = ARGV[4]
elseif ceiling > 0 and tonumber(redis.call('HGET', KEYS[1], '*') or '0') >= ceiling then
  refused, code = ARGV[6], -1
end
if refused then
  if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('HSET', KEYS[2], 'schedule_stopped', refused) end
  return code
end
redis.call('HINCRBY', KEYS[1], ref, 1)
redis.call('HINCRBY', KEYS[1], '*', 1)
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[7]))
return 1
