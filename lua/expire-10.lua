-- Settles every freeze of one customer whose TTL is due (the expire worker's job; any
-- other customer script does the same lazily first).
--
-- KEYS[1..10] and ARGV[1..4]: see includes/customer.lua.
--
-- Returns {OK, '', auto-consumed TTL count, TTL entries written}.

--@include customer

local auto_consumed = expire_due(now_ms())
return { OK, '', auto_consumed, ttl_entries_written }
