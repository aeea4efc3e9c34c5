-- The queued requests of one crawl per domain, O(domains), never O(backlog).
-- KEYS: 1 crawl domains. ARGV: 1 crawl queue prefix + crawl member + ':'.
-- Returns {domain, queued, best score, worst score, ...} for each domain with queued requests.

local out = {}
for _, domain in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local queue = ARGV[1] .. domain
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
