-- May a crawler fetch from a tenant site of a shared suffix now (crawler SiteGateMiddleware)?
-- If the site's wait is running, no: returns its remaining milliseconds. Otherwise yes: returns 0,
-- and starts a wait (the site's spacing, cluster-wide) as long as the longer of its Crawl-delay and,
-- while the adaptive throttle holds the site below its bucket's rate (field = the site in the
-- shard's autothrottle hash, docs/contract.md §21.4), one fetch interval at that slowed rate.
-- KEYS: 1 site_wait, 2 site_delay, 3 domain_config (the bucket's shard).
-- ARGV: 1 the bucket (domain), 2 the site, 3 default hits, 4 default window (us).
--! include lib/throttle.lua

local left = redis.call('PTTL', KEYS[1])
if left > 0 then
  return left
end
local wait_ms = 0
local delay = tonumber(redis.call('GET', KEYS[2]))
if delay and delay > 0 then
  wait_ms = delay * 1000
end
local hits, window = tonumber(ARGV[3]), tonumber(ARGV[4])
local cfg = redis.call('HGET', KEYS[3], ARGV[1])
if cfg then
  local c = cjson.decode(cfg)
  hits = math.floor(c.hits * c.scale + 1e-9)
  window = c.window * 1000000
end
if hits > 0 and window > 0 then
  local f = auto_factor(auto_key(KEYS[3]), ARGV[2], window, now_us())
  if f < 1 then
    local h, w = slowed(hits, window, f)
    local spacing_ms = math.ceil(w / h / 1000)
    if spacing_ms > wait_ms then wait_ms = spacing_ms end
  end
end
if wait_ms > 0 then
  redis.call('SET', KEYS[1], '1', 'PX', math.floor(wait_ms))
end
return 0
