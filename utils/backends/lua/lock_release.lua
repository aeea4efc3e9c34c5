-- Release a lock this holder took with SET NX (its token as the value): delete it only if it is
-- still ours (it may have lapsed and been taken by another since).
-- KEYS: 1 the lock. ARGV: 1 the holder's token.
-- Returns 1 if released, 0 if it was not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
