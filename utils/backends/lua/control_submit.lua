-- Append a request to the control stream at most once per Kafka record.
-- KEYS: 1 origin marker, 2 control stream. ARGV: 1 marker TTL (s), 2 kind, 3 request (JSON).
-- Returns the entry id, or false when this record was appended before.

if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then
  return redis.call('XADD', KEYS[2], '*', 'kind', ARGV[2], 'request', ARGV[3])
end
return false
