-- Binding an id to its owner in its project bucket (the hash `ids` beside its Bloom
-- filter `bloom`): the step before a money operation's customer script. lua/bind-2.lua
-- runs it alone; on a single Redis the bound scripts (lua/includes/bound.lua) run it in
-- the operation's own script.

--@include bloom

-- Statuses of bind_id (BindStatus in src/ledger/bindings.ts).
local BIND_NEW = 0
local BIND_BOUND = 1
local BIND_ABSENT = 2
local BIND_ARCHIVED = 3

-- Binds `id` to `owner` ('' to read only), or reads whom it is bound to. With `force` the
-- filter is not asked (PostgreSQL said it has no entries of the id: a false positive).
-- Returns {status, owner, bound at ms, read at ms}, read at the Redis time of this read:
-- BIND_NEW (bound now to `owner`), BIND_BOUND (owner and when), BIND_ABSENT (read only,
-- never bound or archived: the filter does not have it), BIND_ARCHIVED (absent, and the
-- filter has it: nothing written; the caller asks PostgreSQL).
local function bind_id(K_ids, K_bloom, id, owner, force)
  local now = bucket_now_ms()
  -- An id bound without the filter is most often new (a gateway call's receipt index
  -- entry): one HSETNX binds it, where HGET and HSET took two commands.
  if force and owner ~= '' and redis.call('HSETNX', K_ids, id, owner .. '|' .. string.format('%d', now)) == 1 then
    return { BIND_NEW, owner, now, now }
  end
  local v = redis.call('HGET', K_ids, id)
  if v then
    local o, at = parse_binding(v)
    return { BIND_BOUND, o, at, now }
  end
  if not force and bloom_has(K_bloom, id) then return { BIND_ARCHIVED, '', '', now } end
  if owner == '' then return { BIND_ABSENT, '', '', now } end
  redis.call('HSET', K_ids, id, owner .. '|' .. string.format('%d', now))
  return { BIND_NEW, owner, now, now }
end
