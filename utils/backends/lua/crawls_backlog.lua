-- Several crawls' queued requests per domain in one shard, O(domains), never O(backlog), and, with
-- shards, each crawl's counters in that shard.
-- KEYS: per crawl: its plain crawl domains, its rendering crawl domains and, when ARGV[3] is '1',
--   its shard part.
-- ARGV: 1 plain crawl queue prefix, 2 rendering crawl queue prefix (each completed with crawl
--   member + ':' + domain), 3 '1' to read the shard parts, '0' not to, 4 and 5: the tail queue
--   prefixes of both lanes (requests in tail segments count as queued; the worst score of a
--   queue with a tail is its tail's last segment's best); 6.. each crawl's member.
-- Returns per crawl {plain, rendering, counters}: plain and rendering are {domain, queued, best
-- score, worst score, ...} for each domain with queued requests; counters {inflight, crawled,
-- failed} of the shard part (empty when ARGV[3] is '0').

--! include lib/tails.lua

local function backlog(domains_key, prefix, tail_prefix)
  local out = {}
  for _, domain in ipairs(redis.call('SMEMBERS', domains_key)) do
    local queue = prefix .. domain
    local n = redis.call('ZCARD', queue)
    local tq = tail_prefix .. domain
    local in_tail = tail_size(tq)
    if n + in_tail > 0 then
      local head = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
      local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
      local first_seg = redis.call('ZRANGE', tq, 0, 0, 'WITHSCORES')
      local last_seg = redis.call('ZRANGE', tq, -1, -1, 'WITHSCORES')
      local best, worst = head[2], last[2]
      if #first_seg > 0 and (not best or tonumber(first_seg[2]) < tonumber(best)) then best = first_seg[2] end
      if #last_seg > 0 and (not worst or tonumber(last_seg[2]) > tonumber(worst)) then worst = last_seg[2] end
      out[#out + 1] = domain
      out[#out + 1] = n + in_tail
      out[#out + 1] = best
      out[#out + 1] = worst
    end
  end
  return out
end

local parts = ARGV[3] == '1'
local stride = parts and 3 or 2
local result = {}
for i = 6, #ARGV do
  local k = (i - 6) * stride
  local member = ARGV[i] .. ':'
  local counters = {}
  if parts then
    counters = redis.call('HMGET', KEYS[k + 3], 'inflight', 'crawled', 'failed')
  end
  result[#result + 1] = {backlog(KEYS[k + 1], ARGV[1] .. member, ARGV[4] .. member),
    backlog(KEYS[k + 2], ARGV[2] .. member, ARGV[5] .. member), counters}
end
return result
