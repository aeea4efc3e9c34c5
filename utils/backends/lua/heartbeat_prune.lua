-- Drop the index entries whose heartbeat has expired (Redis time); return the live ones.
-- KEYS: 1 index zset.

local t = redis.call('TIME')
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. t[1] .. '.' .. string.format('%06d', t[2]))
return redis.call('ZRANGE', KEYS[1], 0, -1)
