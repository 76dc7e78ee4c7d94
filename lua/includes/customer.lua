-- Shared helpers for the per-customer scripts. Pulled in by the loader (src/redis/scripts.ts)
-- where a script says `--@include customer`.
--
-- Every customer script takes the same seven KEYS, all hash-tagged {project:customer}:
--   KEYS[1] meta    hash   customer fields and counters
--   KEYS[2] src     hash   source id -> JSON source
--   KEYS[3] tx      hash   transaction id -> JSON transaction
--   KEYS[4] dep     hash   deposit idempotency key -> JSON {h, r}
--   KEYS[5] ttl     zset   pending TTL freezes scored by due time (ms)
--   KEYS[6] outbox  stream ledger entries waiting for PostgreSQL
--   KEYS[7] fin     zset   final records (t:<txid>, d:<key>, g:<gateway txid>) scored by
--                          when they became final (Redis ms, no clock offset): the trim
--                          (lua/trim-5.lua) archives them after the retention
-- and starts ARGV with:
--   ARGV[1] clock offset, ms (0 outside tests)
--   ARGV[2] project id
--   ARGV[3] customer id
--   ARGV[4] entry id base: ledger entries of this call are named base, base.t1, base.t2 ...
-- and ends it with:
--   ARGV[#ARGV] Redis time (ms, no clock offset) at which the binding that named this
--               customer was read (lua/bind-2.lua), '' when no binding led here. A
--               record absent while that read is older than BINDING_GRACE_MS may have
--               been archived after the read: the script refuses with E_STALE_BINDING,
--               nothing applied, and the caller starts over from the binding.
--
-- Amounts are integer credits. cjson prints numbers with 14 significant digits, so every
-- amount stored or returned is a string made by N() and read back with tonumber().

local K_meta, K_src, K_tx, K_dep, K_ttl, K_outbox, K_fin = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local clock_offset_ms = tonumber(ARGV[1])
local project_id = ARGV[2]
local customer_id = ARGV[3]
local entry_id_base = ARGV[4]
local binding_read_ms = tonumber(ARGV[#ARGV])

-- Status codes; src/redis/scripts.ts maps them to the error catalogue.
local OK = 0
local REPLAY = 1
local E_CUSTOMER_NOT_FOUND = 10
local E_CONFLICT = 11
local E_INSUFFICIENT = 12
local E_INSUFFICIENT_SELECTED = 13
local E_NO_CONSUMABLE = 14
local E_ALREADY_CONSUMED = 15
local E_NO_UNFREEZABLE = 16
local E_EXCEEDS_FROZEN = 17
local E_INVALID_EXPIRES = 18
local E_USAGE_LIMIT = 19
local E_ACCOUNT_NOT_FOUND = 20
local E_DEPOSIT_LIMIT = 21
local E_STALE_BINDING = 22

-- How long a binding read stays proof that its record was not archived: the trim deletes
-- a record only this long after it removed the record's binding (src/ledger/retention.ts,
-- archive_grace_ms, must be the same).
local BINDING_GRACE_MS = 5000

local function N(n)
  return string.format('%.0f', n)
end

-- 2^53 - 1, the largest integer that Lua and JS doubles hold exactly. The deposit script
-- keeps the sum of a customer's source totals at most this, so every sum made of them is
-- exact (src/ledger/amounts.ts, credits_sum_max).
local CREDITS_SUM_MAX = 9007199254740991

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + clock_offset_ms
end

-- Redis time in ms without the test clock offset: retention and binding reads use it.
local function redis_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- True when the record a binding led to is absent and the binding was read longer ago
-- than the grace: the record may have been archived after that read (see ARGV[#ARGV]).
local function stale_binding()
  return binding_read_ms ~= nil and redis_ms() - binding_read_ms > BINDING_GRACE_MS
end

-- Lists a record (or the binding of a failed operation) as final from now on: the trim
-- archives it once the retention has passed and its entries are in PostgreSQL. Called
-- after the record's entry is written: the trim takes the record as persisted once the
-- outbox's oldest stream id is later than this time (stream ids never go back).
local function finalize(member)
  redis.call('ZADD', K_fin, redis_ms(), member)
end

local function customer_exists()
  return redis.call('HEXISTS', K_meta, 'created_at') == 1
end

-- A source as stored: {id, w, l, t, u, f, s, e, q}; amounts and times as strings.
local function decode_source(raw)
  local s = cjson.decode(raw)
  return {
    id = s.id, w = s.w, l = s.l, q = tonumber(s.q),
    t = tonumber(s.t), u = tonumber(s.u), f = tonumber(s.f),
    s = (s.s ~= '' and tonumber(s.s)) or nil,
    e = (s.e ~= '' and tonumber(s.e)) or nil,
  }
end

local function encode_source(s)
  return cjson.encode({
    id = s.id, w = s.w, l = s.l, q = N(s.q),
    t = N(s.t), u = N(s.u), f = N(s.f),
    s = (s.s and N(s.s)) or '', e = (s.e and N(s.e)) or '',
  })
end

local function load_source(id)
  local raw = redis.call('HGET', K_src, id)
  if not raw then return nil end
  return decode_source(raw)
end

local function save_source(s)
  redis.call('HSET', K_src, s.id, encode_source(s))
end

-- The sources of a transaction's holds, in hold order, or nil when one is missing (a state
-- only corruption can make). Scripts load them all before changing any: a script that
-- failed halfway would keep its first writes.
local function load_hold_sources(holds)
  local sources = {}
  for i, h in ipairs(holds) do
    sources[i] = load_source(h.account_id)
    if sources[i] == nil then return nil end
  end
  return sources
end

-- Ends a transaction's holds, their sources loaded by load_hold_sources: every held credit
-- leaves `frozen`, and the first `amount` of them, in hold order (soonest expiry first, as
-- drawn), become used; the rest return to available. Returns the detail items of what was
-- used.
local function consume_holds(holds, sources, amount)
  local left = amount
  local details = {}
  for i, h in ipairs(holds) do
    local s = sources[i]
    local held = tonumber(h.amount)
    local take = math.min(left, held)
    s.f = s.f - held
    s.u = s.u + take
    save_source(s)
    left = left - take
    if take > 0 then table.insert(details, { account_id = h.account_id, credit_type = h.credit_type, amount = N(take) }) end
  end
  return details
end

-- Ends a transaction's holds with nothing used: their credits return to available.
-- Returns the detail items of what was released.
local function release_holds(holds, sources)
  local details = {}
  for i, h in ipairs(holds) do
    local s = sources[i]
    s.f = s.f - tonumber(h.amount)
    save_source(s)
    table.insert(details, { account_id = h.account_id, credit_type = h.credit_type, amount = h.amount })
  end
  return details
end

local function is_active(s, now)
  return (s.s == nil or s.s <= now) and (s.e == nil or s.e > now)
end

-- Credits of `wallet` available now: active sources, less what is used and frozen.
local function wallet_available(wallet, now)
  local available = 0
  for _, r in ipairs(redis.call('HVALS', K_src)) do
    local s = decode_source(r)
    if s.w == wallet and is_active(s, now) then available = available + (s.t - s.u - s.f) end
  end
  return available
end

local function next_seq()
  return redis.call('HINCRBY', K_meta, 'seq', 1)
end

local ttl_entries_written = 0

-- Appends one ledger entry to the outbox. `e` holds the entry's fields, amounts as
-- strings. The operation's own entry is named by the entry id base; entries of lazy TTL
-- settlements in the same call get `.t1`, `.t2`, ... so each id stays unique and stable.
local function write_entry(e, now, ttl_settlement)
  if ttl_settlement then
    ttl_entries_written = ttl_entries_written + 1
    e.id = entry_id_base .. '.t' .. ttl_entries_written
  else
    e.id = entry_id_base
  end
  e.seq = N(next_seq())
  e.project_id = project_id
  e.customer_id = customer_id
  e.at = N(now)
  redis.call('XADD', K_outbox, '*', 'e', cjson.encode(e))
  return e.id
end

local function details_wallet(details, fallback)
  if fallback and fallback ~= '' then return fallback end
  local w = nil
  for _, d in ipairs(details) do
    if w == nil then w = d.credit_type elseif w ~= d.credit_type then return cjson.null end
  end
  return w or cjson.null
end

-- Settles a frozen transaction as its TTL says. Writes an UNFREEZE or CONSUME entry with
-- `reason`. Returns 1 when it consumed (a billable operation), else 0.
local function settle_ttl(txid, tx, now)
  if tx.k == 'gateway' then
    -- A gateway hold outlived its call (the API process died mid-call). Holds write no
    -- ledger entry, so their release writes none either.
    local sources = load_hold_sources(tx.holds)
    if sources == nil then return nil end
    release_holds(tx.holds, sources)
    tx.st = 'released'
    tx.by = 'ttl'
    redis.call('HSET', K_tx, txid, cjson.encode(tx))
    finalize('g:' .. txid)
    return 0
  end
  local consumed = tx.ttlk == 'consume'
  local sources = load_hold_sources(tx.holds)
  if sources == nil then return nil end
  local details
  if consumed then
    details = consume_holds(tx.holds, sources, tonumber(tx.a))
  else
    details = release_holds(tx.holds, sources)
  end
  local at = N(now)
  if consumed then
    tx.st = 'consumed'
    tx.ca = tx.a
    tx.by = 'ttl'
    tx.cr = cjson.encode({ transaction_id = txid, consumed_amount = tx.a, returned_amount = '0',
      consume_details = details, consumed_at = at })
  else
    tx.st = 'released'
    tx.by = 'ttl'
    tx.ur = cjson.encode({ transaction_id = txid, unfrozen_amount = tx.a, unfreeze_details = details, unfrozen_at = at })
  end
  redis.call('HSET', K_tx, txid, cjson.encode(tx))
  write_entry({
    type = (consumed and 'CONSUME') or 'UNFREEZE',
    transaction_id = txid,
    amount = tx.a,
    returned_amount = (consumed and '0') or cjson.null,
    wallet = tx.w,
    details = details,
    reason = (consumed and 'ttl_consume') or 'ttl_release',
    business_type = tx.bt or cjson.null,
    description = cjson.null,
    state = tx.st,
    result = (consumed and tx.cr) or tx.ur,
  }, now, true)
  finalize('t:' .. txid)
  if consumed then return 1 end
  return 0
end

-- Settles every freeze whose TTL is due. Returns how many were auto-consumed.
local function expire_due(now)
  local due = redis.call('ZRANGEBYSCORE', K_ttl, '-inf', now)
  local auto_consumed = 0
  for _, txid in ipairs(due) do
    local settled = true
    local raw = redis.call('HGET', K_tx, txid)
    if raw then
      local tx = cjson.decode(raw)
      if tx.st == 'frozen' then
        local n = settle_ttl(txid, tx, now)
        if n == nil then
          -- A hold's source is missing: the freeze stays as it is and in the zset, for
          -- reconcile to report; the customer's other operations go on.
          redis.log(redis.LOG_WARNING, 'svc: TTL of ' .. txid .. ' not settled: a source of its holds is missing')
          settled = false
        else
          auto_consumed = auto_consumed + n
        end
      end
    end
    if settled then redis.call('ZREM', K_ttl, txid) end
  end
  return auto_consumed
end

-- Picks the funds for `amount` from eligible sources: active now, in the wallet filter
-- (a set, or nil for all wallets), available > 0; soonest expiry first (none last), then
-- oldest. Returns the list of {source, take} or nil and an error status.
local function draw(amount, filter, now)
  local eligible = {}
  local available_all = 0
  local available_selected = 0
  local raw = redis.call('HVALS', K_src)
  for _, r in ipairs(raw) do
    local s = decode_source(r)
    local avail = s.t - s.u - s.f
    if avail > 0 and is_active(s, now) then
      available_all = available_all + avail
      if filter == nil or filter[s.w] then
        available_selected = available_selected + avail
        table.insert(eligible, s)
      end
    end
  end
  if available_selected < amount then
    if filter ~= nil and available_all >= amount then return nil, E_INSUFFICIENT_SELECTED end
    return nil, E_INSUFFICIENT
  end
  table.sort(eligible, function(a, b)
    if a.e ~= b.e then
      if a.e == nil then return false end
      if b.e == nil then return true end
      return a.e < b.e
    end
    return a.q < b.q
  end)
  local picks = {}
  local left = amount
  for _, s in ipairs(eligible) do
    if left <= 0 then break end
    local take = math.min(left, s.t - s.u - s.f)
    table.insert(picks, { source = s, take = take })
    left = left - take
  end
  return picks, OK
end

local function parse_filter(arg)
  if arg == nil or arg == '' then return nil end
  local set = {}
  for _, w in ipairs(cjson.decode(arg)) do set[w] = true end
  return set
end

local function picks_to_details(picks)
  local details = {}
  for _, p in ipairs(picks) do
    table.insert(details, { account_id = p.source.id, credit_type = p.source.w, amount = N(p.take) })
  end
  return details
end

-- Begins a deduct or freeze on transaction `txid`: replay or conflict by the stored
-- transaction, else draws `amount` (when `admitted`: a billable operation the plan still
-- allows). Returns (status, stored result or picks).
local function begin_draw(kind, txid, request_hash, amount, filter, now, admitted)
  if not customer_exists() then
    finalize('t:' .. txid)
    return E_CUSTOMER_NOT_FOUND, nil
  end
  local prior = redis.call('HGET', K_tx, txid)
  if prior then
    local tx = cjson.decode(prior)
    if tx.k == kind and tx.h == request_hash then return REPLAY, tx.r end
    return E_CONFLICT, nil
  end
  if stale_binding() then return E_STALE_BINDING, nil end
  -- A refused operation stores no record, but its binding stays until the retention.
  if not admitted then
    finalize('t:' .. txid)
    return E_USAGE_LIMIT, nil
  end
  local picks, status = draw(amount, filter, now)
  if picks == nil then
    finalize('t:' .. txid)
    return status, nil
  end
  return OK, picks
end
