-- Drop from a Bloom filter's log the fingerprints a redis-monitor has just written to the tail
-- store as chunk ARGV 1 (utils/frontier/bloom_compactor.py), if nothing changed meanwhile.
-- KEYS: 1 the filter's state (Keys.dupefilter_bloom), 2 its log (Keys.dupefilter_bloom_log).
-- ARGV: 1 the chunk's number (the state's 'sealed' when the log was read), 2 its bytes (the log's
--       first ones, 12 a fingerprint).
-- Returns 1 if sealed ('sealed' + 1, 'sealedfps' + its fingerprints, the log without them), 0 if
-- the filter stopped logging, another seal came first, or the log is shorter (deleted).
local f = redis.call('HMGET', KEYS[1], 'log', 'sealed')
if f[1] ~= '1' or (tonumber(f[2]) or 0) ~= tonumber(ARGV[1]) then return 0 end
local n = tonumber(ARGV[2])
local length = redis.call('STRLEN', KEYS[2])
if length < n or n % 12 ~= 0 then return 0 end
if length == n then
  redis.call('DEL', KEYS[2])
else
  local ttl = redis.call('PTTL', KEYS[2])
  redis.call('SET', KEYS[2], redis.call('GETRANGE', KEYS[2], n, -1))
  if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
end
redis.call('HINCRBY', KEYS[1], 'sealed', 1)
redis.call('HINCRBY', KEYS[1], 'sealedfps', n / 12)
return 1
