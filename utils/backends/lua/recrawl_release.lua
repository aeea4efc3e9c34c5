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
-- Returns {more, spider, render ('1' or '0'), pages released, ...}: more is 1 when the limit was
-- reached (more pages may be due: the caller calls again), 0 otherwise; then a triple per lane
-- that got pages.
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
    local bucket_keys, moves = {}, {}
    local state_prefix, slot_prefix = ARGV[3] .. ref .. ':', ARGV[5] .. ref .. ':'
    local starts = redis.call('ZRANGEBYSCORE', slots_key, '-inf', now, 'LIMIT', 0, 64)
    for _, start in ipairs(starts) do
      if budget <= 0 then break end
      local slot = slot_prefix .. start
      local entries = redis.call('LPOP', slot, budget)
      if not entries then entries = {} end
      budget = budget - #entries
      if redis.call('LLEN', slot) == 0 then
        redis.call('ZREM', slots_key, start)
      end
      for _, entry in ipairs(entries) do
        local t1, t2, a, b, c, d = string.byte(entry, 1, 6)
        local fp = string.sub(entry, 3, 10)
        local number = (((a * 256 + b) * 256 + c) * 256 + d) % buckets
        local bucket = bucket_keys[number]
        if not bucket then
          bucket = state_prefix .. number
          bucket_keys[number] = bucket
        end
        local state = redis.call('HGET', bucket, fp)
        if state then
          local due = u32(state, 1)
          local flags = string.byte(state, 27)
          if due % 65536 == t1 * 256 + t2 and flags < 128 then
            if due > now then  -- from a wide slot, not due yet: to its finer slot (grouped below)
              local finer = slot_of(due, now)
              local moved = moves[finer]
              if not moved then
                moved = {}
                moves[finer] = moved
              end
              moved[#moved + 1] = entry
            else
              redis.call('HSET', bucket, fp, string.sub(state, 1, 26) .. string.char(flags + 128) .. string.sub(state, 28))
              due_pages[#due_pages + 1] = entry
            end
          end
        end
      end
    end
    for finer, moved in pairs(moves) do
      for first = 1, #moved, 1000 do
        redis.call('RPUSH', slot_prefix .. finer, unpack(moved, first, math.min(#moved, first + 999)))
      end
      redis.call('ZADD', slots_key, finer, finer)
    end
    -- queue the due pages as a push would: grouped per queue, domain and lane (one ZADD per
    -- queue, one per domain queue, one SADD and one ZADD NX of all the domains per lane)
    local n = #due_pages
    if n > 0 then
      local seq = redis.call('INCRBY', KEYS[2], n) - n
      local crawl = appid .. ':' .. crawlid
      local queues, best, lanes = {}, {}, {}
      local rendered = 0
      local lane_of = {[0] = {}, [1] = {}}  -- lane flag -> domain -> {cq, dq}
      for i, entry in ipairs(due_pages) do
        local hi, lo, flag, size = string.byte(entry, 11, 14)
        local priority = hi * 256 + lo
        if priority >= 32768 then priority = priority - 65536 end
        local domain = string.sub(entry, 15, 14 + size)
        local of_lane = lane_of[flag] or lane_of[0]
        local names = of_lane[domain]
        if not names then
          local lane = ''
          if flag == 1 then lane = render_lane end
          names = {head .. 'cq' .. lane .. ':' .. spider .. ':' .. crawl .. ':' .. domain,
                   head .. 'dq' .. lane .. ':' .. spider .. ':' .. domain}
          of_lane[domain] = names
          queues[names[1]] = {}
          local seen = lanes[lane]
          if not seen then
            seen = {}
            lanes[lane] = seen
          end
          seen[#seen + 1] = domain
        end
        local score = -priority * SEQ_SPAN + (seq + i) % SEQ_SPAN
        local members = queues[names[1]]
        members[#members + 1] = string.format('%d', score)
        members[#members + 1] = string.sub(entry, 15 + size)
        local dq = names[2]
        if not best[dq] or score < best[dq] then best[dq] = score end
        if flag == 1 then rendered = rendered + 1 end
      end
      for cq, members in pairs(queues) do
        for first = 1, #members, 1000 do
          redis.call('ZADD', cq, 'NX', unpack(members, first, math.min(#members, first + 999)))
        end
      end
      for dq, score in pairs(best) do
        redis.call('ZADD', dq, 'LT', string.format('%d', score), crawl)
      end
      for lane, domains in pairs(lanes) do
        local scored = {}
        for i, domain in ipairs(domains) do
          scored[2 * i - 1] = 0
          scored[2 * i] = domain
        end
        for first = 1, #domains, 1000 do
          local last = math.min(#domains, first + 999)
          redis.call('ZADD', head .. 'domains' .. lane .. ':' .. spider, 'NX', unpack(scored, 2 * first - 1, 2 * last))
          redis.call('SADD', head .. 'crawl-domains' .. lane .. ':' .. ref, unpack(domains, first, last))
        end
      end
      redis.call('HINCRBY', part, 'rc-released', n)
      if n > rendered then
        local name = spider .. '\n0'
        released[name] = (released[name] or 0) + n - rendered
      end
      if rendered > 0 then
        local name = spider .. '\n1'
        released[name] = (released[name] or 0) + rendered
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
local out = {budget <= 0 and 1 or 0}
for name, count in pairs(released) do
  local spider, lane = string.match(name, '^(.*)\n(.)$')
  out[#out + 1] = spider
  out[#out + 1] = lane
  out[#out + 1] = count
end
return out
