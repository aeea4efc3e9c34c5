-- Several crawls' queued requests per domain in one shard, O(domains), never O(backlog), and, with
-- shards, each crawl's counters in that shard.
-- KEYS: per crawl: its plain crawl domains, its rendering crawl domains and, when ARGV[3] is '1',
--   its shard part.
-- ARGV: 1 plain crawl queue prefix, 2 rendering crawl queue prefix (each completed with crawl
--   member + ':' + domain), 3 '1' to read the shard parts, '0' not to; 4.. each crawl's member.
-- Returns per crawl {plain, rendering, counters}: plain and rendering are {domain, queued, best
-- score, worst score, ...} for each domain with queued requests; counters {inflight, crawled,
-- failed} of the shard part (empty when ARGV[3] is '0').

local function backlog(domains_key, prefix)
  local out = {}
  for _, domain in ipairs(redis.call('SMEMBERS', domains_key)) do
    local queue = prefix .. domain
    local n = redis.call('ZCARD', queue)
    if n > 0 then
      local head = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
      local tail = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
      out[#out + 1] = domain
      out[#out + 1] = n
      out[#out + 1] = head[2]
      out[#out + 1] = tail[2]
    end
  end
  return out
end

local parts = ARGV[3] == '1'
local stride = parts and 3 or 2
local result = {}
for i = 4, #ARGV do
  local k = (i - 4) * stride
  local member = ARGV[i] .. ':'
  local counters = {}
  if parts then
    counters = redis.call('HMGET', KEYS[k + 3], 'inflight', 'crawled', 'failed')
  end
  result[#result + 1] = {backlog(KEYS[k + 1], ARGV[1] .. member), backlog(KEYS[k + 2], ARGV[2] .. member), counters}
end
return result
