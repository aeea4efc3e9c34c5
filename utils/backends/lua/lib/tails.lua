-- Tails (docs/contract.md §23, FRONTIER_TAIL_URL): a crawl queue's requests beyond its head live
-- in segments of the tail store; its tail key (Keys.tail_queue) holds one member per segment,
-- '<segment id>:<requests>:<bytes>', scored by the best (lowest) queue score in the segment.

-- The requests, bytes and id of the segment a tail member names (nil for a malformed member).
local function tail_member(member)
  local id, n, size = string.match(member, '^([^:]+):(%d+):(%d+)$')
  if not n then return nil end
  return tonumber(n), tonumber(size), id
end

-- The live-segments key (Keys.tail_segments) of segment *id* ('<number>.<token>') under *base*
-- (Keys.tail_segments_base): 128 consecutive ids a key (keys.py SEGMENTS_PER_BUCKET).
local function segments_key(base, id)
  local number = tonumber(string.match(id, '^(%d+)')) or 0
  return base .. ':' .. math.floor(number / 128)
end

-- Drop segment *id* from the live-segments index under *base*: its bucket, and the one zset of
-- every live segment (named *base* itself) that releases before the buckets kept.
local function segments_forget(base, id)
  redis.call('ZREM', segments_key(base, id), id)
  redis.call('ZREM', base, id)
end

-- The requests held by the tail zset *tq* (every segment it points to).
local function tail_size(tq)
  local total = 0
  for _, member in ipairs(redis.call('ZRANGE', tq, 0, -1)) do
    total = total + (tail_member(member) or 0)
  end
  return total
end
