-- Deducts an amount at once (no intermediate state): all of it, or nothing.
--
-- KEYS[1..10] and ARGV[1..4]: see includes/customer.lua.
-- ARGV[5]  transaction_id: transaction id
-- ARGV[6]  amount: amount, credits (integer > 0)
-- ARGV[7]  request_hash: request hash (hex) of the normalised parameters
-- ARGV[8]  wallet_filter: JSON array of wallet names, '' for all wallets
-- ARGV[9]  entry_wallet: wallet named in the ledger entry, '' to derive it from the details
-- ARGV[10] business_type: business type, '' for none
-- ARGV[11] description: description, '' for none
-- ARGV[12] admitted: '0' when the plan's limit is reached: replays answer, nothing new applies
-- ARGV[13] key_budget: the calling key's budget, as gateway_hold-10.lua's key_budget ('' for none)
-- ARGV[14] request_fields: JSON of the compared request fields, kept as the record's `q`, '' for none (src/ledger/conflicts.ts)
--
-- Returns {status, result JSON, auto-consumed TTL count, TTL entries written}; status OK, REPLAY,
-- E_CUSTOMER_NOT_FOUND, E_CONFLICT, E_INSUFFICIENT, E_INSUFFICIENT_SELECTED or
-- E_USAGE_LIMIT, E_STALE_BINDING or E_BUDGET_EXCEEDED (the second value the refusal JSON of
-- includes/budget.lua; nothing applied). With E_CONFLICT the second value is the conflict JSON of
-- begin_draw (includes/customer.lua). With E_INSUFFICIENT or E_INSUFFICIENT_SELECTED the second
-- value is the shortfall JSON instead: {available: {wallet: credits}, none: 'wallets of the
-- filter that never had a source'} (shortfall in includes/customer.lua), for the error's
-- message; '' with the other errors.

--@include customer
--@include alerts

local txid = ARGV[5]
local amount = tonumber(ARGV[6])
local request_hash = ARGV[7]
local filter = parse_filter(ARGV[8])
local entry_wallet = ARGV[9]
local business_type = ARGV[10]
local description = ARGV[11]
local admitted = ARGV[12] ~= '0'
local key_budget = ARGV[13]
local request_fields = (ARGV[14] ~= '' and ARGV[14]) or nil

local now = now_ms()
local auto_consumed = expire_due(now)

local status, picks, why = begin_draw('deduct', txid, request_hash, amount, filter, now, admitted)
if status == REPLAY then return { REPLAY, picks, auto_consumed, ttl_entries_written } end
if status ~= OK then return { status, why or '', auto_consumed, ttl_entries_written } end
-- Spending budgets (includes/budget.lua): refused past one, nothing applied but the
-- budget.exceeded event (its first refusal in the period; the caller marks the outbox
-- dirty after every refusal of this script, src/ledger/service.ts bindingScripts).
local budget = Budget.load(key_budget, now)
local over = Budget.check(budget, amount, now)
if over then finalize('t:' .. txid) return { E_BUDGET_EXCEEDED, over, auto_consumed, ttl_entries_written } end

for _, p in ipairs(picks) do add_used(p.source, p.take) end
Budget.add(budget, amount, 0)
local details = picks_to_details(picks)
local wallet = details_wallet(details, entry_wallet)
local result = cjson.encode({
  transaction_id = txid,
  deducted_amount = N(amount),
  deduct_details = details,
  deducted_at = N(now),
})
redis.call('HSET', K_tx, txid, cjson.encode({ k = 'deduct', st = 'done', h = request_hash, q = request_fields, a = N(amount), r = result }))

write_entry({
  type = 'DEDUCT',
  transaction_id = txid,
  amount = N(amount),
  returned_amount = cjson.null,
  wallet = wallet,
  details = details,
  reason = cjson.null,
  business_type = (business_type ~= '' and business_type) or cjson.null,
  description = (description ~= '' and description) or cjson.null,
  state = 'done',
  result = result,
  x = { h = request_hash },
}, now, false)
settle_sources(now)
balance_alerts(amount, now)

-- After its entry: the trim reads the outbox by stream id against this time.
finalize('t:' .. txid)
return { OK, result, auto_consumed, ttl_entries_written }
