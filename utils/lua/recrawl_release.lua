-- Release the due pages of one frontier shard into the frontier (docs/contract.md §19.2), oldest
-- slots first, at most ARGV[1] slot entries per call (utils/frontier/recrawl.py Schedule.release).
-- KEYS: 1 the shard's due index (recrawl_due), 2 the shard's queue sequence.
-- ARGV: 1 limit, 2 state buckets per shard, 3 state prefix, 4 slots prefix, 5 slot prefix (each
--       completed with a crawl ref), 6 the shard's key head, 7 the rendering lane's suffix.
-- A slot entry is packed as utils/frontier/recrawl.py SlotEntry: due time's low 16 bits (u16),
-- fingerprint (8 bytes), priority (i16), render (u8), domain length (u8), domain, queue member; a
-- state (PageState) starts with its next visit (u32) and has its flags at byte 27 (0x80: a visit
-- is on).
-- An entry whose page's state no longer names its due time, or whose page is being visited, is
-- stale (the page left, or was moved) and skipped; one not due yet (from a wide slot) goes to a
-- finer slot; a due one is queued as any request and its state marked visiting, so visits never
-- overlap.
-- Returns {spider, render ('1' or '0'), pages released, ...} per lane that got pages.
--! include lib/score.lua

local function u32(s, i)
  local a, b, c, d = string.byte(s, i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

local function slot_of(due, now)  -- the twin of utils/frontier/recrawl.py slot_start
  local width = 1
  while width * 64 <= due - now do
    width = width * 2
  end
  return due - due % width
end

local t = redis.call('TIME')
local now = tonumber(t[1])
local budget = tonumber(ARGV[1])
local buckets = tonumber(ARGV[2])
local head, render_lane = ARGV[6], ARGV[7]
local released = {}
local crawls = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 64)
for _, ref in ipairs(crawls) do
  if budget <= 0 then break end
  local spider, appid, crawlid = string.match(ref, '^([^:]*):([^:]*):([^:]*)$')
  local slots_key = ARGV[4] .. ref
  if not spider then
    redis.call('ZREM', KEYS[1], ref)
  else
    local part = head .. 'crawl:' .. ref
    local due_pages = {}
    local starts = redis.call('ZRANGEBYSCORE', slots_key, '-inf', now, 'LIMIT', 0, 64)
    for _, start in ipairs(starts) do
      if budget <= 0 then break end
      local slot = ARGV[5] .. ref .. ':' .. start
      local entries = redis.call('LPOP', slot, budget)
      if not entries then entries = {} end
      budget = budget - #entries
      if redis.call('LLEN', slot) == 0 then
        redis.call('ZREM', slots_key, start)
      end
      for _, entry in ipairs(entries) do
        local tag = string.byte(entry, 1) * 256 + string.byte(entry, 2)
        local fp = string.sub(entry, 3, 10)
        local bucket = ARGV[3] .. ref .. ':' .. (u32(fp, 1) % buckets)
        local state = redis.call('HGET', bucket, fp)
        local due = state and u32(state, 1) or 0
        if state and due % 65536 == tag and string.byte(state, 27) < 128 then
          if due > now then
            local finer = slot_of(due, now)
            redis.call('RPUSH', ARGV[5] .. ref .. ':' .. finer, entry)
            redis.call('ZADD', slots_key, finer, finer)
          else
            local flags = string.char(string.byte(state, 27) + 128)
            redis.call('HSET', bucket, fp, string.sub(state, 1, 26) .. flags .. string.sub(state, 28))
            due_pages[#due_pages + 1] = entry
          end
        end
      end
    end
    -- queue the due pages as a push would: grouped per queue, domain and lane
    local n = #due_pages
    if n > 0 then
      local seq = redis.call('INCRBY', KEYS[2], n) - n
      local crawl = appid .. ':' .. crawlid
      local queues, best, lanes = {}, {}, {}
      for i, entry in ipairs(due_pages) do
        local hi, lo = string.byte(entry, 11, 12)
        local priority = hi * 256 + lo
        if priority >= 32768 then priority = priority - 65536 end
        local lane = ''
        if string.byte(entry, 13) == 1 then lane = render_lane end
        local size = string.byte(entry, 14)
        local domain = string.sub(entry, 15, 14 + size)
        local score = queue_score(priority, seq + i)
        local cq = head .. 'cq' .. lane .. ':' .. spider .. ':' .. crawl .. ':' .. domain
        local members = queues[cq]
        if not members then
          members = {}
          queues[cq] = members
        end
        members[#members + 1] = score
        members[#members + 1] = string.sub(entry, 15 + size)
        local dq = head .. 'dq' .. lane .. ':' .. spider .. ':' .. domain
        if not best[dq] or tonumber(score) < tonumber(best[dq]) then best[dq] = score end
        local seen = lanes[lane]
        if not seen then
          seen = {}
          lanes[lane] = seen
        end
        seen[domain] = true
      end
      for cq, members in pairs(queues) do
        for first = 1, #members, 1000 do
          redis.call('ZADD', cq, 'NX', unpack(members, first, math.min(#members, first + 999)))
        end
      end
      for dq, score in pairs(best) do
        redis.call('ZADD', dq, 'LT', score, crawl)
      end
      for lane, domains in pairs(lanes) do
        for domain in pairs(domains) do
          redis.call('ZADD', head .. 'domains' .. lane .. ':' .. spider, 'NX', 0, domain)
          redis.call('SADD', head .. 'crawl-domains' .. lane .. ':' .. ref, domain)
        end
      end
      redis.call('HINCRBY', part, 'rc-released', n)
      for _, entry in ipairs(due_pages) do
        local name = spider .. '\n' .. (string.byte(entry, 13) == 1 and '1' or '0')
        released[name] = (released[name] or 0) + 1
      end
    end
    local first = redis.call('ZRANGE', slots_key, 0, 0, 'WITHSCORES')
    if #first == 0 then
      redis.call('ZREM', KEYS[1], ref)
    else
      redis.call('ZADD', KEYS[1], first[2], ref)
    end
  end
end
local out = {}
for name, count in pairs(released) do
  local spider, lane = string.match(name, '^(.*)\n(.)$')
  out[#out + 1] = spider
  out[#out + 1] = lane
  out[#out + 1] = count
end
return out
