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
