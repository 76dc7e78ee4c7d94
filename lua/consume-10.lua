-- Consumes a frozen transaction: the consumed part becomes used, the rest returns to
-- the sources it was frozen from.
--
-- KEYS[1..10] and ARGV[1..4]: see includes/customer.lua.
-- ARGV[5]  transaction_id: transaction id
-- ARGV[6]  amount: amount to consume, credits; '' for the whole frozen amount
-- ARGV[7]  description: description, '' for none
-- ARGV[8]  admitted: '0' when the plan's limit is reached: replays answer, nothing new applies
--
-- A freeze marked `pc` (its consume TTL made the plan count it when it was accepted,
-- freeze-10.lua) is consumed whatever `admitted` says, and its reply's fifth value is 1:
-- the caller gives its reservation back, so the operation is not counted twice.
--
-- Returns {status, result JSON, auto-consumed TTL count, TTL entries written, plan counted
-- already (1 or 0)}; status OK,
-- REPLAY, E_STALE_BINDING, E_NO_CONSUMABLE, E_ALREADY_CONSUMED, E_EXCEEDS_FROZEN, E_USAGE_LIMIT or
-- E_ACCOUNT_NOT_FOUND (a source of the holds is missing; nothing changed). The holds are
-- consumed in the order they were drawn (soonest expiry first). Errors that carry numbers
-- for their message put them in the second value instead of the result: E_EXCEEDS_FROZEN
-- {frozen}, E_NO_CONSUMABLE after a TTL release {released_at, due_at}, E_ALREADY_CONSUMED
-- after a TTL consume {consumed_at, due_at} (ms: when it settled, when it was due); '' otherwise.

--@include customer
--@include alerts

local txid = ARGV[5]
local requested = (ARGV[6] ~= '' and tonumber(ARGV[6])) or nil
local description = ARGV[7]
local admitted = ARGV[8] ~= '0'

local now = now_ms()
local auto_consumed = expire_due(now)

local raw = redis.call('HGET', K_tx, txid)
if not raw then
  if stale_binding() then return { E_STALE_BINDING, '', auto_consumed, ttl_entries_written } end
  return { E_NO_CONSUMABLE, '', auto_consumed, ttl_entries_written }
end
local tx = cjson.decode(raw)
if tx.k ~= 'freeze' then return { E_NO_CONSUMABLE, '', auto_consumed, ttl_entries_written } end
local frozen = tonumber(tx.a)
local amount = requested or frozen

if tx.st == 'consumed' then
  -- A repeat of the consume that settled it is a replay; anything else is too late.
  if tx.by == 'api' and tonumber(tx.ca) == amount then return { REPLAY, tx.cr, auto_consumed, ttl_entries_written } end
  local why = ''
  if tx.by == 'ttl' and tx.cr then why = cjson.encode({ consumed_at = cjson.decode(tx.cr).consumed_at, due_at = tx.ttla }) end
  return { E_ALREADY_CONSUMED, why, auto_consumed, ttl_entries_written }
end
if tx.st ~= 'frozen' then
  local why = ''
  if tx.st == 'released' and tx.by == 'ttl' and tx.ur then why = cjson.encode({ released_at = cjson.decode(tx.ur).unfrozen_at, due_at = tx.ttla }) end
  return { E_NO_CONSUMABLE, why, auto_consumed, ttl_entries_written }
end
if amount > frozen then return { E_EXCEEDS_FROZEN, cjson.encode({ frozen = N(frozen) }), auto_consumed, ttl_entries_written } end
local plan_counted = tx.pc == '1'
if not admitted and not plan_counted then return { E_USAGE_LIMIT, '', auto_consumed, ttl_entries_written } end

local sources = load_hold_sources(tx.holds)
if sources == nil then return { E_ACCOUNT_NOT_FOUND, '', auto_consumed, ttl_entries_written } end
local details = consume_holds(tx.holds, sources, amount)
Budget.settle(tx, frozen, amount, now)

local returned = frozen - amount
tx.st = 'consumed'
tx.ca = N(amount)
tx.by = 'api'
tx.cr = cjson.encode({
  transaction_id = txid,
  consumed_amount = N(amount),
  returned_amount = N(returned),
  consume_details = details,
  consumed_at = N(now),
})
redis.call('HSET', K_tx, txid, cjson.encode(tx))
redis.call('ZREM', K_ttl, txid)

write_entry({
  type = 'CONSUME',
  transaction_id = txid,
  amount = N(amount),
  returned_amount = N(returned),
  wallet = tx.w,
  details = details,
  reason = cjson.null,
  business_type = tx.bt or cjson.null,
  description = (description ~= '' and description) or cjson.null,
  state = 'consumed',
  result = tx.cr,
  x = (plan_counted and { pc = '1' }) or cjson.null,
}, now, false)
settle_sources(now)

-- After its entry: the trim reads the outbox by stream id against this time.
finalize('t:' .. txid)
return { OK, tx.cr, auto_consumed, ttl_entries_written, (plan_counted and 1) or 0 }
