-- Fleet-wide figures per exit: live leases, then the counter hash as field/value pairs.
-- ARGV: prefix, exits... Returns {n_1, active_1, field, value, ..., n_2, active_2, ...}
-- where n_i is the number of field/value strings that follow active_i.
local p = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 2, #ARGV do
  local exit = ARGV[i]
  local counts = redis.call('HGETALL', p .. 'count:' .. exit)
  out[#out + 1] = tostring(#counts)
  out[#out + 1] = tostring(redis.call('ZCOUNT', p .. 'lease:' .. exit, '(' .. now, '+inf'))
  for j = 1, #counts do out[#out + 1] = counts[j] end
end
return out
