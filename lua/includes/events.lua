-- Money events (docs/API.md, "Events and webhooks"): written by the script whose change
-- causes them, into the customer's outbox stream, in the same atomic step as the change.
-- The persist worker copies them to the `events` table in the transaction that writes
-- the ledger entries (src/ledger/queries.ts, insertEntries), so an event exists exactly
-- when its change does. Pulled in by includes/customer.lua (which calls it for TTL
-- settlements) and so by every customer script; other includes (budgets) call emit_event.
--
-- Why an entry of its own (type EVENT) and not a field on the causing entry: some changes
-- write no ledger entry (a gateway hold, a TTL release of a hold), one change may cause
-- several events, and the ledger entries stay as they are for every reader (the fold,
-- reconcile, the receipts), which skip EVENT entries as they skip USAGE ones.
--
-- An EVENT entry has the stream fields of a ledger entry (write_entry in
-- includes/customer.lua, the same names in the same order, so the stream keeps storing
-- the names once per node): `id` the event id, `seq` the meta seq as it stands (not
-- taken: events use no ledger number; archive_dead_sources reads it as a lower bound),
-- `type` 'EVENT', `transaction_id` the call's entry id base, `amount` '0', `state` the
-- event type, `result` the event's data as JSON, the rest ''. src/redis/codec.ts
-- (eventOfEntry) reads it back.
--
-- Event ids: 'evt_' .. the call's entry id base without its 'le_' .. '_' .. n, n counting
-- the events of the call from 1. A call's base is new to it, and a script does the same
-- thing for the same state, so the id is stable: a persist pass repeated after a crash
-- inserts nothing twice (insertEvents is ON CONFLICT DO NOTHING).

--@include clock

local EV_meta, EV_outbox, ev_project_id, ev_customer_id, ev_entry_base, ev_count
--@per-call
EV_meta, EV_outbox = KEYS[1], KEYS[6]
ev_project_id, ev_customer_id = ARGV[2], ARGV[3]
ev_entry_base = ARGV[4]
ev_count = 0
--@end

-- Writes one event of `type` (a type of src/events/store.ts) with `data` (a table:
-- amounts as strings, times as ms strings or '', see codec.ts) at `now` (ms, the script's
-- clock with its offset). `data.customer_id` is set to the script's customer. Returns
-- the event id.
local function emit_event(type, data, now)
  ev_count = ev_count + 1
  -- Made here, not per call: a call without events pays nothing for it.
  local id = 'evt_' .. string.gsub(ev_entry_base, '^le_', '') .. '_' .. ev_count
  data.customer_id = ev_customer_id
  redis.call('XADD', EV_outbox, '*',
    'id', id, 'seq', redis.call('HGET', EV_meta, 'seq') or '0', 'project_id', ev_project_id, 'customer_id', ev_customer_id,
    'at', string.format('%d', now), 'type', 'EVENT', 'transaction_id', ev_entry_base, 'amount', '0',
    'returned_amount', '', 'wallet', '', 'reason', '', 'business_type', '', 'description', '', 'state', type,
    'result', cjson.encode(data), 'usage', '', 'details', '[]', 'x', '')
  return id
end

-- deposit.created, written by lua/deposit-10.lua with the DEPOSIT entry. `s` is the new
-- source (includes/customer.lua), `wallet_total` the wallet's total after the deposit.
-- A deposit whose idempotency key is the id of the customer's open top-up request
-- (balance.top_up_requested, includes/alerts.lua) closes that request.
local function deposit_created(record_id, s, idem_key, wallet_total, now)
  emit_event('deposit.created', {
    deposit_id = record_id, account_id = s.id, wallet = s.w, label = s.l, amount = string.format('%d', s.t),
    wallet_total = string.format('%d', wallet_total),
    starts_at = (s.s and string.format('%d', s.s)) or '', expires_at = (s.e and string.format('%d', s.e)) or '',
    idempotency_key = (idem_key ~= '' and idem_key) or cjson.null,
  }, now)
  if string.sub(idem_key, 1, 4) == 'evt_' and redis.call('HGET', EV_meta, 'tu_o') == idem_key then
    redis.call('HDEL', EV_meta, 'tu_o', 'tu_t')
  end
end

-- charge.uncovered, written by lua/gateway_settle-10.lua with the GATEWAY entry: the
-- call cost `cost`, the hold and the wallet paid `charged`, the rest is the usage record's
-- uncovered_credits.
local function charge_uncovered(txid, wallet, model, cost, charged, now)
  emit_event('charge.uncovered', {
    transaction_id = txid, wallet = wallet, model = model, cost = string.format('%d', cost),
    charged = string.format('%d', charged), uncovered = string.format('%d', cost - charged),
  }, now)
end

-- freeze.consumed or freeze.released, written by settle_ttl (includes/customer.lua) with
-- the CONSUME or UNFREEZE entry of a freeze its TTL settled. `tx` is the freeze's record.
-- Gateway holds released by their TTL are no freezes of the API: no event.
local function freeze_settled_event(consumed, txid, tx, now)
  emit_event((consumed and 'freeze.consumed') or 'freeze.released', {
    transaction_id = txid, amount = tx.a, wallet = tx.w or cjson.null, business_type = tx.bt or cjson.null,
  }, now)
end
