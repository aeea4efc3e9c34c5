-- lease_requeue.lua, only for a lease whose deadline has passed (its crawler died or hung).
-- KEYS and ARGV: see lib/requeue.lua. Returns 1 if moved, else 0.
--! include lib/lease.lua
--! include lib/requeue.lua

if not lease_expired(KEYS[1], ARGV[1]) then
  return 0
end
return requeue_lease()
