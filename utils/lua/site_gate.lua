-- May a crawler fetch from a tenant site of a shared suffix now (crawler SiteGateMiddleware)?
-- If the site's wait is running, no: returns its remaining milliseconds. Otherwise yes: returns 0,
-- and when the site asks for a Crawl-delay, starts a wait of that long (the spacing, cluster-wide).
-- KEYS: 1 site_wait, 2 site_delay. ARGV: none.
local left = redis.call('PTTL', KEYS[1])
if left > 0 then
  return left
end
local delay = tonumber(redis.call('GET', KEYS[2]))
if delay and delay > 0 then
  redis.call('SET', KEYS[1], '1', 'PX', math.floor(delay * 1000))
end
return 0
