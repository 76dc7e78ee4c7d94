-- Frees a gateway call's Idempotency-Key claim (kind `g`, src/ledger/bindings.ts), only
-- while it still names that call: the key of a call that billed nothing may be retried.
-- The API frees it as the call fails; when Redis could not be reached then, it frees it
-- again once Redis answers, and again after a hold released in the background (a master
-- that came back empty gets the claim of a hold still frozen back from its recovery). A
-- claim taken since by another call (a retry that found the key free) stays.
--
-- KEYS[1] ids    hash    id -> owner .. '|' .. bound at (Redis ms)
-- ARGV[1] id: the claim's id (claimId: JSON [customer, key])
-- ARGV[2] owner: the transaction id of the call that must hold it
--
-- Returns 1 when the claim was removed, 0 when there was none or it names another call.

local v = redis.call('HGET', KEYS[1], ARGV[1])
-- owner .. '|' .. bound at, as includes/bloom.lua's parse_binding reads it
if not v or string.match(v, '^(.*)|%d+$') ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
