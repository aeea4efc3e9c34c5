-- The cluster-wide throttle rule (docs/operations.md, "Politeness"), shared by every script that
-- throttles. A throttle set holds fetch start times (scores, Redis clock).
--! include lib/time.lua

-- Microseconds until throttle set tkey allows one more start at now (0 = now); trims the window.
-- At most hits starts in any window + margin (us); when moderated, starts at least window / hits
-- apart.
local function throttle_wait(tkey, now, hits, window, moderated, margin)
  local span = window + margin
  redis.call('ZREMRANGEBYSCORE', tkey, '-inf', secs(now - span))
  local count = redis.call('ZCARD', tkey)
  local wait = 0
  if count >= hits then
    local oldest = redis.call('ZRANGE', tkey, count - hits, count - hits, 'WITHSCORES')
    wait = micros(oldest[2]) + span - now
  end
  if moderated and count > 0 then
    local last = redis.call('ZRANGE', tkey, -1, -1, 'WITHSCORES')
    local spaced = micros(last[2]) + math.ceil(window / hits) - now
    if spaced > wait then wait = spaced end
  end
  return wait
end

-- Record a start at now in throttle set tkey and renew its expiry (window in us).
local function throttle_record(tkey, now, window)
  local start = secs(now)
  local id = start
  local n = 0
  while redis.call('ZADD', tkey, 'NX', start, id) == 0 do
    n = n + 1
    id = start .. '-' .. n
  end
  redis.call('PEXPIRE', tkey, math.ceil(window / 1000) + 1000)
end

-- The adaptive throttle (docs/contract.md §21.4): the fraction of its configured rate a domain is
-- held to, from hash atkey (the shard's autothrottle: domain-config's key with 'autothrottle' for
-- 'domain-config'), field domain = '<factor> <since us> <step>'; the factor set at since is raised
-- by step per window (us) after it, up to 1, when the field is dropped.
local function auto_key(cfgkey)
  return string.sub(cfgkey, 1, #cfgkey - #'domain-config') .. 'autothrottle'
end

local function auto_factor(atkey, domain, window, now)
  local v = redis.call('HGET', atkey, domain)
  if not v then
    return 1
  end
  local f, since, step = string.match(v, '^(%S+) (%S+) (%S+)$')
  f, since, step = tonumber(f), tonumber(since), tonumber(step)
  if not f or not since or not step or window <= 0 then
    redis.call('HDEL', atkey, domain)
    return 1
  end
  f = f + step * math.floor(math.max(now - since, 0) / window)
  if f >= 1 then
    redis.call('HDEL', atkey, domain)
    return 1
  end
  return f
end

-- Redis time (us) the first domain_limit call of a script run read.
local auto_now = nil

-- hits per window (us) slowed to factor f of that rate: fewer hits, or one hit per longer window.
local function slowed(hits, window, f)
  if f >= 1 or hits <= 0 then
    return hits, window
  end
  local eff = hits * f
  if eff >= 1 then
    return math.floor(eff + 1e-9), window
  end
  return 1, math.ceil(window / eff)
end

-- The limit of a domain: hits per window (us), from its domain-config (hash cfgkey, field domain)
-- or the defaults given, slowed by the adaptive throttle, then tightened to one fetch per delay by
-- its robots.txt Crawl-delay (string delaykey, seconds) unless the limit is already stricter.
local function domain_limit(cfgkey, delaykey, domain, hits, window)
  local cfg = redis.call('HGET', cfgkey, domain)
  if cfg then
    local c = cjson.decode(cfg)
    hits = math.floor(c.hits * c.scale + 1e-9)
    window = c.window * 1000000
  end
  auto_now = auto_now or now_us()  -- one TIME per script run, however many domains it looks at
  local f = auto_factor(auto_key(cfgkey), domain, window, auto_now)
  hits, window = slowed(hits, window, f)
  local delay = redis.call('GET', delaykey)
  if delay and hits > 0 then
    local dw = tonumber(delay) * 1000000
    if dw and dw > 0 and hits * dw > window then
      hits = 1
      window = dw
    end
  end
  return hits, window
end
