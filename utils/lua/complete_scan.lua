-- Find completed crawls among some of the active ones, and report each once.
-- KEYS: 1 active crawls, 2 control stream, 3 finished crawls.
-- ARGV: 1 SSCAN cursor, 2 SSCAN count, 3 crawl-domains prefix, 4 crawl-leases prefix, 5 crawl
--       record prefix, 6 app-crawls prefix (each completed with a crawl ref), 7 record TTL (s),
--       8 crawl-domains prefix of the rendering lane.
-- A crawl is complete when it has no domain with queued requests (in either lane), no lease and no
-- in-flight count;
-- it then leaves the active set and its appid's crawl set, and a 'complete' entry carrying its
-- counters is appended to the stream; its record gets 'ended' (and 'ended_as' complete unless a stop
-- or an expiry set it) and it joins the finished crawls, whose entries older than the record TTL
-- are trimmed. Returns {next cursor, number of crawls found complete}.
--! include lib/unescape.lua

local scan = redis.call('SSCAN', KEYS[1], ARGV[1], 'COUNT', tonumber(ARGV[2]))
local found = 0
local now = tonumber(redis.call('TIME')[1])
for _, ref in ipairs(scan[2]) do
  if redis.call('SCARD', ARGV[3] .. ref) == 0 and redis.call('SCARD', ARGV[4] .. ref) == 0
      and redis.call('SCARD', ARGV[8] .. ref) == 0 then
    local record = redis.call('HMGET', ARGV[5] .. ref, 'inflight', 'crawled', 'failed')
    if tonumber(record[1] or '0') <= 0 then
      local spider, appid, crawlid = string.match(ref, '^([^:]*):([^:]*):([^:]*)$')
      redis.call('SREM', KEYS[1], ref)
      if spider then
        redis.call('SREM', ARGV[6] .. spider .. ':' .. appid, unescape(crawlid))
        local event = cjson.encode({spiderid = unescape(spider), appid = unescape(appid),
          crawlid = unescape(crawlid), total_crawled = tonumber(record[2] or '0'),
          total_failed = tonumber(record[3] or '0')})
        redis.call('XADD', KEYS[2], '*', 'kind', 'complete', 'request', event)
        if redis.call('EXISTS', ARGV[5] .. ref) == 1 then
          redis.call('HSET', ARGV[5] .. ref, 'ended', now)
          redis.call('HSETNX', ARGV[5] .. ref, 'ended_as', 'complete')
        end
        redis.call('ZADD', KEYS[3], now, ref)
        found = found + 1
      end
    end
  end
end
if found > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[7]))
  redis.call('EXPIRE', KEYS[3], tonumber(ARGV[7]))  -- an idle cluster forgets it with its last record
end
return {scan[1], found}
