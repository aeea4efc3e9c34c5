-- Near-duplicate lookup of the cleaners (docs/contract.md §26.1), for a batch of one appid's records.
-- KEYS: 1 the appid's index of the current window, 2 of the previous window (Keys.near_duplicates).
-- ARGV: 1 TTL (s) of the current window's key, 2 largest Hamming distance D, 3 bands (D + 1),
--       then per record: SimHash (8 bytes, big-endian), crawlid, url.
-- A record is a near-duplicate of the closest earlier record (either window) whose SimHash differs
-- in at most D bits and whose url is not its own (the same page again, a redelivered record, is
-- not a near-duplicate of itself). A record that is none is added to the current window: its
-- SimHash under each band's field, and its crawlid and url under 'u' .. SimHash (the first kept).
-- Returns per record {distance, '<crawlid> <url>'} of the record it is a near-duplicate of, or {-1}.

local MAX_PER_FIELD = 64
local max_d = tonumber(ARGV[2])
local bands = tonumber(ARGV[3])

-- bits set in each byte value
local POP = {[0] = 0}
for v = 1, 255 do POP[v] = POP[math.floor(v / 2)] + v % 2 end

-- Hamming distance of two 8-byte SimHashes (b at offset j of a packed field)
local function distance(a, b, j)
  local d = 0
  for i = 1, 8 do
    d = d + POP[bit.bxor(string.byte(a, i), string.byte(b, j + i - 1))]
  end
  return d
end

-- the fields of a SimHash's bands: its 16 hex digits cut into 'bands' runs
local function band_fields(h)
  local hex = string.format('%02x%02x%02x%02x%02x%02x%02x%02x', string.byte(h, 1, 8))
  local fields, start = {}, 1
  for i = 1, bands do
    local stop = math.floor(16 * i / bands)
    fields[i] = 'b' .. i .. ':' .. string.sub(hex, start, stop)
    start = stop + 1
  end
  return fields
end

local out = {}
for r = 4, #ARGV, 3 do
  local h, crawlid, url = ARGV[r], ARGV[r + 1], ARGV[r + 2]
  local fields = band_fields(h)
  local best, best_d, best_info = nil, max_d + 1, nil
  for k = 1, 2 do
    for _, field in ipairs(fields) do
      local packed = redis.call('HGET', KEYS[k], field)
      if packed then
        for e = 1, #packed, 8 do
          local d = distance(h, packed, e)
          if d < best_d then
            local other = string.sub(packed, e, e + 7)
            local info = redis.call('HGET', KEYS[k], 'u' .. other)
            if info and string.sub(info, #info - #url) ~= ' ' .. url then
              best, best_d, best_info = other, d, info
            end
          end
        end
      end
    end
  end
  if best then
    out[#out + 1] = {best_d, best_info}
  else
    out[#out + 1] = {-1}
    if redis.call('HSETNX', KEYS[1], 'u' .. h, crawlid .. ' ' .. url) == 1 then
      for _, field in ipairs(fields) do
        local packed = (redis.call('HGET', KEYS[1], field) or '') .. h
        if #packed > 8 * MAX_PER_FIELD then packed = string.sub(packed, #packed - 8 * MAX_PER_FIELD + 1) end
        redis.call('HSET', KEYS[1], field, packed)
      end
    end
  end
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
return out
