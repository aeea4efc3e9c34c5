-- Fire the crawl expiry timers whose time has come on the Redis clock.
-- KEYS: 1 expiries, 2 control stream. ARGV: 1 most timers to fire.
-- Each is removed from KEYS[1] (the claim: exactly one caller gets it) and an 'expire' entry is
-- appended to the stream. Returns the number fired.
--! include lib/unescape.lua

local now = redis.call('TIME')[1]
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local fired = 0
for i = 1, #due, 2 do
  local ref = due[i]
  redis.call('ZREM', KEYS[1], ref)
  local spider, appid, crawlid = string.match(ref, '^([^:]*):([^:]*):([^:]*)$')
  if spider then
    local event = cjson.encode({spiderid = unescape(spider), appid = unescape(appid),
      crawlid = unescape(crawlid), expires = tonumber(due[i + 1])})
    redis.call('XADD', KEYS[2], '*', 'kind', 'expire', 'request', event)
    fired = fired + 1
  end
end
return fired
