-- Extends the hold of a gateway call served with `X-Service-Hold: incremental` by one
-- slice of output, or what the wallet affords of it (docs/API.md, "Incremental holds"): the relay asks for it as the
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
-- ARGV[7]  output_price: output price, credits per million tokens (integer >= 0)
-- ARGV[8]  output_tokens: output tokens wanted per answer (a whole slice, or what is left
--          of the limit); when the wallet or a budget cannot cover them, as many as it
--          can (at least one): the stream then ends only when not one more token fits
-- ARGV[9]  key_budget: the calling key's budget, as gateway_hold-10.lua's ARGV[15]
-- ARGV[10] answers: answers the upstream generates (OpenAI `n`, integer >= 1)
--
-- Returns {status, JSON {hold, output_tokens}, auto-consumed, TTL entries}: output_tokens
-- is the record's `ot` (per answer, the first hold's and every extension's), from which the
-- relay takes what it may forward (also on REPLAY); on OK the last
-- counts the balance alerts' events too (includes/alerts.lua), on E_BUDGET_EXCEEDED its
-- budget.exceeded event. Status OK, REPLAY (that extension applied before: nothing held
-- again), E_NO_CONSUMABLE (no such call, or it is no longer held: settled or released),
-- E_INSUFFICIENT (the wallet cannot cover one more output token; the JSON is the shortfall
-- of includes/customer.lua) or E_BUDGET_EXCEEDED (a budget cannot: Budget.refusal's JSON).

--@include customer
--@include alerts

local txid = ARGV[5]
local extension = tonumber(ARGV[6])
local out_price = tonumber(ARGV[7])
local tokens = tonumber(ARGV[8])
local key_budget = ARGV[9]
local answers = tonumber(ARGV[10]) or 1

local function out_cost(t) return math.ceil(t * answers * out_price / 1000000) end

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
local by_budget = room ~= nil and room < available
local affords = (by_budget and room) or available
local amount = out_cost(tokens)
if amount > affords then
  -- Less than the slice: as many tokens as fit, so that the wallet is used to its last token.
  tokens = math.floor(affords * 1000000 / (out_price * answers))
  amount = out_cost(tokens)
end
if tokens < 1 and by_budget then
  return { E_BUDGET_EXCEEDED, Budget.refuse(tight, out_cost(1), now), auto_consumed, ttl_entries_written + ev_count }
end
if tokens < 1 then
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
