-- The schedule state of one page before its visit (utils/frontier/recrawl.py PageState), read by
-- the crawler on its hot path's batcher (crawler/recrawl.py).
-- KEYS: 1 state bucket. ARGV: 1 the page's stored fingerprint.
-- Returns the packed state, or false for a page not scheduled yet.
return redis.call('HGET', KEYS[1], ARGV[1])
