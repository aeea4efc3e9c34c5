-- Add a crawler's counted proxy outcomes (docs/contract.md §21.6).
-- KEYS: 1 proxy_stats.
-- ARGV: field, count, field, count… (field = '<pool>|<host:port>|<outcome>').
for i = 1, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], tonumber(ARGV[i + 1]))
end
return #ARGV / 2
