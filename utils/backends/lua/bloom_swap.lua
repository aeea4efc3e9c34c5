-- Make a compacted base the Bloom filter's (utils/frontier/bloom_compactor.py): the redis-monitor
-- wrote generation ARGV 2's pieces holding every fingerprint logged up to byte ARGV 4 of the log
-- (the chunks sealed before, up to ARGV 3, and the log's first ARGV 4 bytes); this adds the ones
-- logged since, then drops the old base and the layers.
-- KEYS: 1 the filter's state (Keys.dupefilter_bloom), 2 its log (Keys.dupefilter_bloom_log).
-- ARGV: 1 the base generation it replaces (0 = none), 2 the new one, 3 the chunks sealed when the
--       log was read, 4 the log's bytes already in the new base, 5 the pieces' bytes ('n,n,...'),
--       6 the base's capacity, 7 and 8 the layers' exp and first k from now on, 9 the count at
--       which the next compaction is asked for, 10 the chunks now in one consolidated object
--       ('' = unchanged).
-- Returns {1, fingerprints added here} or {0, why}: the filter no longer logs or is gone, another
-- swap or seal came first, the log lost bytes, the new base holds more than its capacity (the
-- filter grew too fast while it was built: built again for the new count), a piece is missing
-- (expired before its swap).
--! include lib/bloom.lua

local f = redis.call('HMGET', KEYS[1], 'log', 'gen', 'sealed', 'count', 'layers', 'pieces', 'sealedfps')
if f[1] ~= '1' then return {0, 'not logging'} end
local old = tonumber(f[2]) or 0
if old ~= tonumber(ARGV[1]) then return {0, 'generation'} end
if (tonumber(f[3]) or 0) ~= tonumber(ARGV[3]) then return {0, 'sealed'} end
local at, length = tonumber(ARGV[4]), redis.call('STRLEN', KEYS[2])
local count = tonumber(f[4])
if length < at or count ~= (tonumber(f[7]) or 0) + length / 12 then return {0, 'log'} end
-- the fingerprints whose bits the new base holds: those it was built from and caught up with
local based = (tonumber(f[7]) or 0) + at / 12
-- more than it was sized for, or too many to add here in one step: built again for the new count
if based > tonumber(ARGV[6]) or (length - at) / 12 > 50000 then return {0, 'grown'} end
local probe = {key = KEYS[1], gen = tonumber(ARGV[2])}
bloom_pieces(probe, ARGV[5])
for _, piece in ipairs(probe.pieces) do
  if redis.call('EXISTS', piece.key) == 0 then return {0, 'piece'} end
end
if old > 0 then
  local n = 0
  for _ in string.gmatch(f[6], '%d+') do
    redis.call('UNLINK', KEYS[1] .. ':g' .. old .. ':' .. n)
    n = n + 1
  end
end
for layer = 0, (tonumber(f[5]) or 0) - 1 do redis.call('UNLINK', KEYS[1] .. ':' .. layer) end
redis.call('HSET', KEYS[1], 'gen', ARGV[2], 'pieces', ARGV[5], 'bcap', ARGV[6], 'bfill', based,
  'layers', 0, 'exp', ARGV[7], 'k0', ARGV[8], 'next', ARGV[9])
if ARGV[10] ~= '' then redis.call('HSET', KEYS[1], 'cons', ARGV[10]) end
-- the ones logged since: into the base while it has room, then into layers, as an admit adds them
-- (already counted: only where they went is written)
local b = bloom_open(KEYS[1])
local fps = {}
if length > at then
  local data = redis.call('GETRANGE', KEYS[2], at, length - 1)
  for i = 1, #data, 12 do fps[#fps + 1] = string.sub(data, i, i + 11) end
  bloom_add(b, fps)
  redis.call('HSET', KEYS[1], 'bfill', b.bfill)
end
local ttl = redis.call('PTTL', KEYS[1])
local names = {}
for _, piece in ipairs(b.pieces) do names[#names + 1] = piece.key end
for layer = 0, b.layers - 1 do names[#names + 1] = KEYS[1] .. ':' .. layer end
for _, name in ipairs(names) do
  if ttl > 0 then redis.call('PEXPIRE', name, ttl) else redis.call('PERSIST', name) end
end
return {1, #fps}
