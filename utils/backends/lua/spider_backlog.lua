-- The queued requests of one spider type per domain: the ZCARDs of each domain's crawl queues,
-- O(domains x crawls per domain), never O(backlog).
-- KEYS: 1 domains(spider). ARGV: 1 domain-crawls prefix, 2 crawl-queue prefix (+ crawl member +
-- ':' + domain), 3 tail-queue prefix (the same; requests in tail segments count).
-- Returns {domain, backlog, ...} of every domain with queued requests.
--! include lib/tails.lua

local out = {}
for _, domain in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local total = 0
  for _, crawl in ipairs(redis.call('ZRANGE', ARGV[1] .. domain, 0, -1)) do
    total = total + redis.call('ZCARD', ARGV[2] .. crawl .. ':' .. domain) + tail_size(ARGV[3] .. crawl .. ':' .. domain)
  end
  if total > 0 then
    out[#out + 1] = domain
    out[#out + 1] = total
  end
end
return out
