-- A sitemap lists a scheduled page with a <lastmod> after its last fetch: make it due at once
-- (docs/contract.md §19.7; utils/frontier/recrawl.py Schedule.queue_touch).
-- KEYS: 1 state bucket, 2 crawl's slot index, 3 shard's due index, 4 slot list of ARGV[3].
-- ARGV: 1 schedule fingerprint, 2 lastmod (epoch s), 3 now (epoch s, the slot start), 4 crawl ref,
--       5 packed slot entry due now.
-- The state (utils/frontier/recrawl.py PageState) holds next visit (u32, byte 1), interval (5),
-- last fetch (9) and flags at byte 27 (0x80: a visit is on). Nothing happens to a page not
-- scheduled, being visited, already due, or fetched since that lastmod. Its old slot entry stays
-- behind, stale (its due time no longer matches), and the release skips it.
-- Returns 1 if the page was made due, else 0.
local function u32(s, i)
  local a, b, c, d = string.byte(s, i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

local state = redis.call('HGET', KEYS[1], ARGV[1])
if not state or string.byte(state, 27) >= 128 then
  return 0
end
local now = tonumber(ARGV[3])
if u32(state, 1) <= now or tonumber(ARGV[2]) <= u32(state, 9) then
  return 0
end
local due = string.char(math.floor(now / 16777216) % 256, math.floor(now / 65536) % 256,
  math.floor(now / 256) % 256, now % 256)
redis.call('HSET', KEYS[1], ARGV[1], due .. string.sub(state, 5))
redis.call('RPUSH', KEYS[4], ARGV[5])
redis.call('ZADD', KEYS[2], now, now)
local first = redis.call('ZSCORE', KEYS[3], ARGV[4])
if not first or tonumber(first) > now then
  redis.call('ZADD', KEYS[3], now, ARGV[4])
end
return 1
