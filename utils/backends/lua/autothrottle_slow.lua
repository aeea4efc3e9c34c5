-- Halve a domain's rate (the adaptive throttle, docs/contract.md §21.4): a 429 or 503 answered
-- without switching proxy, or a response slower than AUTOTHROTTLE_LATENCY. For a tenant site of a
-- shared suffix (mallory.github.io in bucket github.io) the site's own rate is halved (field = the
-- site), which the site gate applies to that site alone (site_gate.lua); the bucket is untouched.
-- KEYS: 1 domain_config (of the domain's shard), 2 crawl_delay(domain) (unused but for the slot).
-- ARGV: 1 domain, 2 default hits, 3 default window (us), 4 step (fraction regained per window),
--       5 lowest factor, 6 the field slowed: the domain, or the tenant site.
-- Returns the factor in force after the call, as a string ('1' when the domain is not slowed):
-- responses to fetches started before the last halving (within one fetch interval at the slowed
-- rate, at least a second) do not halve it again, so a burst of 429s halves it once.
--! include lib/throttle.lua

local now = now_us()
local domain = ARGV[1]
local hits, window = tonumber(ARGV[2]), tonumber(ARGV[3])
local cfg = redis.call('HGET', KEYS[1], domain)
if cfg then
  local c = cjson.decode(cfg)
  hits = math.floor(c.hits * c.scale + 1e-9)
  window = c.window * 1000000
end
if hits <= 0 or window <= 0 then
  return '1'
end
local atkey = auto_key(KEYS[1])
local field = ARGV[6]
local f = auto_factor(atkey, field, window, now)
local v = redis.call('HGET', atkey, field)
if v then
  local since = tonumber(string.match(v, '^%S+ (%S+) '))
  local h, w = slowed(hits, window, f)
  local spacing = math.max(w / h, 1000000)
  if since and now - since < spacing then
    return tostring(f)
  end
end
f = math.max(f / 2, tonumber(ARGV[5]))
redis.call('HSET', atkey, field, string.format('%.17g %d %s', f, now, ARGV[4]))
return tostring(f)
