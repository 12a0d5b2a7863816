-- Shared by every script (prepended when the store is built): the server's clock and the one
-- way a lease ends, so that every path counts an ending exactly once.

-- The server's clock in milliseconds: the fleet's one clock.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Reclaims the expired leases of one exit (a crashed worker's), counting them as expired.
local function reclaim(p, exit, now)
  local n = redis.call('ZREMRANGEBYSCORE', p .. 'lease:' .. exit, '-inf', now)
  if n > 0 then redis.call('HINCRBY', p .. 'count:' .. exit, 'expired', n) end
end

-- Ends lease `id` of `exit`, counting how it ended: by its outcome ('' for a slot handed back
-- unused), or as expired if it outlived its expiry. A lease no longer in the set ended before
-- (given back, or reclaimed) and changes nothing. Returns 1 if this call ended a live lease.
local function end_lease(p, exit, id, outcome, now)
  local z = p .. 'lease:' .. exit
  local expires = redis.call('ZSCORE', z, id)
  if not expires then return 0 end
  redis.call('ZREM', z, id)
  local c = p .. 'count:' .. exit
  if tonumber(expires) <= now then
    redis.call('HINCRBY', c, 'expired', 1)
    return 0
  end
  if outcome == '' then outcome = 'unused' end
  redis.call('HINCRBY', c, outcome, 1)
  return 1
end
