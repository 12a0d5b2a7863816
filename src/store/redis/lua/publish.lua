-- A health verdict for every worker, under the fleet-wide ejection cap.
-- ARGV: prefix, exit, site ('' for the tunnel), state, hold_ms (-1: until revived), origin,
--       cap, ejects (1 if the state takes the exit out), pace (a pace cut's rate, else '').
-- Returns the verdict's seq, 0 if refused.
local p, exit, site, state = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local hold, origin, cap, ejects = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7]), ARGV[8] == '1'
local pace = ARGV[9] or ''
-- A verdict about the site itself (an incident: no exit) takes no exit out.
if exit == '' then ejects = false end
local now = now_ms()
if pace ~= '' then
  -- A pace cut: beside the pair's health verdict, never in its place; no exit goes out.
  local seq = redis.call('INCR', p .. 'vseq')
  local untl = tostring(now + math.max(hold, 0))
  redis.call('HSET', p .. 'verdicts', exit .. '\31' .. site .. '\31pace', seq .. '\31' .. state .. '\31' .. untl .. '\31' .. origin .. '\31' .. pace)
  return seq
end
local tunnel = p .. 'ejected:'
local scope = p .. 'ejected:' .. site
redis.call('ZREMRANGEBYSCORE', tunnel, '-inf', now)
redis.call('ZREMRANGEBYSCORE', scope, '-inf', now)
if ejects and not redis.call('ZSCORE', scope, exit) then
  local out = redis.call('ZCARD', tunnel)
  if site ~= '' then out = out + redis.call('ZCARD', scope) end
  if out + 1 > cap then return 0 end
end
local untl = '+inf'
if hold >= 0 then untl = tostring(now + hold) end
if ejects then
  -- A half-open exit (hold 0) keeps its cap slot until its trials decide, or at most 10 min
  -- if the worker deciding them dies.
  local score = untl
  if hold == 0 then score = tostring(now + 600000) end
  redis.call('ZADD', scope, score, exit)
elseif exit ~= '' then
  redis.call('ZREM', scope, exit)
end
local seq = redis.call('INCR', p .. 'vseq')
redis.call('HSET', p .. 'verdicts', exit .. '\31' .. site, seq .. '\31' .. state .. '\31' .. untl .. '\31' .. origin)
return seq
