-- Fleet-wide figures per exit: live leases, then the counter hash as field/value pairs, then
-- 'leases' (every lease granted: those still in the set, live or not yet reclaimed, and every
-- one that ended, however it ended).
-- ARGV: prefix, exits... Returns {n_1, active_1, field, value, ..., n_2, active_2, ...}
-- where n_i is the number of field/value strings that follow active_i.
local p = ARGV[1]
local now = now_ms()
local out = {}
for i = 2, #ARGV do
  local exit = ARGV[i]
  local z = p .. 'lease:' .. exit
  local counts = redis.call('HGETALL', p .. 'count:' .. exit)
  local leases = redis.call('ZCARD', z)
  out[#out + 1] = tostring(#counts + 2)
  out[#out + 1] = tostring(redis.call('ZCOUNT', z, '(' .. now, '+inf'))
  for j = 1, #counts, 2 do
    out[#out + 1] = counts[j]
    out[#out + 1] = counts[j + 1]
    leases = leases + tonumber(counts[j + 1])
  end
  out[#out + 1] = 'leases'
  out[#out + 1] = tostring(leases)
end
return out
