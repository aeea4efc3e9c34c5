-- Write a process's heartbeat and index it at its expiry (Redis time).
-- KEYS: 1 heartbeat key, 2 index zset. ARGV: 1 payload, 2 timeout (ms), 3 node id.

local t = redis.call('TIME')
local ms = tonumber(ARGV[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ms)
local expires = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ms
redis.call('ZADD', KEYS[2], string.format('%d.%03d', math.floor(expires / 1000), expires % 1000), ARGV[3])
return 1
