-- Shared by the plan scripts (lua/plan_reserve-3.lua, lua/plan_lease-3.lua). Pulled in by
-- the loader (src/redis/scripts.ts) where a script says `--@include plan`.

-- The operations a pending member stands for: `<weight>:<id>`, 1 when it names none.
local function weight_of(m) return tonumber(string.match(m, '^(%d+):')) or 1 end

-- Folds every pending member due at `now` (a reservation or lease whose process died, an
-- auto-consume recorded without one) into the counter. Returns the counter after it.
local function fold_due(pending_key, counter_key, now, used)
  local due = redis.call('ZRANGEBYSCORE', pending_key, '-inf', now)
  if #due == 0 then return used end
  local add = 0
  for _, m in ipairs(due) do add = add + weight_of(m) end
  redis.call('ZREMRANGEBYSCORE', pending_key, '-inf', now)
  return redis.call('INCRBY', counter_key, add)
end
