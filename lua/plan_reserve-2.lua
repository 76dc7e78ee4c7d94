-- Counts one billable operation for an organization's current period, unless its plan's
-- hard limit is reached. Called before a deduct, consume or gateway settlement; the
-- caller gives the count back (DECRBY) when the operation did not apply.
--
-- KEYS[1] plan    hash   limit (0 = none), pending_limit, pending_from (ms): a downgrade
--                        that takes effect at the start of the next period
-- KEYS[2] counter string billable operations in the current period
-- ARGV[1] now, ms
-- ARGV[2] operations to count (integer >= 1)
--
-- Returns {status, count after}: 0 counted, 1 limit reached (nothing counted),
-- 2 plan or counter not loaded (nothing counted: the caller seeds them from PostgreSQL).

local plan_key, counter_key = KEYS[1], KEYS[2]
local now = tonumber(ARGV[1])
local n = tonumber(ARGV[2])

local plan = redis.call('HMGET', plan_key, 'limit', 'pending_limit', 'pending_from')
if not plan[1] then return { 2, 0 } end
local current = redis.call('GET', counter_key)
if not current then return { 2, 0 } end

local limit = tonumber(plan[1])
if plan[3] and tonumber(plan[3]) <= now then limit = tonumber(plan[2]) end

current = tonumber(current)
if limit > 0 and current + n > limit then return { 1, current } end
return { 0, redis.call('INCRBY', counter_key, n) }
