-- Choose the proxy of a request (docs/contract.md §21.2): the least recently used proxy of the
-- domain's pool that does not rest for the request's scope (its domain, or the tenant site of a
-- shared suffix) and, for this crawl, after its own ban_regex bans, cluster-wide; a sticky
-- session's own proxy while the session lasts.
-- KEYS: 1 domain_config (domain's shard), 2 proxy_lru(pool, scope), 3 proxy_health(pool, scope),
--       4 proxy_session(crawl, scope) (read only when sticky), 5 proxy_waiting (domain's shard),
--       6 proxy_sessions (domain's shard), 7 proxy_crawl_health(crawl, pool, scope).
-- ARGV: 1 domain, 2 the crawl's pool ('' none), 3 the pool KEYS 2-3 are of, 4 '1' if sticky,
--       5 session max requests, 6 session TTL (ms), 7 state TTL (ms), 8 scope, 9 '1' when a
--       domain-update's pool may win (PROXY_POOL_DOMAIN_UPDATES), 10… the pool's proxy ids.
-- Returns {0} to fetch directly (no pool); {1, proxy id, bans in a row, session cookies JSON or ''};
-- {2, wait us} when every proxy rests (the time until the first is back);
-- {3, pool} when the domain's pool is not ARGV[3] (ask again with that pool's keys and ids).
--! include lib/time.lua

local now = now_us()
local domain = ARGV[1]
local pool = ARGV[2]
local scope = ARGV[8]
if ARGV[9] == '1' then
  local cfg = redis.call('HGET', KEYS[1], domain)
  if cfg then
    local c = cjson.decode(cfg)
    if type(c.proxy_pool) == 'string' and c.proxy_pool ~= '' then
      pool = c.proxy_pool
    end
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
for i = 10, #ARGV do
  ids[#ids + 1] = ARGV[i]
  known[ARGV[i]] = true
end

-- Redis time (us) until which a proxy rests in health hash key, or nil.
local function rest_in(key, id)
  local r = redis.call('HGET', key, 'r:' .. id)
  if r and tonumber(r) > now then
    return tonumber(r)
  end
  return nil
end

-- (until, shared): the later of its rests for everyone and for this crawl; shared when the rest
-- for everyone is in force.
local function resting(id)
  local shared = rest_in(KEYS[3], id)
  local own = rest_in(KEYS[7], id)
  if shared and (not own or shared >= own) then
    return shared, true
  end
  return own, shared ~= nil
end

local function use(id, cookies)
  redis.call('ZADD', KEYS[2], secs(now), id)
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
  local fails = tonumber(redis.call('HGET', KEYS[3], 'f:' .. id) or '0')
  fails = fails + tonumber(redis.call('HGET', KEYS[7], 'f:' .. id) or '0')
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
local every_shared, soonest_shared = true, nil
for _, id in ipairs(ids) do
  local until_us, shared = resting(id)
  if until_us then
    if not soonest or until_us < soonest then soonest = until_us end
  else
    local score = redis.call('ZSCORE', KEYS[2], id)
    score = score and tonumber(score) or -1
    if not best or score < best_score then
      best, best_score = id, score
    end
  end
  if shared then
    local r = rest_in(KEYS[3], id)
    if not soonest_shared or r < soonest_shared then soonest_shared = r end
  else
    every_shared = false
  end
end
if not best then
  local wait = (soonest or now) - now
  if every_shared and soonest_shared then
    -- every crawl waits (not only this one, after its own ban_regex bans): shown in info and stats
    redis.call('ZADD', KEYS[5], secs(soonest_shared), pool .. '|' .. scope)
  end
  return {2, wait}
end
redis.call('ZREM', KEYS[5], pool .. '|' .. scope)
if sticky then
  redis.call('DEL', KEYS[4])
  redis.call('HSET', KEYS[4], 'proxy', best, 'pool', pool, 'count', 1, 'cookies', '')
  redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[6]))
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', secs(now))
  redis.call('ZADD', KEYS[6], secs(now + tonumber(ARGV[6]) * 1000), pool .. '|' .. best .. '|' .. KEYS[4])
end
return use(best, '')
