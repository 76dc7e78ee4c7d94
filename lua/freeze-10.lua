-- Freezes an amount for a staged deduction, with an optional TTL that releases or
-- consumes it automatically when it is not settled in time.
--
-- KEYS[1..10] and ARGV[1..4]: see includes/customer.lua.
-- ARGV[5]  transaction_id: transaction id
-- ARGV[6]  amount: amount, credits (integer > 0)
-- ARGV[7]  request_hash: request hash (hex) of the normalised parameters
-- ARGV[8]  wallet_filter: JSON array of wallet names, '' for all wallets
-- ARGV[9]  entry_wallet: wallet named in the ledger entry, '' to derive it from the details
-- ARGV[10] business_type: business type, '' for none
-- ARGV[11] description: description, '' for none
-- ARGV[12] ttl_kind: 'release', 'consume' or '' for none
-- ARGV[13] ttl_seconds: TTL, seconds (ignored without a kind)
-- ARGV[14] admitted: '0' when the plan's limit is reached; read only with ttl_kind 'consume'
-- ARGV[15] key_budget: the calling key's budget, as gateway_hold-10.lua's key_budget ('' for none)
-- ARGV[16] request_fields: JSON of the compared request fields, kept as the record's `q`, '' for none (src/ledger/conflicts.ts)
--
-- A freeze whose TTL consumes it is the billable operation itself: the plan counts it
-- when it is accepted (the caller's reservation, refused here with E_USAGE_LIMIT when not
-- admitted), and the transaction is marked `pc` (plan counted) so that neither its TTL
-- consume nor a consume through the API counts it again or refuses it on the plan.
--
-- Returns {status, result JSON, auto-consumed TTL count, TTL entries written}; status, and
-- the shortfall or budget JSON of a refusal, as deduct-10.lua (E_USAGE_LIMIT only with ttl_kind
-- 'consume'). The result carries auto_settle_at (ms) so the caller can schedule the
-- expire job.

--@include customer
--@include alerts

local txid = ARGV[5]
local amount = tonumber(ARGV[6])
local request_hash = ARGV[7]
local filter = parse_filter(ARGV[8])
local entry_wallet = ARGV[9]
local business_type = ARGV[10]
local description = ARGV[11]
local ttl_kind = ARGV[12]
local ttl_seconds = tonumber(ARGV[13]) or 0
local plan_counted = ttl_kind == 'consume'
local admitted = not plan_counted or ARGV[14] ~= '0'
local key_budget = ARGV[15]
local request_fields = (ARGV[16] ~= '' and ARGV[16]) or nil

local now = now_ms()
local auto_consumed = expire_due(now)

local status, picks, why = begin_draw('freeze', txid, request_hash, amount, filter, now, admitted)
if status == REPLAY then return { REPLAY, picks, auto_consumed, ttl_entries_written } end
if status ~= OK then return { status, why or '', auto_consumed, ttl_entries_written } end
-- Spending budgets (includes/budget.lua): refused past one, nothing applied but the
-- budget.exceeded event (its first refusal in the period; the caller marks the outbox
-- dirty after every refusal of this script, src/ledger/service.ts bindingScripts).
local budget = Budget.load(key_budget, now)
local over = Budget.check(budget, amount, now)
if over then finalize('t:' .. txid) return { E_BUDGET_EXCEEDED, over, auto_consumed, ttl_entries_written } end

for _, p in ipairs(picks) do add_frozen(p.source, p.take) end
local details = picks_to_details(picks)
local wallet = details_wallet(details, entry_wallet)
local settle_at = ''
if ttl_kind ~= '' then settle_at = N(now + ttl_seconds * 1000) end
local result = cjson.encode({
  transaction_id = txid,
  frozen_amount = N(amount),
  freeze_details = details,
  frozen_at = N(now),
  auto_settle = (ttl_kind ~= '' and ttl_kind) or cjson.null,
  auto_settle_at = settle_at,
})
local tx = {
  k = 'freeze', st = 'frozen', h = request_hash, q = request_fields, a = N(amount), holds = details, w = wallet,
  bt = (business_type ~= '' and business_type) or nil, r = result,
}
if ttl_kind ~= '' then
  tx.ttlk = ttl_kind
  tx.ttla = settle_at
  redis.call('ZADD', K_ttl, settle_at, txid)
end
if plan_counted then tx.pc = '1' end
Budget.add(budget, 0, amount, tx)
redis.call('HSET', K_tx, txid, cjson.encode(tx))

write_entry({
  type = 'FREEZE',
  transaction_id = txid,
  amount = N(amount),
  returned_amount = cjson.null,
  wallet = wallet,
  details = details,
  reason = cjson.null,
  business_type = tx.bt or cjson.null,
  description = (description ~= '' and description) or cjson.null,
  state = 'frozen',
  result = result,
  x = { h = request_hash, ttlk = tx.ttlk or cjson.null, ttla = tx.ttla or cjson.null, pc = tx.pc or cjson.null },
}, now, false)
settle_sources(now)
balance_alerts(amount, now)

return { OK, result, auto_consumed, ttl_entries_written }
