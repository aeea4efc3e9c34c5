-- Lease the best request of the next domain its throttle allows, for one spider type.
-- KEYS: 1 domains(spider), 2 leases(spider), 3 domain_config, 4 domain_blacklist, 5 tail refill
--       wanted, 6 tail spill wanted (the shard's: Keys.tail_refill_wanted, tail_spill_wanted).
-- ARGV: 1 crawl_queue prefix, 2 domain_crawls prefix, 3 crawl_domains prefix, 4 crawl prefix,
--       5 crawl_leases prefix, 6 throttle prefix, 7 default hits, 8 default window (us),
--       9 '1' if moderated, 10 lease (us), 11 domains to scan, 12 recheck (us), 13 window margin (us),
--       14 crawl-delay prefix (+ domain: seconds robots.txt asks between fetches),
--       15 tail_queue prefix ('' when queues keep no tails: FRONTIER_TAIL_URL unset), 16 refill
--       below (a head with fewer requests and a tail asks for a refill), 17 spill above (a queue
--       with more asks for a spill), 18 wait (us) of a domain whose crawls there have only tails,
--       19 the tail wake channel (published when a refill is asked for).
-- Returns {1, lease, domain, crawl member, deadline_s, deadline_us, option set JSON ('' if none)}
-- when a request was leased (lease = score:crawl member:#domain:domain member, see
-- utils/frontier/model.py lease_member);
-- {2, wait_us} when domains exist but none may be fetched now (a domain its last pop parked
-- included: with QUEUE_MODERATED it stays until its next fetch may start); {0} when nothing is queued.
-- A request is never served before a better one of its queue's tail: a crawl whose queue in a
-- domain has nothing better than its tail's best segment in its head is skipped (the next crawl
-- there serves) until a redis-monitor refilled it; a domain with nothing else waits ARGV 18. A
-- refill is asked for while fewer than ARGV 16 requests are left before the tail's best.
--! include lib/throttle.lua

local now = now_us()
local recheck = tonumber(ARGV[12])
local ready = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', secs(now), 'LIMIT', 0, tonumber(ARGV[11]))
for _, domain in ipairs(ready) do
  local dq = ARGV[2] .. domain
  -- domain-config, else the defaults; robots.txt Crawl-delay: at most one fetch per delay
  local hits, window = domain_limit(KEYS[3], ARGV[14] .. domain, domain, tonumber(ARGV[7]), tonumber(ARGV[8]))
  if redis.call('EXISTS', dq) == 0 then
    -- a domain its last pop left parked (below) whose crawls queued nothing since
    redis.call('ZREM', KEYS[1], domain)
  elseif redis.call('SISMEMBER', KEYS[4], domain) == 1 or hits <= 0 then
    redis.call('ZADD', KEYS[1], secs(now + recheck), domain)
  else
    local tkey = ARGV[6] .. domain
    local margin = tonumber(ARGV[13])
    local wait = throttle_wait(tkey, now, hits, window, ARGV[9] == '1', margin)
    if wait > 0 then
      redis.call('ZADD', KEYS[1], secs(now + wait), domain)
    else
      local tails = ARGV[15] ~= ''
      local refill_below, spill_above = tonumber(ARGV[16]), tonumber(ARGV[17])
      local waiting = false  -- a crawl here has requests, all in its tail
      for _, crawl in ipairs(redis.call('ZRANGE', dq, 0, 15)) do
        local cq = ARGV[1] .. crawl .. ':' .. domain
        local popped = redis.call('ZPOPMIN', cq)
        local tail = tails and redis.call('ZRANGE', ARGV[15] .. crawl .. ':' .. domain, 0, 0, 'WITHSCORES') or {}
        if #popped > 0 and #tail > 0 and tonumber(popped[2]) > tonumber(tail[2]) then
          -- the tail holds better requests than the head's best: served only once refilled
          redis.call('ZADD', cq, popped[2], popped[1])
          popped = {}
        end
        local head = redis.call('ZRANGE', cq, 0, 0, 'WITHSCORES')
        if #head == 0 and #tail == 0 then
          redis.call('ZREM', dq, crawl)
          redis.call('SREM', ARGV[3] .. crawl, domain)
        else
          local best = head[2]
          if #head == 0 or (#tail > 0 and tonumber(tail[2]) < tonumber(best)) then best = tail[2] end
          redis.call('ZADD', dq, best, crawl)
          if tails then
            if #tail > 0 then
              -- the head's requests ranked before the tail's best: what is left to serve in order
              if #head == 0 or redis.call('ZCOUNT', cq, '-inf', '(' .. tail[2]) < refill_below then
                if redis.call('ZADD', KEYS[5], 'NX', secs(now), cq) == 1 then
                  redis.call('PUBLISH', ARGV[19], '1')
                end
              end
            elseif #head > 0 and redis.call('ZCARD', cq) > spill_above then
              redis.call('ZADD', KEYS[6], 'LT', secs(now), cq)
            end
          end
        end
        if #popped > 0 then
          if ARGV[9] == '1' then
            -- parked until its next fetch may start, even with nothing left: a request queued
            -- meanwhile (the page's own links) is not counted as ready work before it may be
            -- fetched (crawlhive_queue_ready_domains, what autoscalers read)
            redis.call('ZADD', KEYS[1], secs(now + math.ceil(window / hits)), domain)
          elseif redis.call('ZCARD', dq) == 0 then
            redis.call('ZREM', KEYS[1], domain)
          else
            redis.call('ZADD', KEYS[1], secs(now), domain)
          end
          throttle_record(tkey, now, window + margin)
          local deadline = now + tonumber(ARGV[10])
          -- the lease names the crawl, priority (score) and domain the queue key and score held
          local lease = popped[2] .. ':' .. crawl .. ':' .. #domain .. ':' .. domain .. popped[1]
          redis.call('ZADD', KEYS[2], secs(deadline), lease)
          redis.call('HINCRBY', ARGV[4] .. crawl, 'inflight', 1)
          redis.call('SADD', ARGV[5] .. crawl, lease)
          -- the option set the member names (utils/frontier/model.py FrontierRequest.member)
          local oid = string.match(popped[1], '^%-?%d+ ([^ ]+) ') or string.match(popped[1], '^{"o":"([^"]*)"')
          local options = ''
          if oid then
            options = redis.call('HGET', ARGV[4] .. crawl, 'o:' .. oid) or ''
          end
          return {1, lease, domain, crawl, math.floor(deadline / 1000000), deadline % 1000000, options}
        end
        if #tail > 0 then waiting = true end
      end
      if redis.call('ZCARD', dq) == 0 then
        redis.call('ZREM', KEYS[1], domain)
      elseif waiting then
        redis.call('ZADD', KEYS[1], secs(now + tonumber(ARGV[18])), domain)
      end
    end
  end
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #nxt == 0 then
  return {0}
end
local wait = micros(nxt[2]) - now
if wait < 0 then wait = 0 end
return {2, wait}
