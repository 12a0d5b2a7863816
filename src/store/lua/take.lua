-- One lease slot, decided on the server with the server's clock (milliseconds).
-- ARGV: prefix, key ('' for keyless), max (0: none), lease_ttl, session_ttl,
--       ramp, interval, horizon (ramp 0: no warm-up), candidates...
-- Returns {'ok', exit, id, session} | {'full', exit?} | {'warm', exit, wait_ms}
--       | {'elsewhere', exit} (the key's session is on another exit: nothing taken or extended)
local p, key = ARGV[1], ARGV[2]
local max, lease_ttl, session_ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local ramp, interval, horizon = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Expired leases (a crashed worker's) are reclaimed when they would make the exit look full:
-- the common case, room under the ceiling, costs one ZCARD.
local function room(exit)
  if max == 0 then return true end
  local z = p .. 'lease:' .. exit
  if redis.call('ZCARD', z) < max then return true end
  redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
  return redis.call('ZCARD', z) < max
end

local function take(exit)
  local z = p .. 'lease:' .. exit
  local id = redis.call('INCR', p .. 'seq')
  redis.call('ZADD', z, now + lease_ttl, id)
  -- Without a ceiling nothing looks full: reclaim a crashed worker's leases now and then.
  if max == 0 and id % 64 == 0 then redis.call('ZREMRANGEBYSCORE', z, '-inf', now) end
  redis.call('HINCRBY', p .. 'count:' .. exit, 'leases', 1)
  return tostring(id)
end

if key ~= '' then
  -- A live session decides; otherwise the ring's choice. A keyed lease never moves on.
  local sk = p .. 'sess:' .. key
  local exit = redis.call('GET', sk)
  local session = '1'
  if not exit then
    exit, session = ARGV[9], '0'
  elseif exit ~= ARGV[9] then
    return {'elsewhere', exit}
  end
  if not exit then return {'full'} end
  if not room(exit) then return {'full', exit} end
  if ramp > 0 then
    local pk = p .. 'pair:' .. key
    local prev = redis.call('HGET', pk, exit)
    local born = now
    if prev then
      local b, l = string.match(prev, '^(%d+):(%d+)$')
      b, l = tonumber(b), tonumber(l)
      if now - l <= horizon then
        born = b
        local age = now - b
        if age < ramp then
          local ready = l + interval * (1 - age / ramp)
          if now < ready then return {'warm', exit, tostring(ready - now)} end
        end
      end
    end
    redis.call('HSET', pk, exit, born .. ':' .. now)
    redis.call('PEXPIRE', pk, horizon + 1000)
  end
  local id = take(exit)
  redis.call('SET', sk, exit, 'PX', session_ttl)
  return {'ok', exit, id, session}
end

for i = 9, #ARGV do
  local exit = ARGV[i]
  if room(exit) then return {'ok', exit, take(exit), '0'} end
end
return {'full'}
