-- Move requests of a crawl queue's head into a segment the tail store already holds (durably).
-- KEYS: 1 crawl queue, 2 its tail (Keys.tail_queue), 3 tail stats of the shard, 4 the base of the
--       shard's live-segments keys (Keys.tail_segments_base; the script adds the id's bucket).
-- ARGV: 1 tail member '<segment id>:<requests>:<bytes>', 2 best score in the segment, 3 the tail
--       member the segment replaces ('' for none: a small last segment the new one holds too),
--       then per request: queue member, score (as read from the queue).
-- Every request must still be queued with the score it was read with, and the replaced pointer
-- still in the tail; else (a pop leased one, a stop purged the queue, a refill took the segment)
-- nothing changes and the caller deletes the new segment: a request is never both in the queue
-- and in a segment, nor in two live segments, so no spill race fetches it twice.
-- Returns 1 when the requests left Redis for the segment, 0 when the queue or the tail changed.
--! include lib/tails.lua

local members = {}
for i = 4, #ARGV, 2 do members[#members + 1] = ARGV[i] end
if #members == 0 then return 0 end
local replaced = ARGV[3]
if replaced ~= '' and not redis.call('ZSCORE', KEYS[2], replaced) then return 0 end
for first = 1, #members, 500 do
  local last = math.min(first + 499, #members)
  local scores = redis.call('ZMSCORE', KEYS[1], unpack(members, first, last))
  for j = first, last do
    local score = scores[j - first + 1]
    if not score or tonumber(score) ~= tonumber(ARGV[3 + 2 * j]) then return 0 end
  end
end
for first = 1, #members, 500 do
  redis.call('ZREM', KEYS[1], unpack(members, first, math.min(first + 499, #members)))
end
local segments, bytes = 1, 0
if replaced ~= '' then
  local _, old_size, old_id = tail_member(replaced)
  redis.call('ZREM', KEYS[2], replaced)
  if old_id then segments_forget(KEYS[4], old_id) end
  segments, bytes = 0, -(old_size or 0)
end
local _, size, id = tail_member(ARGV[1])
redis.call('ZADD', segments_key(KEYS[4], id), redis.call('TIME')[1], id)
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('HINCRBY', KEYS[3], 'requests', #members)
if segments ~= 0 then redis.call('HINCRBY', KEYS[3], 'segments', segments) end
redis.call('HINCRBY', KEYS[3], 'bytes', bytes + (size or 0))
redis.call('HINCRBY', KEYS[3], 'spilled', #members)
return 1
