-- Check a fetched page's lease and filter its links, in one step.
-- KEYS: 1 leases(spider) of the page's shard, 2 crawl stopped marker of that shard, 3 the crawl's
--       dupefilter in that shard, 4.. the crawl's dupefilters in other shards and page-cap sets.
-- ARGV: 1 leased member ('' on a Redis Cluster for the links of another shard than the page's:
--       no lease check, no entry for the page), 2 lease (us), 3 filter TTL (ms), 4 page
--       fingerprint (12 bytes; 16 with the 4 bytes that own the links it queues, when that is
--       not the fingerprint's first 4: a recrawl's revisit, crawler/recrawl.py), 5 page cap-set index into KEYS (0 = none), 6 the crawl's page budget
--       (max_pages; 0 = none), 7 D: KEYS[3 .. 2 + D] are the dupefilters the budget counts (every
--       shard's when there is a budget), or -1 on a Redis Cluster: ARGV 6 is then how many new
--       entries this call may write (reserved by crawl_budget.lua) and the reply ends with how
--       many it wrote; 8 DUPEFILTER_BLOOM_ABOVE (0 = never), 9 which KEYS are the Bloom filters
--       (lib/bloom.lua) of which dupefilters, and the compaction flags of their shard when this
--       crawler logs their fingerprints for compaction (FRONTIER_TAIL_URL set; else 0):
--       'f:b:w,f:b:w,...' (every dupefilter's when 8 is not 0);
--       10 TTL (ms) of the page's records of the links it added to a Bloom filter
--       ('<filter>:p:<ARGV 4 in hex>', Keys.dupefilter_bloom_page; lease_ack.lua deletes them);
--       then per link: fingerprint, index into KEYS of the dupefilter of the link's shard,
--       cap-set index (0 = none), cap.
-- Returns {verdict, admitted flags...}: verdict 1 = lease ours and renewed, links checked;
-- a flag is 1 (queue it), 2 (queue it: it is in the page's record of a Bloom filter, which the
-- page's ack deletes) or 0;
-- 2 = crawl stopped, lease taken after the stop (a resubmitted seed: emit, queue no links);
-- 3 = crawl stopped while in flight (drop); 0 = lease lost (drop, do not ack).
--! include lib/lease.lua
--! include lib/bloom.lua

local page = string.sub(ARGV[4], 1, 12)
-- a dupefilter value names the page that queued the link by the first 4 bytes of its fingerprint
-- (crawler/admit.py: a clash only lets one page queue again a link another page queued); a
-- revisit owns its new links by a value of its own, so it queues again none its page queued before
local owner = string.sub(page, 1, 4)
if #ARGV[4] == 16 then owner = string.sub(ARGV[4], 13, 16) end
local ttl = tonumber(ARGV[3])
local record_ttl = tonumber(ARGV[10])
local budget = tonumber(ARGV[6])
local reserved = tonumber(ARGV[7]) < 0
local used = 0
-- A dupefilter holding 'threshold' entries is frozen: still read first, its crawl's new
-- fingerprints go to its Bloom filter, which answers for those it holds (bloom_hits).
local threshold = tonumber(ARGV[8])
local bloom_of, blooms, sizes, wanted_of = {}, {}, {}, {}
-- The filter keeps no owner: while the page is in flight, the fingerprints it added to a filter
-- are kept in a record of its own beside it (the same hash tag), so that the page, refetched after
-- its crawler died between this admit and its ack, queues them again as a dupefilter entry naming
-- it would. Its ack deletes the record (lease_ack.lua); its TTL bounds an orphan.
local page_hex = (string.gsub(ARGV[4], '.', function(c) return string.format('%02x', string.byte(c)) end))
local function record(filter) return KEYS[bloom_of[filter]] .. ':p:' .. page_hex end
local MINE = {}  -- seen[i] of a link the filter holds because this page added it
local recorded = {}  -- filter -> true: its record was read or written by this call
for f, b, w in string.gmatch(ARGV[9], '(%d+):(%d+):(%d+)') do
  bloom_of[tonumber(f)] = tonumber(b)
  if w ~= '0' then wanted_of[tonumber(f)] = KEYS[tonumber(w)] end
end
local function bloom(filter)  -- the filter of KEYS[filter]'s dupefilter, false when it has none
  if blooms[filter] == nil then blooms[filter] = bloom_of[filter] and bloom_open(KEYS[bloom_of[filter]]) or false end
  return blooms[filter]
end
local function frozen(filter)  -- new fingerprints of this dupefilter go to its Bloom filter
  if not bloom_of[filter] then return false end
  if bloom(filter) then return true end
  if not sizes[filter] then sizes[filter] = redis.call('HLEN', KEYS[filter]) end
  return sizes[filter] >= threshold
end
local function bloom_new(filter, fps)
  local b = bloom(filter)
  if not b then
    b = bloom_create(KEYS[bloom_of[filter]], threshold, wanted_of[filter] ~= nil)
    blooms[filter] = b
  end
  bloom_add(b, fps)
end
if ARGV[1] ~= '' then
  local alive = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if redis.call('EXISTS', KEYS[2]) == 1 then
    if alive then return {2} end
    return {3}
  end
  if not alive then return {0} end
  renew_lease(KEYS[1], ARGV[1], ARGV[2])
  if frozen(3) then
    if redis.call('HEXISTS', KEYS[3], page) == 0 and not bloom_contains(bloom(3) or {layers = 0}, {page})[page] then
      bloom_new(3, {page})
      if reserved then used = 1 end
    end
  elseif redis.call('HSETNX', KEYS[3], page, owner) == 1 then
    if sizes[3] then sizes[3] = sizes[3] + 1 end
    if reserved then used = 1 end
  end
  local own = tonumber(ARGV[5])
  if own > 0 then redis.call('SADD', KEYS[own], page) end
end
local out = {1}
-- Requests of the crawl admitted so far: every fingerprint of its dupefilter (pages fetched and
-- links queued), so a crawl's budget holds across processes and refetches count once. (On a
-- cluster the crawl's counter does that: this call may write 'budget' new entries.)
if budget > 0 and not reserved then
  for k = 3, 2 + tonumber(ARGV[7]) do
    used = used + redis.call('HLEN', KEYS[k])
    if bloom(k) then used = used + bloom(k).count end
  end
end
-- Every link is read with one HMGET per dupefilter (in chunks that unpack takes), then decided in
-- the order the page gave them (a budget admits the first ones), and the new entries written with
-- one HSET per dupefilter: two commands per dupefilter instead of one or two per link. Only a
-- link new to the crawl under a page cap costs commands of its own (the cap's set).
local order, groups = {}, {}
for i = 11, #ARGV, 4 do
  if ARGV[i] ~= page then
    local filter = ARGV[i + 1]
    local group = groups[filter]
    if not group then
      group = {}
      groups[filter] = group
      order[#order + 1] = filter
    end
    group[#group + 1] = i
  end
end
local seen = {}
for _, filter in ipairs(order) do
  local group, key = groups[filter], KEYS[tonumber(filter)]
  for first = 1, #group, 500 do
    local last = math.min(first + 499, #group)
    local fields = {}
    for j = first, last do fields[#fields + 1] = ARGV[group[j]] end
    local values = redis.call('HMGET', key, unpack(fields))
    for j = first, last do seen[group[j]] = values[j - first + 1] end
  end
  local b = bloom(tonumber(filter))
  if b then  -- the links the frozen dupefilter has not seen, in its Bloom filter
    local unseen = {}
    for _, i in ipairs(group) do
      if not seen[i] then unseen[#unseen + 1] = ARGV[i] end
    end
    local found = bloom_contains(b, unseen)
    local hits = {}
    for _, i in ipairs(group) do
      if not seen[i] and found[ARGV[i]] then
        seen[i] = true
        hits[#hits + 1] = i
      end
    end
    local mine = #hits > 0 and record(tonumber(filter))
    if mine and redis.call('EXISTS', mine) == 1 then  -- of those, the ones this page added before
      recorded[tonumber(filter)] = true
      for first = 1, #hits, 500 do
        local last = math.min(first + 499, #hits)
        local fields = {}
        for j = first, last do fields[#fields + 1] = ARGV[hits[j]] end
        local held = redis.call('SMISMEMBER', mine, unpack(fields))
        for j = first, last do
          if held[j - first + 1] == 1 then seen[hits[j]] = MINE end
        end
      end
    end
  end
end
local new, written, to_bloom = {}, {}, {}
for i = 11, #ARGV, 4 do
  local fp = ARGV[i]
  local ok, in_record = false, false
  if fp ~= page then
    local filter = ARGV[i + 1]
    local value = seen[i]
    if not value and written[filter .. ':' .. fp] then value = owner end  -- twice on one page
    if value == MINE then  -- the filter holds it because this page added it: queued again
      ok, in_record = true, true
    elseif value == true then  -- the Bloom filter's "seen", for another page
      ok = false
      local b = bloom(tonumber(filter))
      b.hits = b.hits + 1
    elseif value then
      ok = value == owner
    else
      local idx = tonumber(ARGV[i + 2])
      ok = (budget == 0 and not reserved) or used < budget
      if ok and idx > 0 and redis.call('SISMEMBER', KEYS[idx], fp) == 0 then
        ok = redis.call('SCARD', KEYS[idx]) < tonumber(ARGV[i + 3])
      end
      if ok and frozen(tonumber(filter)) then
        local fps = to_bloom[filter] or {}
        to_bloom[filter] = fps
        fps[#fps + 1] = fp
        written[filter .. ':' .. fp] = true
        in_record = true
        used = used + 1
        if idx > 0 then redis.call('SADD', KEYS[idx], fp) end
      elseif ok then
        local entries = new[filter]
        if not entries then
          entries = {}
          new[filter] = entries
        end
        entries[#entries + 1] = fp
        entries[#entries + 1] = owner
        written[filter .. ':' .. fp] = true
        local f = tonumber(filter)
        if bloom_of[f] then sizes[f] = sizes[f] + 1 end
        used = used + 1
        if idx > 0 then redis.call('SADD', KEYS[idx], fp) end
      end
    end
  end
  out[#out + 1] = ok and (in_record and 2 or 1) or 0
end
for _, filter in ipairs(order) do
  local entries = new[filter]
  if entries then
    for first = 1, #entries, 1000 do
      redis.call('HSET', KEYS[tonumber(filter)], unpack(entries, first, math.min(first + 999, #entries)))
    end
  end
end
for _, filter in ipairs(order) do
  local fps = to_bloom[filter]
  if fps then
    bloom_new(tonumber(filter), fps)
    for first = 1, #fps, 1000 do
      redis.call('SADD', record(tonumber(filter)), unpack(fps, first, math.min(first + 999, #fps)))
    end
    recorded[tonumber(filter)] = true
  end
end
for filter in pairs(recorded) do redis.call('PEXPIRE', record(filter), record_ttl) end
for k = 3, #KEYS do redis.call('PEXPIRE', KEYS[k], ttl) end
for filter in pairs(bloom_of) do
  if bloom(filter) then bloom_close(bloom(filter), ttl, wanted_of[filter]) end
end
if reserved then out[#out + 1] = used end
return out
