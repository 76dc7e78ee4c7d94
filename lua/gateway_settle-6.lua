-- Settles a gateway call: consumes its exact cost from the hold (never more than the
-- hold), returns the rest, and writes the call's GATEWAY ledger entry carrying the usage
-- record for the workers. A cost of 0 writes the usage record only.
--
-- KEYS[1..6] and ARGV[1..4]: see includes/customer.lua.
-- ARGV[5]  gateway transaction id (held by gateway_hold-6.lua)
-- ARGV[6]  cost, credits (integer >= 0)
-- ARGV[7]  usage record, JSON (opaque here; persisted by the workers)
-- ARGV[8]  model id (the entry's description)
--
-- Returns {status, JSON {cost, returned, details, balance_after}, auto-consumed, TTL
-- entries}; status OK or E_NO_CONSUMABLE (no live hold: it was released by its TTL).

--@include customer

local txid = ARGV[5]
local cost = tonumber(ARGV[6])
local usage = ARGV[7]
local model = ARGV[8]

local now = now_ms()
local auto_consumed = expire_due(now)

local raw = redis.call('HGET', K_tx, txid)
if not raw then return { E_NO_CONSUMABLE, '', auto_consumed, ttl_entries_written } end
local tx = cjson.decode(raw)
if tx.k ~= 'gateway' or tx.st ~= 'frozen' then return { E_NO_CONSUMABLE, '', auto_consumed, ttl_entries_written } end

local held = tonumber(tx.a)
local charged = math.min(cost, held)
local left = charged
local details = {}
for _, h in ipairs(tx.holds) do
  local s = load_source(h.account_id)
  local n = tonumber(h.amount)
  local take = math.min(left, n)
  s.f = s.f - n
  s.u = s.u + take
  save_source(s)
  left = left - take
  if take > 0 then table.insert(details, { account_id = h.account_id, credit_type = h.credit_type, amount = N(take) }) end
end

local balance = 0
for _, r in ipairs(redis.call('HVALS', K_src)) do
  local s = decode_source(r)
  if s.w == tx.w and is_active(s, now) then balance = balance + (s.t - s.u - s.f) end
end

local result = cjson.encode({
  transaction_id = txid, cost = N(charged), returned = N(held - charged), reserved = tx.a,
  details = details, balance_after = N(balance), settled_at = N(now),
})
tx.st = 'settled'
tx.r = result
redis.call('HSET', K_tx, txid, cjson.encode(tx))
redis.call('ZREM', K_ttl, txid)

write_entry({
  type = (charged > 0 and 'GATEWAY') or 'USAGE',
  transaction_id = txid,
  amount = N(charged),
  returned_amount = N(held - charged),
  wallet = tx.w,
  details = details,
  reason = cjson.null,
  business_type = 'TOKEN_USAGE',
  description = model,
  state = 'settled',
  result = result,
  usage = usage,
}, now, false)

return { OK, result, auto_consumed, ttl_entries_written }
