-- Time on the Redis clock, in integer microseconds. Scores are formatted by hand: Lua's tostring
-- keeps only 14 significant digits.

-- Redis time now, in microseconds.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- A score (epoch seconds with 6 decimals) from microseconds.
local function secs(us)
  return string.format('%d.%06d', math.floor(us / 1000000), us % 1000000)
end

-- Microseconds from a score.
local function micros(score)
  return math.floor(tonumber(score) * 1000000 + 0.5)
end
