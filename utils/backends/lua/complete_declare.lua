-- Declare one crawl complete on a Redis Cluster, after the caller found every shard of it idle
-- twice (utils/frontier/reader.py, FrontierReader.scan_complete): only if it is still active and
-- its push generation is the one read before those reads (no push since could have hidden work).
-- KEYS: 1 active crawls, 2 control stream, 3 finished crawls, 4 the crawl record (all in the
--       cluster-wide slot).
-- ARGV: 1 crawl ref, 2 push generation read first ('' for none), 3 crawled, 4 failed,
--       5 crawl record prefix, 6 app-crawls prefix, 7 record TTL (s).
-- Returns 1 if declared, else 0.
--! include lib/complete.lua

if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if (redis.call('HGET', KEYS[4], 'gen') or '') ~= ARGV[2] then
  return 0
end
local now = tonumber(redis.call('TIME')[1])
if not declare_complete(KEYS[1], KEYS[2], KEYS[3], ARGV[5], ARGV[6], ARGV[1], tonumber(ARGV[3]),
    tonumber(ARGV[4]), now) then
  return 0
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[7]))
redis.call('EXPIRE', KEYS[3], tonumber(ARGV[7]))
return 1
