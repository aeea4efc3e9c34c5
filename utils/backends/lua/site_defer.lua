-- A tenant site of a shared suffix answered 429 with Retry-After: no crawler fetches from it for
-- that long, unless a longer wait already runs.
-- KEYS: 1 site_wait. ARGV: 1 wait (ms). Returns the wait in force (ms).
local wait = tonumber(ARGV[1])
if redis.call('PTTL', KEYS[1]) < wait then
  redis.call('SET', KEYS[1], '1', 'PX', wait)
end
return redis.call('PTTL', KEYS[1])
