-- A crawl's page budget on a Redis Cluster (docs/contract.md §10.7), where no script can count
-- every shard's dupefilter: a counter in the crawl record of the entries its admits wrote.
-- Reserve before an admit (ARGV 2 > 0), give back what it did not use after (ARGV 2 < 0).
-- KEYS: 1 crawl record. ARGV: 1 the budget, 2 entries wanted (negative: given back), 3 record TTL (s).
-- Returns the entries granted (0 .. ARGV 2), or 0 when giving back.

local wanted = tonumber(ARGV[2])
if wanted <= 0 then
  if wanted < 0 then redis.call('HINCRBY', KEYS[1], 'admitted', wanted) end
  return 0
end
local used = tonumber(redis.call('HGET', KEYS[1], 'admitted') or '0')
local grant = math.max(0, math.min(wanted, tonumber(ARGV[1]) - used))
if grant > 0 then
  redis.call('HINCRBY', KEYS[1], 'admitted', grant)
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
end
return grant
