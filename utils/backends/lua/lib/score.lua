-- The queue score of a request: -priority * 2^32 + (arrival sequence mod 2^32); the Lua twin of
-- crawlhive.utils.frontier.model.encode_score (SEQ_SPAN = 2^32 there; tests/unit/test_frontier.py
-- checks that both agree).
local SEQ_SPAN = 4294967296

local function queue_score(priority, seq)
  return string.format('%.0f', -tonumber(priority) * SEQ_SPAN + seq % SEQ_SPAN)
end
