-- A crawl's seen-set beyond DUPEFILTER_BLOOM_ABOVE (docs/contract.md §3.8): a scalable Bloom
-- filter in one shard. utils/frontier/bloom.py has the same sizing and hashing in Python, and why:
-- layer i is a string of 2^(exp + i) - 16 bytes (at most 2^26 - 16: 16 bytes under a power of two,
-- so Redis allocates exactly 2^(exp + i) for it), set with 11 + i bits per fingerprint, sized so
-- that full it answers a new fingerprint "seen" with probability 2^-(11 + i): at most 2^-10
-- (0.098 %) over every layer. The state hash holds count, hits, exp and layers; layer i is the
-- string at '<state>:<i>'.

local BLOOM_FIRST_K, BLOOM_MIN_EXP, BLOOM_MAX_EXP, BLOOM_MAX_LAYERS = 11, 6, 26, 32
local BLOOM_LN2 = 0.6931471805599453

local function bloom_layer_bits(exp, layer)
  return (2 ^ math.min(exp + layer, BLOOM_MAX_EXP) - 16) * 8
end

-- Fingerprints layer 'layer' takes before the next one is made.
local function bloom_capacity(exp, layer)
  return math.floor(bloom_layer_bits(exp, layer) * BLOOM_LN2 / (BLOOM_FIRST_K + layer))
end

-- The filter whose state hash is 'key', or nil when it has none yet.
local function bloom_open(key)
  local f = redis.call('HMGET', key, 'count', 'exp', 'layers')
  if not f[1] then return nil end
  return {key = key, count = tonumber(f[1]), exp = tonumber(f[2]), layers = tonumber(f[3]), added = 0, hits = 0}
end

-- A new layer of zero bits, at its exact size: SET allocates what it is given, while SETBIT past
-- a string's end would grow it greedily (up to twice, or 1 MB more).
local function bloom_grow(b)
  redis.call('SET', b.key .. ':' .. b.layers, string.rep('\0', bloom_layer_bits(b.exp, b.layers) / 8))
  b.layers = b.layers + 1
  redis.call('HSET', b.key, 'layers', b.layers)
end

-- A new filter whose first layer holds at least 'threshold' fingerprints (as many as the frozen
-- dupefilter beside it), within the layer size bounds.
local function bloom_create(key, threshold)
  local need = threshold * BLOOM_FIRST_K / BLOOM_LN2 / 8 + 16
  local exp = BLOOM_MIN_EXP
  while exp < BLOOM_MAX_EXP and 2 ^ exp < need do exp = exp + 1 end
  redis.call('HSET', key, 'count', 0, 'hits', 0, 'exp', exp, 'layers', 0)
  local b = {key = key, count = 0, exp = exp, layers = 0, added = 0, hits = 0}
  bloom_grow(b)
  return b
end

-- Append to 'out' the bit positions of fingerprint 'fp' (12 bytes) in layer 'layer' of out.bits
-- bits (double hashing of its three 32-bit words; every value stays below 2^53, so it is exact in
-- Lua's doubles).
local function bloom_positions(fp, layer, out)
  local a1, a2, a3, a4, b1, b2, b3, b4, c1, c2, c3, c4 = string.byte(fp, 1, 12)
  local h1 = ((a1 * 256 + a2) * 256 + a3) * 256 + a4
  local h2 = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
  local h3 = ((c1 * 256 + c2) * 256 + c3) * 256 + c4
  local bits = out.bits
  for j = 0, BLOOM_FIRST_K + layer - 1 do
    out[#out + 1] = string.format('%d', (h1 + j * h2 + (j * j + layer) * h3) % bits)
  end
end

-- Which of 'fps' the filter holds: a table fp -> true (every layer read with BITFIELD_RO, in
-- chunks; a fingerprint found in one layer is not looked up in the next).
local function bloom_contains(b, fps)
  local found = {}
  for layer = 0, b.layers - 1 do
    local key, k = b.key .. ':' .. layer, BLOOM_FIRST_K + layer
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
        bloom_positions(todo[j], layer, pos)
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

-- Add 'fps' (none of them in the filter) to its last layer, making the next layer whenever the
-- last is full (the last of BLOOM_MAX_LAYERS takes whatever comes after: its error then grows).
local function bloom_add(b, fps)
  local first = 0 -- fingerprints the layers before the last hold
  for layer = 0, b.layers - 2 do first = first + bloom_capacity(b.exp, layer) end
  local pending, layer = {}, b.layers - 1
  local function flush()
    for start = 1, #pending, 6000 do
      redis.call('BITFIELD', b.key .. ':' .. layer, unpack(pending, start, math.min(start + 5999, #pending)))
    end
    pending = {}
  end
  for _, fp in ipairs(fps) do
    if b.count - first >= bloom_capacity(b.exp, layer) and b.layers < BLOOM_MAX_LAYERS then
      flush()
      first = first + bloom_capacity(b.exp, layer)
      bloom_grow(b)
      layer = b.layers - 1
    end
    local pos = {bits = bloom_layer_bits(b.exp, layer)}
    bloom_positions(fp, layer, pos)
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
end

-- Write what this call counted (fingerprints added, links answered "seen") and push the expiry of
-- the state and every layer to 'ttl' ms.
local function bloom_close(b, ttl)
  if b.added > 0 then redis.call('HINCRBY', b.key, 'count', b.added) end
  if b.hits > 0 then redis.call('HINCRBY', b.key, 'hits', b.hits) end
  redis.call('PEXPIRE', b.key, ttl)
  for layer = 0, b.layers - 1 do redis.call('PEXPIRE', b.key .. ':' .. layer, ttl) end
end
