-- A crawl's seen-set beyond DUPEFILTER_BLOOM_ABOVE (docs/contract.md §3.8): a Bloom filter in one
-- shard. utils/frontier/bloom.py has the same sizing and hashing in Python, and why.
-- Layers: layer i is a string of 2^(exp + i) - 16 bytes (at most 2^26 - 16: 16 bytes under a power
-- of two, so Redis allocates exactly 2^(exp + i) for it), set with k0 + i bits per fingerprint
-- (k0 = 11, or 15 past a base), sized so that full it answers a new fingerprint "seen" with
-- probability 2^-(k0 + i): at most 2^-(k0 - 1) over every layer. Layer i is '<state>:<i>'.
-- Base (a redis-monitor builds it from the filter's log: utils/frontier/bloom_compactor.py): one
-- bit array over the strings '<state>:g<gen>:<i>' of the sizes in 'pieces', 10 positions a
-- fingerprint, taking new fingerprints until it holds 'bcap'; the layers take the rest.
-- The state hash holds count, hits, exp, layers, k0, next (the count at which compaction is
-- asked for), log ('1' while every fingerprint added is also appended to '<state>:log'; 'lost'
-- once one was not), and the base's gen, pieces, bcap and bfill (fingerprints in it).

local BLOOM_FIRST_K, BLOOM_MIN_EXP, BLOOM_MAX_EXP, BLOOM_MAX_LAYERS = 11, 6, 26, 32
local BLOOM_LN2 = 0.6931471805599453
local BLOOM_BASE_K, BLOOM_BASE_TERM = 10, 64
-- The least count at which a filter's first compaction is asked for (below, its layer costs
-- a few tens of kilobytes at most).
local BLOOM_COMPACT_MIN = 10000
-- A filter's log asks to be sealed into the store at this many bytes, or a 256th of its count's
-- (so the part of it still in Redis costs under 0.05 bytes a URL), and stops (compaction off for
-- that filter: 'log' = 'lost') past BLOOM_LOG_MAX bytes (the store down for long).
local BLOOM_SEAL_MIN, BLOOM_LOG_MAX = 12 * 1024, 16 * 1024 * 1024

local function bloom_layer_bits(exp, layer)
  return (2 ^ math.min(exp + layer, BLOOM_MAX_EXP) - 16) * 8
end

-- Fingerprints layer 'layer' takes before the next one is made.
local function bloom_capacity(exp, layer, k0)
  return math.floor(bloom_layer_bits(exp, layer) * BLOOM_LN2 / ((k0 or BLOOM_FIRST_K) + layer))
end

