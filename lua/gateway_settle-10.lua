-- Settles a gateway call: charges its exact cost from its hold first, and what the hold
-- does not cover (an answer dearer than the bound could foresee, or a hold that its TTL
-- released during a very long call) from the wallet's available credits, as far as they
-- go: a wallet never goes below zero. Returns the rest of the hold and writes the call's
-- GATEWAY ledger entry, carrying the usage record for the workers; a call that cost
-- nothing gets its entry too (amount 0): a settled call is a billable operation.
-- Idempotent: a settled call answers its stored result.
--
-- KEYS[1..10] and ARGV[1..4]: see includes/customer.lua.
-- ARGV[5]  transaction_id: gateway transaction id (held by gateway_hold-10.lua)
-- ARGV[6]  cost: cost, credits (integer >= 0)
-- ARGV[7]  usage_record: usage record, JSON (opaque here; persisted by the workers)
-- ARGV[8]  model_id: model id (the entry's description)
--
-- Returns {status, JSON {transaction_id, cost, shortfall, returned, reserved, details,
-- balance_after, settled_at}, auto-consumed, TTL entries, budget remaining}; the last is what
-- the tightest budget of the call has left (includes/budget.lua Budget.settle; '' without
-- one, and on REPLAY); `cost` is what was charged and
-- `shortfall` what the wallet could not pay of the call's cost. Status OK, REPLAY (settled
-- before: the stored result), E_NO_CONSUMABLE (no such call, or released by the API) or
-- E_ACCOUNT_NOT_FOUND (a source of the hold is missing; nothing changed).

--@include customer
--@include alerts

local txid = ARGV[5]
local cost = tonumber(ARGV[6])
local usage = ARGV[7]
local model = ARGV[8]

local now = now_ms()
local auto_consumed = expire_due(now)

local tx = gateway_call(txid)
if tx == nil then return { E_NO_CONSUMABLE, '', auto_consumed, ttl_entries_written } end
if tx.st == 'settled' then return { REPLAY, tx.r, auto_consumed, ttl_entries_written } end
local live = tx.st == 'frozen'
if not live and not (tx.st == 'released' and tx.by == 'ttl') then
  return { E_NO_CONSUMABLE, '', auto_consumed, ttl_entries_written }
end

-- The live sources, read once: the hold's own among them, and once the hold has ended the
-- wallet's available credits, which pay what the hold does not cover, as far as they go;
-- what is left of them is the balance after.
local sources = load_live()
local held = 0
local from_hold = 0
local details = {}
if live then
  local hold_sources = load_hold_sources(tx.holds, sources)
  if hold_sources == nil then return { E_ACCOUNT_NOT_FOUND, '', auto_consumed, ttl_entries_written } end
  held = tonumber(tx.a)
  from_hold = math.min(cost, held)
  details = consume_holds(tx.holds, hold_sources, from_hold)
end

-- A draw sees the same active, available credits as wallet_available(), so it can pay
-- `beyond` in full. A source charged from the hold and beyond it is one detail item.
local available = wallet_available(sources, tx.w, now)
local beyond = 0
if cost > from_hold then beyond = math.max(0, math.min(cost - from_hold, available)) end
if beyond > 0 then
  local index = {}
  for i, d in ipairs(details) do index[d.account_id] = i end
  local picks = draw_loaded(sources, beyond, { [tx.w] = true }, now)
  for _, p in ipairs(picks) do
    add_used(p.source, p.take)
    local i = index[p.source.id]
    if i then
      details[i].amount = N(tonumber(details[i].amount) + p.take)
    else
      table.insert(details, { account_id = p.source.id, credit_type = p.source.w, amount = N(p.take) })
      index[p.source.id] = #details
    end
  end
end
local charged = from_hold + beyond
local budget_left = Budget.settle(tx, held, charged, now)

local result = cjson.encode({
  transaction_id = txid, cost = N(charged), shortfall = N(cost - charged), returned = N(held - from_hold),
  reserved = tx.a, details = details, balance_after = N(available - beyond), settled_at = N(now),
})
tx.st = 'settled'
tx.r = result
redis.call('HSET', K_tx, txid, cjson.encode(tx))
redis.call('ZREM', K_ttl, txid)

write_entry({
  type = 'GATEWAY',
  transaction_id = txid,
  amount = N(charged),
  returned_amount = N(held - from_hold),
  wallet = tx.w,
  details = details,
  reason = cjson.null,
  business_type = 'TOKEN_USAGE',
  description = model,
  state = 'settled',
  result = result,
  usage = usage,
  x = (tx.ik and { gk = tx.ik }) or nil,
}, now, false)
settle_sources(now)
if cost > charged then charge_uncovered(txid, tx.w, model, cost, charged, now) end
balance_alerts(beyond - (held - from_hold), now)

-- After its entry: the trim reads the outbox by stream id against this time.
finalize('g:' .. txid)
return { OK, result, auto_consumed, ttl_entries_written, budget_left }
