-- Unfreezes a frozen transaction: all of its frozen credits return to their sources.
--
-- KEYS[1..10] and ARGV[1..4]: see includes/customer.lua.
-- ARGV[5]  transaction_id: transaction id
-- ARGV[6]  description: description, '' for none
--
-- Returns {status, result JSON, auto-consumed TTL count, TTL entries written}; status OK,
-- REPLAY, E_STALE_BINDING, E_NO_UNFREEZABLE or E_ACCOUNT_NOT_FOUND (a source of the holds is missing;
-- nothing changed). E_NO_UNFREEZABLE after a TTL settlement carries {released_at, due_at}
-- or {consumed_at, due_at} (ms: when it settled, when it was due) in the second value, for its message; '' otherwise.

--@include customer
--@include alerts

local txid = ARGV[5]
local description = ARGV[6]

local now = now_ms()
local auto_consumed = expire_due(now)

local raw = redis.call('HGET', K_tx, txid)
if not raw then
  if stale_binding() then return { E_STALE_BINDING, '', auto_consumed, ttl_entries_written } end
  return { E_NO_UNFREEZABLE, '', auto_consumed, ttl_entries_written }
end
local tx = cjson.decode(raw)
if tx.k ~= 'freeze' then return { E_NO_UNFREEZABLE, '', auto_consumed, ttl_entries_written } end
if tx.st == 'unfrozen' then return { REPLAY, tx.ur, auto_consumed, ttl_entries_written } end
if tx.st ~= 'frozen' then
  local why = ''
  if tx.by == 'ttl' and tx.st == 'released' and tx.ur then why = cjson.encode({ released_at = cjson.decode(tx.ur).unfrozen_at, due_at = tx.ttla }) end
  if tx.by == 'ttl' and tx.st == 'consumed' and tx.cr then why = cjson.encode({ consumed_at = cjson.decode(tx.cr).consumed_at, due_at = tx.ttla }) end
  return { E_NO_UNFREEZABLE, why, auto_consumed, ttl_entries_written }
end

local sources = load_hold_sources(tx.holds)
if sources == nil then return { E_ACCOUNT_NOT_FOUND, '', auto_consumed, ttl_entries_written } end
local details = release_holds(tx.holds, sources)
Budget.settle(tx, tonumber(tx.a), 0, now)

tx.st = 'unfrozen'
tx.by = 'api'
tx.ur = cjson.encode({ transaction_id = txid, unfrozen_amount = tx.a, unfreeze_details = details, unfrozen_at = N(now) })
redis.call('HSET', K_tx, txid, cjson.encode(tx))
redis.call('ZREM', K_ttl, txid)

write_entry({
  type = 'UNFREEZE',
  transaction_id = txid,
  amount = tx.a,
  returned_amount = cjson.null,
  wallet = tx.w,
  details = details,
  reason = cjson.null,
  business_type = tx.bt or cjson.null,
  description = (description ~= '' and description) or cjson.null,
  state = 'unfrozen',
  result = tx.ur,
}, now, false)
settle_sources(now)

-- After its entry: the trim reads the outbox by stream id against this time.
finalize('t:' .. txid)
return { OK, tx.ur, auto_consumed, ttl_entries_written }
