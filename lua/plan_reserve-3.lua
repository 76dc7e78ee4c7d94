-- Reserves one billable operation for an organization's current period, unless its plan's
-- hard limit would be exceeded. Called before a deduct, consume or gateway call; the
-- caller then commits the reservation (lua/plan_commit-2.lua) when the operation applied,
-- or removes it (ZREM) when it did not.
--
-- The count is kept in two parts so that an operation still in flight does not refuse
-- others that fit: `used` (KEYS[2], committed operations) and the pending set (KEYS[3]:
-- one member per reservation in flight and one per process lease of lua/plan_lease-3.lua,
-- scored by its deadline; `pending` is the sum of their weights). Members scored at or
-- before now are folded into `used` first: a reservation whose process died before it
-- committed (it may have applied, so it counts: one too many at worst, never too few),
-- and operations recorded without a reservation (TTL auto-consumes, scored 0). A member
-- is `<weight>:<id>`: the operations it stands for, then a unique id.
--
-- KEYS[1] plan    hash   limit (0 = none), pending_limit, pending_from (ms): a downgrade
--                        that takes effect at the start of the next period
-- KEYS[2] counter string committed billable operations in the current period (`used`)
-- KEYS[3] pending zset   reservations in flight, scored by deadline (ms)
-- ARGV[1] now_ms: now, ms
-- ARGV[2] member: member to reserve (`1:<id>`), or '' to fold due members only
-- ARGV[3] deadline_ms: the reservation's deadline, ms
--
-- Returns {status, used, pending}: 0 reserved (or folded), 1 limit reached (used alone
-- reaches it: nothing reserved), 3 undecided (used is under the limit but used + pending
-- reaches it: the answer depends on operations in flight; nothing reserved, ask again),
-- 2 plan or counter not loaded (nothing reserved: the caller seeds them). With ARGV[2] ''
-- the plan is not needed: the answer is 0 once the counter exists.

--@include plan

local plan_key, counter_key, pending_key = KEYS[1], KEYS[2], KEYS[3]
local now = tonumber(ARGV[1])
local member = ARGV[2]
local deadline = tonumber(ARGV[3])

local used = redis.call('GET', counter_key)
if not used then return { 2, 0, 0 } end
used = tonumber(used)

used = fold_due(pending_key, counter_key, now, used)

-- Few members: the leases of the processes serving the organization, and reservations
-- in flight only near the limit (elsewhere operations come from leases).
local pending = 0
for _, m in ipairs(redis.call('ZRANGE', pending_key, 0, -1)) do pending = pending + weight_of(m) end
if member == '' then return { 0, used, pending } end

local plan = redis.call('HMGET', plan_key, 'limit', 'pending_limit', 'pending_from')
if not plan[1] then return { 2, used, pending } end
local limit = tonumber(plan[1])
if plan[3] and tonumber(plan[3]) <= now then limit = tonumber(plan[2]) end
if limit > 0 then
  if used >= limit then return { 1, used, pending } end
  if used + pending >= limit then return { 3, used, pending } end
end

redis.call('ZADD', pending_key, deadline, member)
-- The pending set lives as long as the counter (when the counter has an expiry).
local ttl = redis.call('PTTL', counter_key)
if ttl > 0 then redis.call('PEXPIRE', pending_key, ttl) end
return { 0, used, pending + 1 }
