-- Ends a lease. A lease past its expiry has already ended, whether or not anyone reclaimed it:
-- its late release changes nothing. ARGV: prefix, exit, id, outcome ('' for a slot handed
-- back unused). Returns 1 or 0.
local p, exit, id = ARGV[1], ARGV[2], ARGV[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local z = p .. 'lease:' .. exit
local expires = redis.call('ZSCORE', z, id)
if not expires then return 0 end
redis.call('ZREM', z, id)
if tonumber(expires) <= now then return 0 end
if ARGV[4] ~= '' then redis.call('HINCRBY', p .. 'count:' .. exit, ARGV[4], 1) end
return 1
