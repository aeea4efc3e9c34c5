-- Per-crawl content dedupe of the cleaners (docs/contract.md §13), for a batch of records.
-- KEYS: one cleaned_content key per record. ARGV: 1 TTL (s), then one origin per key.
-- A key is claimed by the first origin (record) that emits its content; that same origin, when
-- its record is delivered again (at least once), still counts as the first.
-- Returns one flag per key: 1 emit, 0 a duplicate.
local out = {}
local ttl = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  local origin = ARGV[i + 1]
  if redis.call('SET', key, origin, 'NX', 'EX', ttl) then
    out[i] = 1
  elseif redis.call('GET', key) == origin then
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
