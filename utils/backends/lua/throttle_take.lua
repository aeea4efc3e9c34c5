-- Take one fetch start from a domain's throttle for a redirect hop, if the throttle allows it now
-- (the same limit a pop applies: domain-config, defaults, robots.txt Crawl-delay; Redis clock).
-- KEYS: 1 throttle(domain), 2 domain_config, 3 domain_blacklist, 4 crawl_delay(domain),
--       5 domains(spider) (all in the domain's shard).
-- ARGV: 1 domain, 2 default hits, 3 default window (us), 4 '1' if moderated, 5 window margin (us),
--       6 recheck (us).
-- Returns 0 when the start was recorded (fetch now); -1 when the domain is blacklisted (never
-- fetch); else the microseconds to wait before asking again.
--! include lib/throttle.lua

local now = now_us()
local domain = ARGV[1]
if redis.call('SISMEMBER', KEYS[3], domain) == 1 then
  return -1
end
local hits, window = domain_limit(KEYS[2], KEYS[4], domain, tonumber(ARGV[2]), tonumber(ARGV[3]))
if hits <= 0 then
  return tonumber(ARGV[6])  -- paused: ask again later
end
local margin = tonumber(ARGV[5])
local wait = throttle_wait(KEYS[1], now, hits, window, ARGV[4] == '1', margin)
-- a domain backed off (a Retry-After, domain_defer.lua) is not fetched before its ready time
local ready = redis.call('ZSCORE', KEYS[5], domain)
if ready then
  local later = micros(ready) - now
  if later > wait then wait = later end
end
if wait > 0 then
  return wait
end
throttle_record(KEYS[1], now, window + margin)
return 0
