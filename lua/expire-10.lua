-- Settles every freeze of one customer whose TTL is due and retires the sources that
-- expired, writing their EXPIRE entries (the expire worker's job and the sweep's; any
-- other customer script does the same lazily first: expire_due in includes/customer.lua).
--
-- KEYS[1..10] and ARGV[1..4]: see includes/customer.lua.
--
-- Returns {OK, '', auto-consumed TTL count, entries written (TTL and EXPIRE), when the
-- next live source expires (ms string, '' for none)}.

--@include customer
--@include alerts

local now = now_ms()
local auto_consumed = expire_due(now)
return { OK, '', auto_consumed, ttl_entries_written, next_source_expiry(now) }
