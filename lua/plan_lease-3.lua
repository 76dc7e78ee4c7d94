-- Takes, reports, renews or gives back a process's lease of billable operations for an
-- organization's current period (src/plans/leases.ts). A lease is one member of the
-- pending set (KEYS[3], the same set that holds the per-operation reservations of
-- lua/plan_reserve-3.lua), named `<weight>:<lease name>` and scored by its deadline: the
-- process serves up to `weight` operations from memory without asking Redis. A lease
-- whose process died is never reported again and is folded into `used` whole at its
-- deadline, like any pending member: what it did not use counts, one too many at worst,
-- never too few.
--
-- A call reports what the lease served since the previous one (`consumed`, added to
-- `used`), keeps the operations still in flight and the unused ones the process keeps,
-- and grants up to `want` more: at most (limit - used - every other pending weight) /
-- divisor, and nothing when that is under `grant_min`, so that near the limit the
-- processes reserve one operation at a time (plan_reserve) and the limit is exact. The
-- processes together never hold more than the limit leaves.
--
-- KEYS[1] plan    hash   limit (0 = none), pending_limit, pending_from (ms)
-- KEYS[2] counter string committed billable operations in the period (`used`)
-- KEYS[3] pending zset   reservations and leases, scored by deadline (ms)
-- ARGV[1] now_ms: now, ms
-- ARGV[2] lease: the lease's name (unique per process and lease generation)
-- ARGV[3] weight: the weight of the lease's member now in the pending set (0: none)
-- ARGV[4] consumed: operations of the lease that applied since the last call
-- ARGV[5] in_flight: operations of the lease taken and not finished (kept)
-- ARGV[6] keep: unused operations the process keeps (0 gives them back)
-- ARGV[7] want: operations wanted on top (0: none)
-- ARGV[8] divisor: divisor of the free operations that bounds a grant
-- ARGV[9] grant_min: a smaller grant is none
-- ARGV[10] deadline_ms: the lease's new deadline, ms
--
-- Returns {status, weight, granted, used, free, lost}: status 0 done, 2 plan or counter
-- not loaded (nothing changed: the caller seeds them). `weight` is the member's weight now
-- (0: no member), `free` what the limit leaves beyond every pending weight (-1: no limit),
-- `lost` 1 when the member was no longer pending (its deadline passed and its whole
-- weight was counted: `consumed`, `in flight` and `keep` are counted already, and the
-- new member holds only the grant).

--@include plan

local plan_key, counter_key, pending_key = KEYS[1], KEYS[2], KEYS[3]
local now = tonumber(ARGV[1])
local name = ARGV[2]
local old_weight = tonumber(ARGV[3])
local consumed = tonumber(ARGV[4])
local in_flight = tonumber(ARGV[5])
local keep = tonumber(ARGV[6])
local want = tonumber(ARGV[7])
local divisor = tonumber(ARGV[8])
local grant_min = tonumber(ARGV[9])
local deadline = tonumber(ARGV[10])

local used = redis.call('GET', counter_key)
if not used then return { 2, 0, 0, 0, 0, 0 } end
used = tonumber(used)
local plan = redis.call('HMGET', plan_key, 'limit', 'pending_limit', 'pending_from')
if want > 0 and not plan[1] then return { 2, 0, 0, used, 0, 0 } end

used = fold_due(pending_key, counter_key, now, used)

local lost = 0
local carry = 0
if old_weight > 0 then
  if redis.call('ZREM', pending_key, old_weight .. ':' .. name) == 1 then
    if consumed > 0 then used = redis.call('INCRBY', counter_key, consumed) end
    carry = in_flight + keep
  else
    lost = 1
  end
end

local others = 0
for _, m in ipairs(redis.call('ZRANGE', pending_key, 0, -1)) do others = others + weight_of(m) end

local free = -1
if plan[1] then
  local limit = tonumber(plan[1])
  if plan[3] and tonumber(plan[3]) <= now then limit = tonumber(plan[2]) end
  if limit > 0 then free = math.max(0, limit - used - others - carry) end
end

local granted = 0
if want > 0 then
  granted = want
  if free >= 0 then granted = math.min(want, math.floor(free / divisor)) end
  if granted < grant_min then granted = 0 end
end

local weight = carry + granted
if weight > 0 then
  redis.call('ZADD', pending_key, deadline, weight .. ':' .. name)
  local ttl = redis.call('PTTL', counter_key)
  if ttl > 0 then redis.call('PEXPIRE', pending_key, ttl) end
end
if free >= 0 then free = free - granted end
return { 0, weight, granted, used, free, lost }
