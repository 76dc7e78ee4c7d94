-- Extends the hold of a gateway call served with `X-Service-Hold: incremental` by one
-- slice of output (docs/API.md, "Incremental holds"): the relay asks for it as the
-- streamed output approaches what is held. Checks the wallet's available credits and the
-- call's spending budgets (includes/budget.lua) as the hold does, and adds to the call's
-- hold record: its amount, its output tokens and its sources, never below zero. Writes no
-- ledger entry: the settlement writes the call's one GATEWAY entry.
-- Idempotent per (call, extension number): extensions are numbered 1, 2, ... in order, and
-- one whose number the record already has (`xn`) is answered REPLAY without holding again.
--
-- KEYS[1..10] and ARGV[1..4]: see includes/customer.lua.
-- ARGV[5]  transaction_id: gateway transaction id (held by gateway_hold-10.lua)
-- ARGV[6]  extension: the extension's number (integer >= 1)
-- ARGV[7]  output_cost: credits to add to the hold (integer >= 0)
-- ARGV[8]  output_tokens: output tokens they cover (added to the record's `ot`)
-- ARGV[9]  key_budget: the calling key's budget, as gateway_hold-10.lua's ARGV[15]
--
-- Returns {status, JSON {hold, output_tokens}, auto-consumed, TTL entries}; on OK the last
-- counts the balance alerts' events too (includes/alerts.lua), on E_BUDGET_EXCEEDED its
-- budget.exceeded event. Status OK, REPLAY (that extension applied before: nothing held
-- again), E_NO_CONSUMABLE (no such call, or it is no longer held: settled or released),
-- E_INSUFFICIENT (the wallet cannot cover the slice; the JSON is the shortfall of
-- includes/customer.lua) or E_BUDGET_EXCEEDED (a budget cannot: Budget.refusal's JSON).

--@include customer
--@include alerts

local txid = ARGV[5]
local extension = tonumber(ARGV[6])
local amount = tonumber(ARGV[7])
local tokens = tonumber(ARGV[8])
local key_budget = ARGV[9]

local now = now_ms()
local auto_consumed = expire_due(now)

local tx = gateway_call(txid)
if tx == nil or tx.st ~= 'frozen' then return { E_NO_CONSUMABLE, '', auto_consumed, ttl_entries_written } end
if extension <= (tonumber(tx.xn) or 0) then
  return { REPLAY, cjson.encode({ hold = tx.a, output_tokens = tx.ot }), auto_consumed, ttl_entries_written }
end

local sources = load_live()
local available = wallet_available(sources, tx.w, now)
local budget = Budget.load(key_budget, now)
local room, tight = Budget.room(budget)
if room ~= nil and amount > room and room < available then
  return { E_BUDGET_EXCEEDED, Budget.refuse(tight, amount, now), auto_consumed, ttl_entries_written + ev_count }
end
if amount > available then
  return { E_INSUFFICIENT, cjson.encode(shortfall({ [tx.w] = true }, now)), auto_consumed, ttl_entries_written }
end

if amount > 0 then
  local picks, status = draw_loaded(sources, amount, { [tx.w] = true }, now)
  if picks == nil then return { status, '', auto_consumed, ttl_entries_written } end
  -- A source drawn again adds to its item: one item per source, as the hold drew them.
  local index = {}
  for i, h in ipairs(tx.holds) do index[h.account_id] = i end
  for _, p in ipairs(picks) do
    add_frozen(p.source, p.take)
    local i = index[p.source.id]
    if i then
      tx.holds[i].amount = N(tonumber(tx.holds[i].amount) + p.take)
    else
      table.insert(tx.holds, { account_id = p.source.id, credit_type = p.source.w, amount = N(p.take) })
      index[p.source.id] = #tx.holds
    end
  end
end
tx.a = N(tonumber(tx.a) + amount)
tx.ot = N(tonumber(tx.ot) + tokens)
tx.xn = N(extension)
Budget.add(budget, 0, amount, tx)
redis.call('HSET', K_tx, txid, cjson.encode(tx))
settle_sources(now)
balance_alerts(amount, now)

return { OK, cjson.encode({ hold = tx.a, output_tokens = tx.ot }), auto_consumed, ttl_entries_written + ev_count }
