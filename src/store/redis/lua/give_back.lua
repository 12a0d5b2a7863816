-- Ends leases. ARGV: prefix, then for each lease {exit, id, outcome} (outcome '' for a slot
-- handed back unused). Returns how many were live; the others had already ended (expired, or
-- given back before) and change nothing.
local p = ARGV[1]
local now = now_ms()
local ended = 0
for i = 2, #ARGV, 3 do ended = ended + end_lease(p, ARGV[i], ARGV[i + 1], ARGV[i + 2], now) end
return ended
