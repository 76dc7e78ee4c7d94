-- Reads a customer's profile and sources after settling due TTLs, so a read never shows
-- a freeze that has already timed out.
--
-- KEYS[1..7] and ARGV[1..4]: see includes/customer.lua.
--
-- Returns {OK, profile JSON, auto-consumed TTL count, TTL entries written, now ms,
-- sources (list of JSON)} or {E_CUSTOMER_NOT_FOUND, '', count, written}.

--@include customer

local now = now_ms()
local auto_consumed = expire_due(now)
if not customer_exists() then return { E_CUSTOMER_NOT_FOUND, '', auto_consumed, ttl_entries_written } end
local meta = redis.call('HMGET', K_meta, 'created_at', 'name', 'email', 'metadata')
local profile = cjson.encode({
  created_at = meta[1], name = meta[2] or cjson.null, email = meta[3] or cjson.null, metadata = meta[4] or cjson.null,
})
return { OK, profile, auto_consumed, ttl_entries_written, N(now), redis.call('HVALS', K_src) }