-- Set b.pieces (each piece's key, size in bits and first bit) and b.bits (their sum) for base
-- generation b.gen of the byte sizes in 'sizes' ('n,n,...').
local function bloom_pieces(b, sizes)
  b.pieces, b.bits = {}, 0
  for size in string.gmatch(sizes, '%d+') do
    b.pieces[#b.pieces + 1] = {key = b.key .. ':g' .. b.gen .. ':' .. #b.pieces, first = b.bits, bits = tonumber(size) * 8}
    b.bits = b.bits + tonumber(size) * 8
  end
end

-- The filter whose state hash is 'key', or nil when it has none yet.
local function bloom_open(key)
  local f = redis.call('HMGET', key, 'count', 'exp', 'layers', 'k0', 'log', 'gen', 'pieces', 'bcap', 'bfill', 'next')
  if not f[1] then return nil end
  local b = {
    key = key, count = tonumber(f[1]), exp = tonumber(f[2]), layers = tonumber(f[3]),
    k0 = tonumber(f[4]) or BLOOM_FIRST_K, log = f[5], gen = tonumber(f[6]) or 0,
    bcap = tonumber(f[8]) or 0, bfill = tonumber(f[9]) or 0, next = tonumber(f[10]),
    added = 0, hits = 0, logged = {}
  }
  if b.gen > 0 then bloom_pieces(b, f[7]) end
  return b
end

-- A new layer of zero bits, at its exact size: SET allocates what it is given, while SETBIT past
-- a string's end would grow it greedily (up to twice, or 1 MB more).
local function bloom_grow(b)
  redis.call('SET', b.key .. ':' .. b.layers, string.rep('\0', bloom_layer_bits(b.exp, b.layers) / 8))
  b.layers = b.layers + 1
  redis.call('HSET', b.key, 'layers', b.layers)
end

-- A new filter whose first layer holds at least 'threshold' fingerprints (as many as the frozen
-- dupefilter beside it), within the layer size bounds; with 'log' its fingerprints are logged
-- for compaction from the first.
local function bloom_create(key, threshold, log)
  local need = threshold * BLOOM_FIRST_K / BLOOM_LN2 / 8 + 16
  local exp = BLOOM_MIN_EXP
  while exp < BLOOM_MAX_EXP and 2 ^ exp < need do exp = exp + 1 end
  local nxt = math.max(BLOOM_COMPACT_MIN, math.floor(bloom_capacity(exp, 0) / 2))
  redis.call('HSET', key, 'count', 0, 'hits', 0, 'exp', exp, 'layers', 0, 'next', nxt)
  if log then redis.call('HSET', key, 'log', '1') end
  local b = {key = key, count = 0, exp = exp, layers = 0, k0 = BLOOM_FIRST_K, log = log and '1' or false,
             gen = 0, bcap = 0, bfill = 0, next = nxt, added = 0, hits = 0, logged = {}}
  bloom_grow(b)
  return b
end

-- The three 32-bit words of fingerprint 'fp' (12 bytes).
local function bloom_words(fp)
  local a1, a2, a3, a4, b1, b2, b3, b4, c1, c2, c3, c4 = string.byte(fp, 1, 12)
  return ((a1 * 256 + a2) * 256 + a3) * 256 + a4, ((b1 * 256 + b2) * 256 + b3) * 256 + b4,
    ((c1 * 256 + c2) * 256 + c3) * 256 + c4
end

-- Append to 'out' the bit positions of fingerprint 'fp' in layer 'layer' of out.bits bits
-- (double hashing of its three 32-bit words; every value stays below 2^53, so it is exact in
-- Lua's doubles).
local function bloom_positions(fp, layer, k0, out)
  local h1, h2, h3 = bloom_words(fp)
  local bits = out.bits
  for j = 0, k0 + layer - 1 do
    out[#out + 1] = string.format('%d', (h1 + j * h2 + (j * j + layer) * h3) % bits)
  end
end

-- Call each(piece, offset) for the base positions of 'fp' (the piece holding each, and the
-- position's offset in it).
local function bloom_base_each(b, fp, each)
  local h1, h2, h3 = bloom_words(fp)
  for j = 0, BLOOM_BASE_K - 1 do
    local p = (h1 + j * h2 + (j * j + BLOOM_BASE_TERM) * h3) % b.bits
    local piece = 1
    while p >= b.pieces[piece].first + b.pieces[piece].bits do piece = piece + 1 end
    each(piece, p - b.pieces[piece].first)
  end
end

-- Append to args[piece] the BITFIELD subcommand of each base position of 'fp': 'GET u1 <offset>',
-- or with 'set' 'SET u1 <offset> 1'. With 'at', also append to it each position's piece and the
-- index of its reply (GETs only).
local function bloom_base_ops(b, fp, args, set, at)
  bloom_base_each(b, fp, function(piece, offset)
    local a = args[piece]
    if not a then
      a = {}
      args[piece] = a
    end
    a[#a + 1] = set and 'SET' or 'GET'
    a[#a + 1] = 'u1'
    a[#a + 1] = string.format('%d', offset)
    if set then a[#a + 1] = 1 end
    if at then
      at[#at + 1] = piece
      at[#at + 1] = #a / 3
    end
  end)
end

-- Which of 'fps' the base holds: found[fp] = true (BITFIELD_RO per piece, in chunks).
local function bloom_base_contains(b, fps, found)
  local per = 200
  for first = 1, #fps, per do
    local last = math.min(first + per - 1, #fps)
    local args, where = {}, {}  -- piece -> BITFIELD_RO arguments; fp index -> {piece, reply index}...
    for j = first, last do
      local at = {}
      bloom_base_ops(b, fps[j], args, false, at)
      where[j] = at
    end
    local replies = {}
    for piece, a in pairs(args) do replies[piece] = redis.call('BITFIELD_RO', b.pieces[piece].key, unpack(a)) end
    for j = first, last do
      local at, all = where[j], true
      for n = 1, #at, 2 do
        if replies[at[n]][at[n + 1]] == 0 then
          all = false
          break
        end
      end
      if all then found[fps[j]] = true end
    end
  end
end

-- Which of 'fps' the filter holds: a table fp -> true (the base first, then every layer read with
-- BITFIELD_RO, in chunks; a fingerprint found is not looked up further).
local function bloom_contains(b, fps)
  local found = {}
  if b.gen and b.gen > 0 then bloom_base_contains(b, fps, found) end
  for layer = 0, b.layers - 1 do
    local key, k = b.key .. ':' .. layer, b.k0 + layer
    local todo = {}
    for _, fp in ipairs(fps) do
      if not found[fp] then todo[#todo + 1] = fp end
    end
    local per = math.max(1, math.floor(2000 / k))
    for first = 1, #todo, per do
      local last = math.min(first + per - 1, #todo)
      local args = {}
      for j = first, last do
        local pos = {bits = bloom_layer_bits(b.exp, layer)}
        bloom_positions(todo[j], layer, b.k0, pos)
        for _, p in ipairs(pos) do
          args[#args + 1] = 'GET'
          args[#args + 1] = 'u1'
          args[#args + 1] = p
        end
      end
      local bits = redis.call('BITFIELD_RO', key, unpack(args))
      for j = first, last do
        local all = true
        for n = (j - first) * k + 1, (j - first + 1) * k do
          if bits[n] == 0 then
            all = false
            break
          end
        end
        if all then found[todo[j]] = true end
      end
    end
  end
  return found
end

-- Set the base bits of 'fps' (BITFIELD SET per piece, in chunks).
local function bloom_base_set(b, fps)
  local pending = {}
  local function flush()
    for piece, a in pairs(pending) do
      for start = 1, #a, 6000 do
        redis.call('BITFIELD', b.pieces[piece].key, unpack(a, start, math.min(start + 5999, #a)))
      end
    end
    pending = {}
  end
  for n, fp in ipairs(fps) do
    bloom_base_ops(b, fp, pending, true)
    if n % 500 == 0 then flush() end
  end
  flush()
end

-- Add 'fps' (none of them in the filter) to its base while it has room, then to its last layer,
-- making the next layer whenever the last is full (the last of BLOOM_MAX_LAYERS takes whatever
-- comes after: its error then grows). Logged ones are appended to the log by bloom_close.
local function bloom_add(b, fps)
  local rest = fps
  if b.gen and b.gen > 0 and b.bfill < b.bcap then
    local room, based = b.bcap - b.bfill, {}
    rest = {}
    for n, fp in ipairs(fps) do
      if n <= room then based[#based + 1] = fp else rest[#rest + 1] = fp end
    end
    bloom_base_set(b, based)
    local taken = #fps - #rest
    b.bfill = b.bfill + taken
    b.count = b.count + taken
    b.added = b.added + taken
    b.based = (b.based or 0) + taken
  end
  if #rest > 0 and b.layers == 0 then bloom_grow(b) end
  local first = b.bfill -- fingerprints the base and the layers before the last hold
  for layer = 0, b.layers - 2 do first = first + bloom_capacity(b.exp, layer, b.k0) end
  local pending, layer = {}, b.layers - 1
  local function flush()
    for start = 1, #pending, 6000 do
      redis.call('BITFIELD', b.key .. ':' .. layer, unpack(pending, start, math.min(start + 5999, #pending)))
    end
    pending = {}
  end
  for _, fp in ipairs(rest) do
    if b.count - first >= bloom_capacity(b.exp, layer, b.k0) and b.layers < BLOOM_MAX_LAYERS then
      flush()
      first = first + bloom_capacity(b.exp, layer, b.k0)
      bloom_grow(b)
      layer = b.layers - 1
    end
    local pos = {bits = bloom_layer_bits(b.exp, layer)}
    bloom_positions(fp, layer, b.k0, pos)
    for _, p in ipairs(pos) do
      pending[#pending + 1] = 'SET'
      pending[#pending + 1] = 'u1'
      pending[#pending + 1] = p
      pending[#pending + 1] = 1
    end
    b.count = b.count + 1
    b.added = b.added + 1
  end
  flush()
  for _, fp in ipairs(fps) do b.logged[#b.logged + 1] = fp end
end

-- Whether filter 'b', whose log holds 'length' bytes, asks a redis-monitor to seal its log (a
-- 256th of its count, at least BLOOM_SEAL_MIN) or to compact it (its count reached 'next').
local function bloom_wants(b, length)
  return length >= math.max(BLOOM_SEAL_MIN, 12 * math.floor(b.count / 256)) or b.count >= (b.next or 0)
end

-- Write what this call counted (fingerprints added, links answered "seen"), log what it added
-- (when this crawler logs: 'wanted', the shard's compaction flags, is given), ask for a seal or a
-- compaction when due, and push the expiry of the state and every key of the filter to 'ttl' ms.
local function bloom_close(b, ttl, wanted)
  if b.added > 0 then redis.call('HINCRBY', b.key, 'count', b.added) end
  if b.based then redis.call('HINCRBY', b.key, 'bfill', b.based) end
  if b.hits > 0 then redis.call('HINCRBY', b.key, 'hits', b.hits) end
  local logkey = b.key .. ':log'
  if b.log == '1' and #b.logged > 0 then
    if not wanted then  -- a crawler that does not log added to it: the log is incomplete for good
      redis.call('HSET', b.key, 'log', 'lost')
      redis.call('DEL', logkey)
      b.log = 'lost'
    else
      local length = redis.call('APPEND', logkey, table.concat(b.logged))
      if length > BLOOM_LOG_MAX then
        redis.call('HSET', b.key, 'log', 'lost')
        redis.call('DEL', logkey)
        b.log = 'lost'
      elseif bloom_wants(b, length) then
        redis.call('ZADD', wanted, 'NX', 0, b.key)
      end
    end
  end
  redis.call('PEXPIRE', b.key, ttl)
  if b.log == '1' then redis.call('PEXPIRE', logkey, ttl) end
  for layer = 0, b.layers - 1 do redis.call('PEXPIRE', b.key .. ':' .. layer, ttl) end
  if b.gen and b.gen > 0 then
    for _, piece in ipairs(b.pieces) do redis.call('PEXPIRE', piece.key, ttl) end
  end
end
