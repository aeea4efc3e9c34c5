-- Declare a crawl complete (never one still recurring: its record has 'recurring', §19.6): it leaves the active set and its appid's crawl set, a 'complete'
-- entry carrying its counters is appended to the control stream, its record gets 'ended', the
-- counters (and 'ended_as' complete unless a stop or an expiry set it), and it joins the finished
-- crawls. Returns true if declared (false for a ref that does not parse: it only leaves the set).
--! include lib/unescape.lua

local function declare_complete(active, stream, finished, record_prefix, app_prefix, ref, crawled, failed, now)
  local record = record_prefix .. ref
  if redis.call('HEXISTS', record, 'recurring') == 1 then
    return false  -- a recrawling crawl (docs/contract.md §19.6) ends only by stop, expiry or until
  end
  local spider, appid, crawlid = string.match(ref, '^([^:]*):([^:]*):([^:]*)$')
  redis.call('SREM', active, ref)
  if not spider then
    return false
  end
  redis.call('SREM', app_prefix .. spider .. ':' .. appid, unescape(crawlid))
  local event = cjson.encode({spiderid = unescape(spider), appid = unescape(appid),
    crawlid = unescape(crawlid), total_crawled = crawled, total_failed = failed})
  redis.call('XADD', stream, '*', 'kind', 'complete', 'request', event)
  if redis.call('EXISTS', record) == 1 then
    redis.call('HSET', record, 'ended', now, 'crawled', crawled, 'failed', failed)
    redis.call('HSETNX', record, 'ended_as', 'complete')
  end
  redis.call('ZADD', finished, now, ref)
  return true
end
