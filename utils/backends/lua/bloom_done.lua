-- A redis-monitor's compactor is done with a Bloom filter (utils/frontier/bloom_compactor.py):
-- drop its flag, unless the filter asks for more work now (an admit meanwhile grew its log or its
-- count: that admit's own flag was the one being worked on, so it raised none).
-- KEYS: 1 the shard's compaction flags (Keys.bloom_wanted), 2 the filter's state
--       (Keys.dupefilter_bloom).
-- Returns 1 if the flag stays (due now), 0 if it was dropped.
--! include lib/bloom.lua

local b = bloom_open(KEYS[2])
if b and b.log == '1' and bloom_wants(b, redis.call('STRLEN', KEYS[2] .. ':log')) then
  redis.call('ZADD', KEYS[1], 0, KEYS[2])
  return 1
end
redis.call('ZREM', KEYS[1], KEYS[2])
return 0
