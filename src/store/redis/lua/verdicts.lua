-- The verdicts newer than ARGV[2], for a worker's local copy of the fleet's health.
-- Returns {now_ms, last_seq, field, value, field, value, ...}.
local p, since = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
local out = {tostring(now), tostring(redis.call('GET', p .. 'vseq') or '0')}
local all = redis.call('HGETALL', p .. 'verdicts')
for i = 1, #all, 2 do
  local seq = tonumber(string.match(all[i + 1], '^(%d+)'))
  if seq > since then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out
