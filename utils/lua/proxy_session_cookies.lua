-- Add a response's cookies to its sticky session's jar (docs/contract.md §21.2), unless the session
-- changed meanwhile (another proxy, or none: it was dropped after a ban).
-- KEYS: 1 proxy_session(crawl, domain).
-- ARGV: 1 the proxy id the response came through, 2 JSON {name: value} of its Set-Cookie values.
-- Returns 1 when the jar was updated, else 0.
if redis.call('HGET', KEYS[1], 'proxy') ~= ARGV[1] then
  return 0
end
local jar = {}
local raw = redis.call('HGET', KEYS[1], 'cookies')
if raw and raw ~= '' then
  jar = cjson.decode(raw)
end
local n = 0
for _ in pairs(jar) do n = n + 1 end
for name, value in pairs(cjson.decode(ARGV[2])) do
  if jar[name] == nil then n = n + 1 end
  if n <= 64 then jar[name] = value end
end
redis.call('HSET', KEYS[1], 'cookies', cjson.encode(jar))
return 1
