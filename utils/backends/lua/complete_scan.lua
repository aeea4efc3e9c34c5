-- Find completed crawls among some of the active ones, and report each once.
-- KEYS: 1 active crawls, 2 control stream, 3 finished crawls.
-- ARGV: 1 SSCAN cursor, 2 SSCAN count, 3 crawl record prefix, 4 app-crawls prefix (each completed
--       with a crawl ref), 5 record TTL (s), then per frontier shard four prefixes completed with a
--       crawl ref: crawl-domains, crawl-domains of the rendering lane, crawl-leases, the shard's
--       part of the crawl record (the record itself with one shard).
-- A crawl is complete when no shard has a domain with queued requests (in either lane), a lease or
-- an in-flight count;
-- it is then declared complete (lib/complete.lua) with its counters summed over the shards, and
-- finished crawls older than the record TTL are trimmed. Returns {next cursor, number of crawls found complete}.
--! include lib/complete.lua

local shards = {}
for i = 6, #ARGV, 4 do
  shards[#shards + 1] = {ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]}
end
local scan = redis.call('SSCAN', KEYS[1], ARGV[1], 'COUNT', tonumber(ARGV[2]))
local found = 0
local now = tonumber(redis.call('TIME')[1])
for _, ref in ipairs(scan[2]) do
  local busy = false
  local crawled, failed = 0, 0
  for _, shard in ipairs(shards) do
    if redis.call('SCARD', shard[1] .. ref) > 0 or redis.call('SCARD', shard[2] .. ref) > 0
        or redis.call('SCARD', shard[3] .. ref) > 0 then
      busy = true
      break
    end
    local part = redis.call('HMGET', shard[4] .. ref, 'inflight', 'crawled', 'failed')
    if tonumber(part[1] or '0') > 0 then
      busy = true
      break
    end
    crawled = crawled + tonumber(part[2] or '0')
    failed = failed + tonumber(part[3] or '0')
  end
  if not busy and declare_complete(KEYS[1], KEYS[2], KEYS[3], ARGV[3], ARGV[4], ref, crawled, failed, now) then
    found = found + 1
  end
end
if found > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[5]))
  redis.call('EXPIRE', KEYS[3], tonumber(ARGV[5]))  -- an idle cluster forgets it with its last record
end
return {scan[1], found}
