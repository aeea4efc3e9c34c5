-- Sum a counter's rolling windows, and drop buckets that left every window.
-- KEYS: 1 window zset, 2 lifetime counter. ARGV: 1 now (epoch s), 2 buckets per window, 3.. the
-- windows to sum (s). Returns {sum of ARGV[3], sum of ARGV[4], ..., lifetime}.

local now = tonumber(ARGV[1])
local per = tonumber(ARGV[2])
local slots = {}
local sums = {}
for i = 3, #ARGV do
  slots[ARGV[i]] = i - 2
  sums[i - 2] = 0
end
local entries = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local stale = {}
for i = 1, #entries, 2 do
  local w, b = string.match(entries[i], '^(%d+):(-?%d+)$')
  if w then
    if tonumber(b) <= math.floor(now / (tonumber(w) / per)) - per then
      stale[#stale + 1] = entries[i]
    elseif slots[w] then
      sums[slots[w]] = sums[slots[w]] + tonumber(entries[i + 1])
    end
  end
end
for i = 1, #stale, 1000 do
  redis.call('ZREM', KEYS[1], unpack(stale, i, math.min(i + 999, #stale)))
end
sums[#sums + 1] = tonumber(redis.call('GET', KEYS[2]) or '0')
return sums
