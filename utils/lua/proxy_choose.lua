-- Choose the proxy of a request (docs/contract.md §21.2): the least recently used proxy of the
-- domain's pool that does not rest for the domain, cluster-wide; a sticky session's own proxy
-- while the session lasts.
-- KEYS: 1 domain_config (domain's shard), 2 proxy_lru(pool, domain), 3 proxy_health(pool, domain),
--       4 proxy_session(crawl, domain) (read only when sticky), 5 proxy_waiting (domain's shard),
--       6 proxy_sessions (domain's shard).
-- ARGV: 1 domain, 2 the crawl's pool ('' none), 3 the pool KEYS 2-3 are of, 4 '1' if sticky,
--       5 session max requests, 6 session TTL (ms), 7 state TTL (ms), 8… the pool's proxy ids.
-- Returns {0} to fetch directly (no pool); {1, proxy id, bans in a row, session cookies JSON or ''};
-- {2, wait us} when every proxy rests (the time until the first is back);
-- {3, pool} when the domain's pool is not ARGV[3] (ask again with that pool's keys and ids).
--! include lib/time.lua

local now = now_us()
local domain = ARGV[1]
local pool = ARGV[2]
local cfg = redis.call('HGET', KEYS[1], domain)
if cfg then
  local c = cjson.decode(cfg)
  if type(c.proxy_pool) == 'string' and c.proxy_pool ~= '' then
    pool = c.proxy_pool
  end
end
if pool == '' then
  return {0}
end
if pool ~= ARGV[3] then
  return {3, pool}
end
local ttl = tonumber(ARGV[7])
local sticky = ARGV[4] == '1'
local ids = {}
local known = {}
for i = 8, #ARGV do
  ids[#ids + 1] = ARGV[i]
  known[ARGV[i]] = true
end

local function resting(id)
  local r = redis.call('HGET', KEYS[3], 'r:' .. id)
  if r and tonumber(r) > now then
    return tonumber(r)
  end
  return nil
end

local function use(id, cookies)
  redis.call('ZADD', KEYS[2], secs(now), id)
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
  local fails = tonumber(redis.call('HGET', KEYS[3], 'f:' .. id) or '0')
  return {1, id, fails, cookies}
end

if sticky then
  local s = redis.call('HMGET', KEYS[4], 'proxy', 'pool', 'count', 'cookies')
  if s[1] and s[2] == pool and known[s[1]] and tonumber(s[3] or '0') < tonumber(ARGV[5]) and not resting(s[1]) then
    redis.call('HINCRBY', KEYS[4], 'count', 1)
    return use(s[1], s[4] or '')
  end
end

local best, best_score, soonest = nil, nil, nil
for _, id in ipairs(ids) do
  local until_us = resting(id)
  if until_us then
    if not soonest or until_us < soonest then soonest = until_us end
  else
    local score = redis.call('ZSCORE', KEYS[2], id)
    score = score and tonumber(score) or -1
    if not best or score < best_score then
      best, best_score = id, score
    end
  end
end
if not best then
  local wait = (soonest or now) - now
  redis.call('ZADD', KEYS[5], secs(now + wait), pool .. '|' .. domain)
  return {2, wait}
end
redis.call('ZREM', KEYS[5], pool .. '|' .. domain)
if sticky then
  redis.call('DEL', KEYS[4])
  redis.call('HSET', KEYS[4], 'proxy', best, 'pool', pool, 'count', 1, 'cookies', '')
  redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[6]))
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', secs(now))
  redis.call('ZADD', KEYS[6], secs(now + tonumber(ARGV[6]) * 1000), pool .. '|' .. best .. '|' .. KEYS[4])
end
return use(best, '')
