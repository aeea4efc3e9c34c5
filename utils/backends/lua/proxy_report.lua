-- Count a response through a proxy for a scope (a domain, or the tenant site of a shared suffix;
-- docs/contract.md §21.3): a success clears its bans in a row; a ban adds one, drops the sticky
-- session that used it, and at PROXY_BAN_THRESHOLD in a row sends the proxy to rest for the scope
-- (PROXY_COOLDOWN, doubled at each rest, capped). A ban every crawl shares (a status, a failure to
-- reach the proxy) counts in proxy_health; a crawl's own (its ban_regex) in its proxy_crawl_health,
-- resting the proxy for that crawl alone.
-- KEYS: 1 the health hash the ban counts in, 2 proxy_rests (domain's shard), 3 proxy_session(crawl,
--       scope), 4 proxy_sessions (domain's shard), 5 the other health hash (a success clears both).
-- ARGV: 1 proxy id, 2 'ok' or 'ban', 3 threshold, 4 cooldown (us), 5 longest cooldown (us),
--       6 rests member ('<pool>|<id>|<scope>'; '' for a crawl's own rest, listed nowhere else),
--       7 state TTL (ms), 8 '1' to drop the session if it is this proxy's, 9 the pool.
-- Returns the rest begun in us (0: none).
--! include lib/time.lua

local now = now_us()
local id = ARGV[1]
if ARGV[2] == 'ok' then
  redis.call('HDEL', KEYS[1], 'f:' .. id)
  redis.call('HDEL', KEYS[5], 'f:' .. id)
  return 0
end
if ARGV[8] == '1' and redis.call('HGET', KEYS[3], 'proxy') == id then
  redis.call('DEL', KEYS[3])
  redis.call('ZREM', KEYS[4], ARGV[9] .. '|' .. id .. '|' .. KEYS[3])
end
local fails = redis.call('HINCRBY', KEYS[1], 'f:' .. id, 1)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[7]))
if fails < tonumber(ARGV[3]) then
  return 0
end
local n = redis.call('HINCRBY', KEYS[1], 'n:' .. id, 1)
local rest = math.min(tonumber(ARGV[4]) * 2 ^ (n - 1), tonumber(ARGV[5]))
rest = math.floor(rest)
redis.call('HSET', KEYS[1], 'r:' .. id, now + rest)
redis.call('HDEL', KEYS[1], 'f:' .. id)
if ARGV[6] ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', secs(now))
  redis.call('ZADD', KEYS[2], secs(now + rest), ARGV[6])
end
return rest
