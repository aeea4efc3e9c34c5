-- Merge what a response changed into its sticky session's cookie jar (docs/contract.md §21.2;
-- crawler/cookies.py decides it with cookie-jar rules), unless the session changed meanwhile
-- (another proxy, or none: it was dropped after a ban). Expired cookies are dropped; a jar holds
-- at most 64 cookies (new ones past that are not kept).
-- KEYS: 1 proxy_session(crawl, scope).
-- ARGV: 1 the proxy id the response came through, 2 JSON {key: record} of the cookies set
--       (record = [value, domain, domain given, path, secure, expires (epoch s) or null, port]),
--       3 JSON [key, …] of the cookies deleted.
-- Returns 1 when the jar was updated, else 0.
--! include lib/time.lua
if redis.call('HGET', KEYS[1], 'proxy') ~= ARGV[1] then
  return 0
end
local now = now_us() / 1000000
local jar = {}
local raw = redis.call('HGET', KEYS[1], 'cookies')
if raw and raw ~= '' then
  local ok, decoded = pcall(cjson.decode, raw)
  if ok and type(decoded) == 'table' then jar = decoded end
end
for _, key in ipairs(cjson.decode(ARGV[3])) do
  jar[key] = nil
end
local kept = {}
local n = 0
for key, record in pairs(jar) do
  local expires = type(record) == 'table' and record[6] or nil
  if type(record) == 'table' and (type(expires) ~= 'number' or expires > now) then
    kept[key] = record
    n = n + 1
  end
end
for key, record in pairs(cjson.decode(ARGV[2])) do
  if kept[key] ~= nil then
    kept[key] = record
  elseif n < 64 then
    kept[key] = record
    n = n + 1
  end
end
redis.call('HSET', KEYS[1], 'cookies', cjson.encode(kept))
return 1
