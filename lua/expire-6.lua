-- Settles every freeze of one customer whose TTL is due (the expire worker's job; any
-- other customer script does the same lazily first).
--
-- KEYS[1..6] and ARGV[1..4]: see includes/customer.lua.
--
-- Returns {OK, '', auto-consumed TTL count}.

--@include customer

local now = now_ms()
return { OK, '', expire_due(now) }
