-- Adds a funding source to a customer's wallet, creating the customer when absent.
--
-- KEYS[1..10] and ARGV[1..4]: see includes/customer.lua.
-- ARGV[5]  idempotency_key: idempotency key, '' for none
-- ARGV[6]  request_hash: request hash (hex) of the normalised parameters
-- ARGV[7]  amount: amount, credits (integer > 0)
-- ARGV[8]  wallet: wallet name
-- ARGV[9]  label: source label
-- ARGV[10] starts_at_ms: starts_at, ms since epoch, '' for none
-- ARGV[11] expires_at_ms: expires_at, ms since epoch, '' for none
-- ARGV[12] name: '1' .. value when given, '0' when not
-- ARGV[13] email: same encoding
-- ARGV[14] metadata: '1' .. raw JSON when given, '0' when not
-- ARGV[15] description: description, '' for none
-- ARGV[16] source_id: source (account) id to create
-- ARGV[17] request_fields: JSON of the compared request fields, kept as the key's record's `q`, '' for none (src/ledger/conflicts.ts)
--
-- Returns {status, result JSON, auto-consumed TTL count, TTL entries written}; status OK, REPLAY, E_CONFLICT,
-- E_STALE_BINDING (with E_CONFLICT the second value is '{"first": <the first request's fields>}', or '' when
-- its record has none),
-- E_INVALID_EXPIRES or E_DEPOSIT_LIMIT (the customer's deposits would pass 2^53 - 1 credits). Result
-- amounts are strings, times ms strings.

--@include customer
--@include alerts

local idem_key = ARGV[5]
local request_hash = ARGV[6]
local amount = tonumber(ARGV[7])
local wallet = ARGV[8]
local label = ARGV[9]
local starts_ms = (ARGV[10] ~= '' and tonumber(ARGV[10])) or nil
local expires_ms = (ARGV[11] ~= '' and tonumber(ARGV[11])) or nil
local name_arg, email_arg, metadata_arg = ARGV[12], ARGV[13], ARGV[14]
local description = ARGV[15]
local source_id = ARGV[16]
local request_fields = (ARGV[17] ~= '' and ARGV[17]) or nil

local now = now_ms()
local auto_consumed = expire_due(now)

if idem_key ~= '' then
  local prior = redis.call('HGET', K_dep, idem_key)
  if prior then
    local p = cjson.decode(prior)
    if p.h == request_hash then return { REPLAY, p.r, auto_consumed, ttl_entries_written } end
    return { E_CONFLICT, (p.q and cjson.encode({ first = p.q })) or '', auto_consumed, ttl_entries_written }
  end
  if stale_binding() then return { E_STALE_BINDING, '', auto_consumed, ttl_entries_written } end
end

-- A refused deposit stores no record, but its key's binding stays until the retention.
local function refuse(status)
  if idem_key ~= '' then finalize('d:' .. idem_key) end
  return { status, '', auto_consumed, ttl_entries_written }
end

if expires_ms ~= nil and (expires_ms <= now or (starts_ms ~= nil and expires_ms <= starts_ms)) then
  return refuse(E_INVALID_EXPIRES)
end

-- The sum of every source's total, expired and archived ones included (meta src_total):
-- a bound on every sum kept of this customer, which must stay exact.
local deposited = tonumber(redis.call('HGET', K_meta, 'src_total') or '0')
if deposited + amount > CREDITS_SUM_MAX then
  return refuse(E_DEPOSIT_LIMIT)
end

-- The wallet's total after the deposit: its live sources active now, and its dead ones
-- that still count (spent, not expired). Read before anything is written.
expire_spent(now)
local wallet_total = tonumber(redis.call('HGET', K_meta, 'wt:' .. wallet) or '0')
walk_live(function(s)
  if s.w == wallet and is_active(s, now) then wallet_total = wallet_total + s.t end
end)

local created = nil
if not customer_exists() then
  local function opt(arg) if string.sub(arg, 1, 1) == '1' then return string.sub(arg, 2) end return nil end
  local name, email, metadata = opt(name_arg), opt(email_arg), opt(metadata_arg)
  redis.call('HSET', K_meta, 'created_at', N(now))
  if name then redis.call('HSET', K_meta, 'name', name) end
  if email then redis.call('HSET', K_meta, 'email', email) end
  if metadata then redis.call('HSET', K_meta, 'metadata', metadata) end
  created = { created_at = N(now), name = name or cjson.null, email = email or cjson.null, metadata = metadata or cjson.null }
end

local seq = redis.call('HINCRBY', K_meta, 'src_seq', 1)
local source = { id = source_id, w = wallet, l = label, q = seq, t = amount, u = 0, f = 0, s = starts_ms, e = expires_ms }
create_source(source)
if is_active(source, now) then wallet_total = wallet_total + amount end

local record_id = entry_id_base
local details = { { account_id = source_id, credit_type = wallet, amount = N(amount) } }
local result = cjson.encode({
  customer_id = customer_id,
  account_id = source_id,
  credit_type = wallet,
  total_amount = N(wallet_total),
  added_amount = N(amount),
  starts_at = (starts_ms and N(starts_ms)) or '',
  expires_at = (expires_ms and N(expires_ms)) or '',
  record_id = record_id,
})

if idem_key ~= '' then
  redis.call('HSET', K_dep, idem_key, cjson.encode({ h = request_hash, q = request_fields, r = result }))
end

write_entry({
  type = 'DEPOSIT',
  transaction_id = record_id,
  amount = N(amount),
  returned_amount = cjson.null,
  wallet = wallet,
  details = details,
  reason = cjson.null,
  business_type = cjson.null,
  description = (description ~= '' and description) or cjson.null,
  state = cjson.null,
  result = result,
  x = {
    ik = (idem_key ~= '' and idem_key) or cjson.null,
    h = request_hash,
    source = encode_source(source),
    customer = created or cjson.null,
  },
}, now, false)
deposit_created(record_id, source, idem_key, wallet_total, now)

-- After its entry: the trim reads the outbox by stream id against this time.
if idem_key ~= '' then finalize('d:' .. idem_key) end
return { OK, result, auto_consumed, ttl_entries_written }
