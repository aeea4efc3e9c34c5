-- Hand a lease back to the queue (graceful shutdown, or a retry), if it is still leased.
-- KEYS and ARGV: see lib/requeue.lua. Returns 1 if moved, 0 if the lease was already gone.
--! include lib/requeue.lua

return requeue_lease()
