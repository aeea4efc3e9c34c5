-- Push a domain's ready time to Redis time + delay, unless it is already later (a server's
-- Retry-After).
-- KEYS: 1 domains(spider). ARGV: 1 domain, 2 delay (us). Returns the new score as a string.
--! include lib/time.lua

redis.call('ZADD', KEYS[1], 'GT', secs(now_us() + tonumber(ARGV[2])), ARGV[1])
return redis.call('ZSCORE', KEYS[1], ARGV[1])
