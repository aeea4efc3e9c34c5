-- Store an answer for GET /poll, unless a REST instance waits for it or another instance already
-- stored this Kafka record.
-- KEYS: 1 poll_waiter(uuid), 2 poll_origin(record), 3 poll_result(uuid). ARGV: 1 message, 2 TTL (ms).
-- Returns 1 if stored, else 0.

if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then return 0 end
redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
return 1
