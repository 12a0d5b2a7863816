-- One lease slot, decided on the server with the server's clock (milliseconds), after ending
-- the leases this worker released since its last command (they ride along, so that a lease
-- pair costs one script run and one round trip).
-- ARGV: prefix, key ('' for keyless), max (0: none), lease_ttl, session_ttl,
--       ramp, interval, horizon (ramp 0: no warm-up), id (the new lease's, chosen by the
--       worker), reclaim ('1': reclaim expired leases even without a ceiling), renew ('0': a
--       live session need not be extended), generation (the first candidate's token
--       generation, '0' for a plain exit), rebind ('1': a session of an older generation moves
--       to this one quietly), site (the paced site, '' when not paced), n (hand-backs),
--       n times {exit, id, outcome}, candidates... (when paced, each candidate followed by its
--       emission interval and burst tolerance in milliseconds: its GCRA at the rate the worker
--       learned)
-- Returns {'ok', exit, session} | {'full', exit?} | {'warm', exit, wait_ms}
--       | {'elsewhere', exit} (the key's session is on another exit: nothing taken or extended)
--       | {'rotated', exit} (the key's session there was bound in an older token generation:
--         it is deleted, nothing taken; the key's next take binds afresh)
--       | {'paced', exit, wait_ms} (every candidate with room has spent its budget for the site)
-- A session is stored as its exit, followed by "\1" and its generation when that is not 0
-- (an exit id holds no control character).
-- Numbers are converted only where they are used: a conversion costs the server about as
-- much as a read command, and this script runs once per lease.
local p, key, session_ttl = ARGV[1], ARGV[2], ARGV[5]
local max = ARGV[3] ~= '0' and tonumber(ARGV[3])
local id, reclaim_now, renew = ARGV[9], ARGV[10] == '1', ARGV[11] == '1'
local generation, rebind, site, backs = ARGV[12], ARGV[13] == '1', ARGV[14], tonumber(ARGV[15])
local now = now_ms()
for i = 16, 15 + 3 * backs, 3 do end_lease(p, ARGV[i], ARGV[i + 1], ARGV[i + 2], now) end
local first = 16 + 3 * backs
local stride = site ~= '' and 3 or 1

-- Expired leases (a crashed worker's) are reclaimed when they would make the exit look full:
-- the common case, room under the ceiling, costs one ZCARD.
local function room(exit)
  if not max then return true end
  local z = p .. 'lease:' .. exit
  if redis.call('ZCARD', z) < max then return true end
  reclaim(p, exit, now)
  return redis.call('ZCARD', z) < max
end

-- Pacing: one GCRA per (exit, site), its theoretical arrival time (TAT) in one key that
-- expires once the pair would have its whole burst back. `budget` checks candidate i's and
-- keeps what spending it would write; `spend` writes it with the take. The soonest wait of
-- the candidates without budget is kept for the answer.
local paced, paced_exit, spend_key, spend_tat, spend_ttl
local function budget(exit, i)
  if site == '' then return true end
  local k = p .. 'pace:' .. exit .. '\1' .. site
  local t, tau = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local base = math.max(tonumber(redis.call('GET', k) or 0), now)
  -- A millisecond of slack: the TAT sums intervals that are not whole milliseconds.
  local over = base + t - tau - now
  if over > 1 then
    if not paced or over < paced then paced, paced_exit = over, exit end
    return false
  end
  spend_key, spend_tat, spend_ttl = k, base + t, math.ceil(base + t + tau - now)
  return true
end

local function spend()
  if spend_key then redis.call('SET', spend_key, string.format('%.3f', spend_tat), 'PX', spend_ttl) end
end

local function take(exit)
  -- Without a ceiling nothing looks full: reclaim a crashed worker's leases now and then.
  if not max and reclaim_now then reclaim(p, exit, now) end
  redis.call('ZADD', p .. 'lease:' .. exit, now + ARGV[4], id)
end

if key ~= '' then
  -- A live session decides; otherwise the ring's choice. A keyed lease never moves on.
  local sk = p .. 'sess:' .. key
  local exit = redis.call('GET', sk)
  local session = '1'
  if not exit then
    exit, session = ARGV[first], '0'
  else
    -- A plain find: a session of a plain exit (no generation) costs no pattern match.
    local cut, g = string.find(exit, '\1', 1, true), '0'
    if cut then exit, g = string.sub(exit, 1, cut - 1), string.sub(exit, cut + 1) end
    if exit ~= ARGV[first] then return {'elsewhere', exit} end
    -- A token older than the worker's: the provider's session is over, so is this one.
    if generation ~= '0' and tonumber(g) < tonumber(generation) then
      if not rebind then
        redis.call('DEL', sk)
        return {'rotated', exit}
      end
      renew = true
    end
  end
  if not exit then return {'full'} end
  if not room(exit) then return {'full', exit} end
  -- Paced: the key waits for its exit's budget (it never moves on for it).
  if not budget(exit, first) then return {'paced', exit, tostring(paced)} end
  if ARGV[6] ~= '0' then
    local ramp, interval, horizon = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
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
  take(exit)
  spend()
  if renew or session == '0' then
    local value = generation == '0' and exit or (exit .. '\1' .. generation)
    redis.call('SET', sk, value, 'PX', session_ttl)
  end
  return {'ok', exit, session}
end

for i = first, #ARGV, stride do
  local exit = ARGV[i]
  if room(exit) and budget(exit, i) then
    take(exit)
    spend()
    return {'ok', exit, '0'}
  end
end
if paced then return {'paced', paced_exit, tostring(paced)} end
return {'full'}
