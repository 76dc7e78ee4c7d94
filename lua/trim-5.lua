-- The trim of one customer's idempotency records (src/ledger/retention.ts), in two modes.
--
-- 'scan': deletes the records whose bindings were archived at least the grace ago (the
-- arch zset), and lists the final records due for archiving: final longer than the
-- retention ago, and persisted (the outbox's oldest stream id is later than when they
-- became final; lua/includes/customer.lua writes `fin` after the record's entry).
-- 'mark': after the caller archived the listed bindings (lua/unbind-2.lua), moves those
-- still due from fin to arch, scored by when they may be deleted. A record restored
-- meanwhile (lua/restore-4.lua) was listed again with a later time, and is left alone.
--
-- KEYS[1] tx     hash    transaction id -> JSON transaction
-- KEYS[2] dep    hash    deposit idempotency key -> JSON {h, r}
-- KEYS[3] fin    zset    final records ('t:', 'g:' or 'd:' .. id) by when (Redis ms)
-- KEYS[4] arch   zset    records whose binding is archived, by when they may be deleted
-- KEYS[5] outbox stream  ledger entries waiting for PostgreSQL
-- scan: ARGV[1] 'scan', ARGV[2] retention ms, ARGV[3] most records handled per call
--   Returns {members due for archiving, the cutoff they are at or before, next due ms
--   ('' when nothing is listed), records deleted}.
-- mark: ARGV[1] 'mark', ARGV[2] the cutoff of the scan, ARGV[3] deletion time (ms),
--   ARGV[4..] members. Returns how many moved.

--@include bloom

local K_tx, K_dep, K_fin, K_arch, K_outbox = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local mode = ARGV[1]

local function store_of(member)
  if string.sub(member, 1, 1) == 'd' then return K_dep end
  return K_tx
end

if mode == 'mark' then
  local cutoff = tonumber(ARGV[2])
  local delete_at = ARGV[3]
  local moved = 0
  for i = 4, #ARGV do
    local m = ARGV[i]
    local score = redis.call('ZSCORE', K_fin, m)
    if score and tonumber(score) <= cutoff then
      redis.call('ZREM', K_fin, m)
      redis.call('ZADD', K_arch, delete_at, m)
      moved = moved + 1
    end
  end
  return moved
end

local retention_ms = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local now = bucket_now_ms()

local deleted = 0
for _, m in ipairs(redis.call('ZRANGEBYSCORE', K_arch, '-inf', now, 'LIMIT', 0, limit)) do
  redis.call('HDEL', store_of(m), string.sub(m, 3))
  redis.call('ZREM', K_arch, m)
  deleted = deleted + 1
end

local cutoff = now - retention_ms
local first = redis.call('XRANGE', K_outbox, '-', '+', 'COUNT', 1)[1]
if first then
  local oldest = tonumber(string.match(first[1], '^(%d+)'))
  if oldest - 1 < cutoff then cutoff = oldest - 1 end
end
-- Spent and expired sources leave Redis by the same rule (dead for longer than the
-- retention, their last entry persisted) through lua/trim_sources-10.lua, which the trim
-- (src/ledger/retention.ts) calls first for the same customer.
local due = redis.call('ZRANGEBYSCORE', K_fin, '-inf', cutoff, 'LIMIT', 0, limit)

local next_due = nil
local f = redis.call('ZRANGE', K_fin, 0, 0, 'WITHSCORES')
if f[2] then next_due = tonumber(f[2]) + retention_ms end
local a = redis.call('ZRANGE', K_arch, 0, 0, 'WITHSCORES')
if a[2] and (next_due == nil or tonumber(a[2]) < next_due) then next_due = tonumber(a[2]) end
-- More than one call's worth, or held back by the outbox: look again soon.
if #due == limit or deleted == limit then next_due = now end
if next_due ~= nil and first and next_due <= now then next_due = now + 1000 end

return { due, string.format('%.0f', cutoff), (next_due and string.format('%.0f', next_due)) or '', deleted }
