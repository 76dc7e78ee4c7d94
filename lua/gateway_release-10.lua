-- Releases a gateway hold whose call was not billed (upstream error or timeout), and
-- writes the call's usage record (status failed) for the workers; no ledger entry.
--
-- KEYS[1..10] and ARGV[1..4]: see includes/customer.lua.
-- ARGV[5]  transaction_id: gateway transaction id
-- ARGV[6]  usage_record: usage record, JSON (opaque here)
--
-- Returns {status, '', auto-consumed, TTL entries}; status OK, REPLAY (released by the API
-- before), E_NO_CONSUMABLE (no such call, or settled) or E_ACCOUNT_NOT_FOUND (a source of
-- the hold is missing; nothing changed).

--@include customer
--@include alerts

local txid = ARGV[5]
local usage = ARGV[6]

local now = now_ms()
local auto_consumed = expire_due(now)

local tx = gateway_call(txid)
if tx == nil then return { E_NO_CONSUMABLE, '', auto_consumed, ttl_entries_written } end
if tx.st == 'released' and tx.by == 'api' then return { REPLAY, '', auto_consumed, ttl_entries_written } end
if tx.st ~= 'frozen' then return { E_NO_CONSUMABLE, '', auto_consumed, ttl_entries_written } end

local sources = load_hold_sources(tx.holds)
if sources == nil then return { E_ACCOUNT_NOT_FOUND, '', auto_consumed, ttl_entries_written } end
release_holds(tx.holds, sources)
Budget.settle(tx, tonumber(tx.a), 0, now)
tx.st = 'released'
tx.by = 'api'
redis.call('HSET', K_tx, txid, cjson.encode(tx))
redis.call('ZREM', K_ttl, txid)

write_entry({
  type = 'USAGE',
  transaction_id = txid,
  amount = '0',
  returned_amount = tx.a,
  wallet = tx.w,
  details = {},
  reason = cjson.null,
  business_type = 'TOKEN_USAGE',
  description = cjson.null,
  state = 'released',
  result = cjson.encode({ transaction_id = txid }),
  usage = usage,
}, now, false)
settle_sources(now)

-- After its entry: the trim reads the outbox by stream id against this time.
finalize('g:' .. txid)
return { OK, '', auto_consumed, ttl_entries_written }
