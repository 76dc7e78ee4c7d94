-- Sets when a customer's next trim is due in its shard of the due set, or removes it,
-- unless the persist loop moved it meanwhile (src/ledger/retention.ts).
--
-- KEYS[1] due  zset  customer key base -> when its next trim is due (Redis ms)
-- ARGV[1] base: customer key base
-- ARGV[2] score: the score the trim pass read
-- ARGV[3] next_due_ms: next due time (ms), '' to remove
--
-- Returns 1 when changed, 0 when the score had moved.

local K_due = KEYS[1]
local base, seen, next_due = ARGV[1], ARGV[2], ARGV[3]
local score = redis.call('ZSCORE', K_due, base)
if score == false or tonumber(score) ~= tonumber(seen) then return 0 end
if next_due == '' then
  redis.call('ZREM', K_due, base)
else
  redis.call('ZADD', K_due, next_due, base)
end
return 1
