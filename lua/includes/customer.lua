-- Shared helpers for the per-customer scripts. Pulled in by the loader (src/redis/scripts.ts)
-- where a script says `--@include customer`.
--
-- Every customer script takes the same ten KEYS, all hash-tagged {project:customer}:
--   KEYS[1] meta    hash   customer fields and counters
--   KEYS[2] src     hash   sources, a few fields each (see "Sources" below)
--   KEYS[3] tx      hash   transaction id -> JSON transaction
--   KEYS[4] dep     hash   deposit idempotency key -> JSON {h, r}
--   KEYS[5] ttl     zset   pending TTL freezes scored by due time (ms)
--   KEYS[6] outbox  stream ledger entries waiting for PostgreSQL
--   KEYS[7] live    zset   sources that may still give credits, in draw order
--   KEYS[8] dead    zset   sources that can give nothing more, scored by when they died (ms)
--   KEYS[9] spent   zset   dead sources still counted in wallet totals until they expire
--   KEYS[10] fin    zset   final records (t:<txid>, d:<key>, g:<gateway txid>) scored by
--                          when they became final (Redis ms, no clock offset): the trim
--                          (lua/trim-5.lua) archives them after the retention
-- and starts ARGV with:
--   ARGV[1] clock_offset_ms: clock offset, ms (0 outside tests)
--   ARGV[2] project_id: project id
--   ARGV[3] customer_id: customer id
--   ARGV[4] entry_id_base: entry id base: ledger entries of this call are named base, base.t1, base.t2 ...
-- and ends it with:
--   ARGV[#ARGV] binding_read_at_ms: Redis time (ms, no clock offset) at which the binding that named this
--               customer was read (lua/bind-2.lua), '' when no binding led here. A
--               record absent while that read is older than BINDING_GRACE_MS may have
--               been archived after the read: the script refuses with E_STALE_BINDING,
--               nothing applied, and the caller starts over from the binding.
--
-- Amounts are integer credits. cjson prints numbers with 14 significant digits, so every
-- amount stored or returned is a string made by N() and read back with tonumber().

--@include clock
--@include events
--@include budget

-- Per call: the loader (src/redis/scripts.ts) runs each `--@per-call` block at the start of
-- every call, and the rest of an include once, when Redis loads the library.
local K_meta, K_src, K_tx, K_dep, K_ttl, K_outbox, K_live, K_dead, K_spent, K_fin
local clock_offset_ms, project_id, customer_id, entry_id_base, binding_read_ms
--@per-call
K_meta, K_src, K_tx, K_dep, K_ttl, K_outbox = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
K_live, K_dead, K_spent, K_fin = KEYS[7], KEYS[8], KEYS[9], KEYS[10]
clock_offset_ms = tonumber(ARGV[1])
project_id = ARGV[2]
customer_id = ARGV[3]
entry_id_base = ARGV[4]
binding_read_ms = tonumber(ARGV[#ARGV])
--@end

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
-- Answered by the binding step of a bound script (includes/bound.lua), before anything is
-- written: consume or unfreeze named another customer than the binding's, or the id's
-- binding may be archived (the service asks PostgreSQL through the two-step path).
local E_SCOPE_MISMATCH = 23
local E_BINDING_ARCHIVED = 24
-- A spending budget would be exceeded (includes/budget.lua): nothing applied.
local E_BUDGET_EXCEEDED = 40

-- How long a binding read stays proof that its record was not archived: the trim deletes
-- a record only this long after it removed the record's binding (src/ledger/retention.ts,
-- archive_grace_ms, must be the same).
local BINDING_GRACE_MS = 5000

-- '%d' (a C long, 64 bits here) formats an integer without the float path that '%.0f'
-- and Lua's own number-to-string conversion take, the most expensive C call of a deduct.
local function N(n)
  return string.format('%d', n)
end

-- The ms part of the stream id of the last outbox entry this script wrote (a string), nil
-- before the first (see finalize).
local last_entry_ms
--@per-call
last_entry_ms = nil
--@end

-- 2^53 - 1, the largest integer that Lua and JS doubles hold exactly. The deposit script
-- keeps the sum of a customer's source totals at most this, so every sum made of them is
-- exact (src/ledger/amounts.ts, credits_sum_max).
local CREDITS_SUM_MAX = 9007199254740991

local function now_ms()
  return redis_ms() + clock_offset_ms
end

-- True when the record a binding led to is absent and the binding was read longer ago
-- than the grace: the record may have been archived after that read (see ARGV[#ARGV]).
local function stale_binding()
  return binding_read_ms ~= nil and redis_ms() - binding_read_ms > BINDING_GRACE_MS
end

-- Lists a record (or the binding of a failed operation) as final from now on: the trim
-- archives it once the retention has passed and its entries are in PostgreSQL. Called
-- after the record's entry is written: the trim takes the record as persisted once the
-- outbox's oldest stream id is later than this time (stream ids never go back). The time
-- is the ms part of the script's last XADD id when it wrote an entry (the record's own
-- is at or before it), else the script's time (includes/clock.lua).
local function finalize(member)
  redis.call('ZADD', K_fin, last_entry_ms or N(redis_ms()), member)
end

local function customer_exists()
  return redis.call('HEXISTS', K_meta, 'created_at') == 1
end

-- Sources. A script reads only the sources it draws from or settles, never all of them.
--   src hash   <id>    the static fields, written once: JSON {w, l, t, s, e, q}, strings
--                      (wallet, label, total, starts and expires in ms or '', creation seq)
--              <id>:u  used, <id>:f frozen: integers changed with HINCRBY
--              <id>:d  the meta `seq` when the source died: every ledger entry that moved
--                      it has a seq at or below it (dead sources only)
--   live zset  the sources that may still give credits (available > 0, frozen > 0, or not
--              yet started), scored by expiry ms ('+inf' for none), member = creation seq
--              on 15 digits .. ':' .. id: ZRANGE order is the draw order, soonest expiry
--              first, none last, then oldest
--   dead zset  id -> when it died (ms): spent or expired, nothing frozen. It can never
--              give or take credits again, so no script reads it; archive_dead_sources
--              deletes it once PostgreSQL holds its last entry.
--   spent zset dead sources spent while active: they count in their wallet's totals
--              (meta `wt:<wallet>` and `wu:<wallet>`) until they expire. Member
--              `id|total|used|wallet`, scored by expiry ms (sources without expiry are
--              not listed: they count for good).
-- meta `src_total` is the sum of every source's total (the deposit cap), `src_archived`
-- is '1' once a source was archived (the full customer view then reads PostgreSQL too).

local function is_active(s, now)
  return (s.s == nil or s.s <= now) and (s.e == nil or s.e > now)
end

-- Dead: nothing frozen, and nothing left to draw (spent) or no time left (expired).
local function is_dead(s, now)
  return s.f <= 0 and (s.u >= s.t or (s.e ~= nil and s.e <= now))
end

local function live_member(s)
  return string.format('%015d', s.q) .. ':' .. s.id
end

local function live_score(s)
  return (s.e and N(s.e)) or '+inf'
end

local function source_from(id, static, used, frozen)
  local st = cjson.decode(static)
  return {
    id = id, w = st.w, l = st.l, q = tonumber(st.q), t = tonumber(st.t),
    u = tonumber(used) or 0, f = tonumber(frozen) or 0,
    s = (st.s ~= '' and tonumber(st.s)) or nil,
    e = (st.e ~= '' and tonumber(st.e)) or nil,
  }
end

-- The whole source in one JSON (the deposit entry's `x.source`, the view's listing).
local function encode_source(s)
  return cjson.encode({
    id = s.id, w = s.w, l = s.l, q = N(s.q),
    t = N(s.t), u = N(s.u), f = N(s.f),
    s = (s.s and N(s.s)) or '', e = (s.e and N(s.e)) or '',
  })
end

-- Sources by id, in one HMGET: a list in the same order, false where one is missing.
local function load_sources(ids)
  local fields = {}
  for _, id in ipairs(ids) do
    fields[#fields + 1] = id
    fields[#fields + 1] = id .. ':u'
    fields[#fields + 1] = id .. ':f'
  end
  local out = {}
  if #ids == 0 then return out end
  local r = redis.call('HMGET', K_src, unpack(fields))
  for i, id in ipairs(ids) do
    local static = r[3 * i - 2]
    out[i] = (static and source_from(id, static, r[3 * i - 1], r[3 * i])) or false
  end
  return out
end

local function create_source(s)
  redis.call('HSET', K_src, s.id, cjson.encode({
    w = s.w, l = s.l, q = N(s.q), t = N(s.t), s = (s.s and N(s.s)) or '', e = (s.e and N(s.e)) or '',
  }), s.id .. ':u', N(s.u), s.id .. ':f', N(s.f))
  redis.call('ZADD', K_live, live_score(s), live_member(s))
  redis.call('HINCRBY', K_meta, 'src_total', N(s.t))
  -- Registers the wallet: the balance lists it even once all its sources are archived.
  redis.call('HSETNX', K_meta, 'wt:' .. s.w, '0')
  redis.call('HSETNX', K_meta, 'wu:' .. s.w, '0')
end

-- Sources whose used or frozen this script changed: settle_sources looks at them once
-- the script's entries are written.
local touched
--@per-call
touched = {}
--@end

local function add_used(s, delta)
  touched[s.id] = s
  if delta == 0 then return end
  s.u = s.u + delta
  redis.call('HINCRBY', K_src, s.id .. ':u', N(delta))
end

local function add_frozen(s, delta)
  touched[s.id] = s
  if delta == 0 then return end
  s.f = s.f + delta
  redis.call('HINCRBY', K_src, s.id .. ':f', N(delta))
end

-- Writes a source's EXPIRE entry and its source.expired event (set below, once
-- write_entry exists): see retire.
local expired_entry

-- balance_alerts (includes/alerts.lua) where the script includes it, else nil: the
-- alerts of credits that left by expiry (expire_sources).
local expiry_alerts = nil

-- Moves a dead source from live to dead, recording the meta seq: called after the
-- script wrote the entries that moved it, so its last entry is at or below that seq. A
-- source spent while active goes on counting in its wallet's totals. A source that dies
-- expired with credits left writes its EXPIRE entry and source.expired event here, before
-- the seq is recorded: the ZREM makes the death, and so the entry, happen once per source
-- whichever script (an operation, a read, the sweep's expire) sees it first. Returns the
-- credits that expired (0 for none).
local function retire(s, now)
  if redis.call('ZREM', K_live, live_member(s)) == 0 then return 0 end
  local expired = 0
  if s.e ~= nil and s.e <= now and s.t - s.u > 0 then
    expired = s.t - s.u
    expired_entry(s, expired, now)
  end
  redis.call('ZADD', K_dead, N(now), s.id)
  redis.call('HSET', K_src, s.id .. ':d', redis.call('HGET', K_meta, 'seq') or '0')
  if is_active(s, now) then
    redis.call('HINCRBY', K_meta, 'wt:' .. s.w, N(s.t))
    redis.call('HINCRBY', K_meta, 'wu:' .. s.w, N(s.u))
    if s.e then redis.call('ZADD', K_spent, N(s.e), s.id .. '|' .. N(s.t) .. '|' .. N(s.u) .. '|' .. s.w) end
  end
  return expired
end

-- Retires the touched sources that are dead now. Every script that changes sources calls
-- it after writing its entries (expire_due after the TTL entries).
local function settle_sources(now)
  for _, s in pairs(touched) do
    if is_dead(s, now) then retire(s, now) end
  end
  touched = {}
end

-- Spent sources that expired by now leave their wallet's totals. Scripts that read the
-- totals (view, deposit) call it first.
local function expire_spent(now)
  local due = redis.call('ZRANGEBYSCORE', K_spent, '-inf', N(now))
  if #due == 0 then return end
  for _, m in ipairs(due) do
    local t, u, w = string.match(m, '^[^|]*|(%d+)|(%d+)|(.*)$')
    redis.call('HINCRBY', K_meta, 'wt:' .. w, '-' .. t)
    redis.call('HINCRBY', K_meta, 'wu:' .. w, '-' .. u)
  end
  redis.call('ZREMRANGEBYSCORE', K_spent, '-inf', N(now))
end

local live_batch_max = 16

-- Calls visit(source) for each live source in draw order until it returns true. Reads the
-- sources in batches of 1, 2, 4 ... live_batch_max (one ZRANGE and one HMGET each): a draw
-- that the first source covers loads only that one. A member whose source is missing (a
-- state only corruption makes) is skipped, for reconcile to report.
local function walk_live(visit)
  local from = 0
  local batch = 1
  while true do
    local members = redis.call('ZRANGE', K_live, from, from + batch - 1)
    local ids = {}
    for i, m in ipairs(members) do ids[i] = string.match(m, '^%d+:(.*)$') end
    for _, s in ipairs(load_sources(ids)) do
      if s and visit(s) then return end
    end
    if #members < batch then return end
    from = from + batch
    batch = math.min(batch * 2, live_batch_max)
  end
end

-- Every live source in draw order, for a script that needs the whole live set (a wallet's
-- available credits) and may then draw from it (draw_loaded): one walk instead of two.
-- One ZRANGE, and one HMGET per live_load_max sources. Missing sources are skipped, as
-- walk_live skips them.
local live_load_max = 256
local function load_live()
  local members = redis.call('ZRANGE', K_live, '0', '-1')
  local sources = {}
  for first = 1, #members, live_load_max do
    local ids = {}
    for i = first, math.min(first + live_load_max - 1, #members) do ids[#ids + 1] = string.match(members[i], '^%d+:(.*)$') end
    for _, s in ipairs(load_sources(ids)) do
      if s then sources[#sources + 1] = s end
    end
  end
  return sources
end

-- Credits of `wallet` available now in `sources` (load_live): active ones, less what is
-- used and frozen.
local function wallet_available(sources, wallet, now)
  local available = 0
  for _, s in ipairs(sources) do
    if s.w == wallet and is_active(s, now) then available = available + (s.t - s.u - s.f) end
  end
  return available
end

-- The sources of a transaction's holds, in hold order, or nil when one is missing (a state
-- only corruption can make). Scripts load them all before changing any: a script that
-- failed halfway would keep its first writes. Given the live sources a script loaded
-- (load_live), a hold's source found there is that object, read no second time, and what
-- the hold's end changes shows in it; the others are read (none unless corrupt: a source
-- with credits frozen stays live).
local function load_hold_sources(holds, loaded)
  local by_id = {}
  for _, s in ipairs(loaded or {}) do by_id[s.id] = s end
  local sources, ids, at = {}, {}, {}
  for i, h in ipairs(holds) do
    sources[i] = by_id[h.account_id]
    if not sources[i] then
      ids[#ids + 1] = h.account_id
      at[#ids] = i
    end
  end
  local read = load_sources(ids)
  for j = 1, #ids do
    if not read[j] then return nil end
    sources[at[j]] = read[j]
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
    add_frozen(s, -held)
    add_used(s, take)
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
    add_frozen(sources[i], -tonumber(h.amount))
    table.insert(details, { account_id = h.account_id, credit_type = h.credit_type, amount = h.amount })
  end
  return details
end

-- Deletes up to `count_max` dead sources that died before `horizon_ms` and whose last
-- ledger entry PostgreSQL holds: the outbox is empty, or its oldest entry has a higher
-- seq than the one recorded at death (the persist loop deletes entries in seq order once
-- they are committed). Returns how many it deleted. Their state stays in PostgreSQL: the
-- sources table and the entries (the full customer view reads them from there).
local function archive_dead_sources(horizon_ms, count_max)
  local ids = redis.call('ZRANGEBYSCORE', K_dead, '-inf', '(' .. N(horizon_ms), 'LIMIT', 0, count_max)
  if #ids == 0 then return 0 end
  local oldest = nil
  local first = redis.call('XRANGE', K_outbox, '-', '+', 'COUNT', 1)[1]
  if first then
    local fields = first[2]
    for i = 1, #fields, 2 do
      if fields[i] == 'seq' then oldest = tonumber(fields[i + 1]) end
      if fields[i] == 'e' and oldest == nil then oldest = tonumber(cjson.decode(fields[i + 1]).seq) end
    end
  end
  local archived = 0
  for _, id in ipairs(ids) do
    local died_seq = tonumber(redis.call('HGET', K_src, id .. ':d') or '0')
    -- Sources die in seq order: the first one still waiting for the outbox stops the pass.
    if oldest ~= nil and died_seq >= oldest then break end
    redis.call('HDEL', K_src, id, id .. ':u', id .. ':f', id .. ':d')
    redis.call('ZREM', K_dead, id)
    archived = archived + 1
  end
  if archived > 0 then redis.call('HSET', K_meta, 'src_archived', '1') end
  return archived
end

-- A gateway call's record (lua/gateway_hold-10.lua), or nil when `txid` names none.
local function gateway_call(txid)
  local raw = redis.call('HGET', K_tx, txid)
  if not raw then return nil end
  local tx = cjson.decode(raw)
  if tx.k ~= 'gateway' then return nil end
  return tx
end

local function next_seq()
  return redis.call('HINCRBY', K_meta, 'seq', '1')
end

local ttl_entries_written
--@per-call
ttl_entries_written = 0
--@end

-- Appends one ledger entry to the outbox. `e` holds the entry's fields, amounts as
-- strings. The operation's own entry is named by the entry id base; entries of lazy TTL
-- settlements in the same call get `.t1`, `.t2`, ... so each id stays unique and stable.
--
-- The entry is written as stream fields (src/redis/codec.ts reads them back), always the
-- same fields in the same order, so that the stream stores their names once per node
-- (Redis keeps only the values of an entry whose fields match its node's first entry).
-- Scalars as they are, '' for a null one; `details` and `x` as JSON of their own ('' for
-- no `x`); `result` and `usage` ('' for none) as the JSON strings the script already
-- made. Nothing is JSON inside JSON.
local function opt(v)
  if v == nil or v == cjson.null then return '' end
  return v
end

local function write_entry(e, now, ttl_settlement)
  local id
  if ttl_settlement then
    ttl_entries_written = ttl_entries_written + 1
    id = entry_id_base .. '.t' .. ttl_entries_written
  else
    id = entry_id_base
  end
  local stream_id = redis.call('XADD', K_outbox, '*',
    'id', id, 'seq', N(next_seq()), 'project_id', project_id, 'customer_id', customer_id, 'at', N(now),
    'type', e.type, 'transaction_id', e.transaction_id, 'amount', e.amount,
    'returned_amount', opt(e.returned_amount), 'wallet', opt(e.wallet), 'reason', opt(e.reason),
    'business_type', opt(e.business_type), 'description', opt(e.description), 'state', opt(e.state),
    'result', e.result, 'usage', opt(e.usage), 'details', cjson.encode(e.details),
    'x', (e.x ~= nil and e.x ~= cjson.null and cjson.encode(e.x)) or '')
  last_entry_ms = string.match(stream_id, '^(%d+)')
  return id
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
-- `reason`. Returns 1 when it consumed a freeze that the plan has not counted yet (a
-- billable operation to count now), else 0: a freeze marked `pc` was counted when it was
-- accepted (freeze-10.lua), and one made before that mark existed counts here.
local function settle_ttl(txid, tx, now)
  if tx.k == 'gateway' then
    -- A gateway hold outlived its call (the API process died mid-call). Holds write no
    -- ledger entry, so their release writes none either.
    local sources = load_hold_sources(tx.holds)
    if sources == nil then return nil end
    release_holds(tx.holds, sources)
    Budget.settle(tx, tonumber(tx.a), 0, now)
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
  Budget.settle(tx, tonumber(tx.a), (consumed and tonumber(tx.a)) or 0, now)
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
    x = (tx.pc == '1' and { pc = '1' }) or cjson.null,
  }, now, true)
  freeze_settled_event(consumed, txid, tx, now)
  finalize('t:' .. txid)
  if consumed and tx.pc ~= '1' then return 1 end
  return 0
end

-- The EXPIRE ledger entry of a source that died expired with `amount` credits left
-- (t - u: nothing is frozen on a dead source), and its source.expired event. The entry
-- moves nothing: the source stopped counting at its expiry (is_active); the entry says
-- how much left the balance then. Named as a lazy entry (base.tN): any script may write it.
expired_entry = function(s, amount, now)
  local at = N(now)
  local result = cjson.encode({
    account_id = s.id, wallet = s.w, label = s.l, amount = N(amount), expires_at = N(s.e), expired_at = at,
  })
  local id = write_entry({
    type = 'EXPIRE', transaction_id = s.id, amount = N(amount), returned_amount = cjson.null, wallet = s.w,
    details = { { account_id = s.id, credit_type = s.w, amount = N(amount) } },
    reason = cjson.null, business_type = cjson.null, description = cjson.null, state = 'expired', result = result,
    x = cjson.null,
  }, now, true)
  emit_event('source.expired', {
    account_id = s.id, wallet = s.w, label = s.l, amount = N(amount), expires_at = N(s.e), entry_id = id,
  }, now)
end

-- Retires the live sources that expired by now with nothing frozen (each writes its
-- EXPIRE entry: retire). The live set is scored by expiry, so they are its front: one
-- ZRANGEBYSCORE, empty for most calls. A source with credits still frozen stays live
-- until the freeze ends (the script that ends it retires it). The credits that left the
-- available balance run the balance alerts where the script includes them.
local function expire_sources(now)
  local members = redis.call('ZRANGEBYSCORE', K_live, '-inf', N(now))
  if #members == 0 then return end
  local ids = {}
  for i, m in ipairs(members) do ids[i] = string.match(m, '^%d+:(.*)$') end
  local taken = 0
  for _, s in ipairs(load_sources(ids)) do
    if s and s.f <= 0 then taken = taken + retire(s, now) end
  end
  if taken > 0 and expiry_alerts ~= nil then expiry_alerts(taken, now) end
end

-- When the next live source expires that has not expired by `now` (ms string), '' when
-- none does (the sweep's due index, workers/sweep.ts).
local function next_source_expiry(now)
  local first = redis.call('ZRANGEBYSCORE', K_live, '(' .. N(now), '9007199254740991', 'WITHSCORES', 'LIMIT', 0, 1)
  return first[2] or ''
end

-- Settles every freeze whose TTL is due, then retires the sources that expired
-- (expire_sources). Returns how many of its auto-consumes the plan counts now
-- (settle_ttl).
local function expire_due(now)
  local due = redis.call('ZRANGEBYSCORE', K_ttl, '-inf', N(now))
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
  settle_sources(now)
  expire_sources(now)
  return auto_consumed
end

-- Credits available now in each wallet that has any (active live sources), and the
-- wallets of `names` (a set, or nil) that never had a source: the meta counter `wt:<wallet>`
-- exists once a wallet got its first source. For the error of a refused draw or hold
-- only: it walks the whole live set again, so no successful operation pays for it.
-- Returns a table for cjson: {available = {wallet = credits string}, none = 'w1 w2'}
-- (wallet names hold no spaces; an empty table would encode as {} either way).
local function shortfall(names, now)
  local by = {}
  walk_live(function(s)
    if is_active(s, now) then
      local a = s.t - s.u - s.f
      if a > 0 then by[s.w] = (by[s.w] or 0) + a end
    end
  end)
  local available = {}
  for w, a in pairs(by) do available[w] = N(a) end
  local none = {}
  if names ~= nil then
    for w in pairs(names) do
      if redis.call('HEXISTS', K_meta, 'wt:' .. w) == 0 then none[#none + 1] = w end
    end
    table.sort(none)
  end
  return { available = available, none = table.concat(none, ' ') }
end

-- Picks the funds for `amount` from eligible sources: active now, in the wallet filter
-- (a set, or nil for all wallets), available > 0; soonest expiry first (none last), then
-- oldest: the order of the live set, walked from the front until the amount is covered.
-- Only a draw that fails walks all of it, for the totals its error depends on. Expired
-- sources with nothing frozen that it passes move to dead. Returns the list of
-- {source, take}, or nil, an error status and the shortfall JSON (see shortfall).
-- `walk` calls visit(source) for each source in that order until it returns true:
-- walk_live (draw), or the sources a script loaded already (draw_loaded).
local function draw_by(walk, amount, filter, now)
  local picks = {}
  local expired = {}
  local available_all = 0
  local left = amount
  walk(function(s)
    if s.e ~= nil and s.e <= now then
      if s.f <= 0 then table.insert(expired, s) end
      return false
    end
    local avail = s.t - s.u - s.f
    if avail <= 0 or not is_active(s, now) then return false end
    available_all = available_all + avail
    if filter == nil or filter[s.w] then
      local take = math.min(left, avail)
      table.insert(picks, { source = s, take = take })
      left = left - take
    end
    return left <= 0
  end)
  for _, s in ipairs(expired) do retire(s, now) end
  if left > 0 then
    local why = cjson.encode(shortfall(filter, now))
    if filter ~= nil and available_all >= amount then return nil, E_INSUFFICIENT_SELECTED, why end
    return nil, E_INSUFFICIENT, why
  end
  return picks, OK
end

local function draw(amount, filter, now)
  return draw_by(walk_live, amount, filter, now)
end

-- As draw, from the live sources loaded by load_live, unchanged since: the same sources in
-- the same order as a walk of the live set would read.
local function draw_loaded(sources, amount, filter, now)
  return draw_by(function(visit)
    for _, s in ipairs(sources) do
      if visit(s) then return end
    end
  end, amount, filter, now)
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
-- allows). Returns (status, stored result or picks, and for a refused draw the shortfall
-- JSON; for a conflict '{"first": <the stored record's request fields `q`>}', or '' when it
-- has none: src/ledger/conflicts.ts names the fields that differ).
local function begin_draw(kind, txid, request_hash, amount, filter, now, admitted)
  if not customer_exists() then
    finalize('t:' .. txid)
    return E_CUSTOMER_NOT_FOUND, nil
  end
  local prior = redis.call('HGET', K_tx, txid)
  if prior then
    local tx = cjson.decode(prior)
    if tx.k == kind and tx.h == request_hash then return REPLAY, tx.r end
    return E_CONFLICT, nil, (tx.q and cjson.encode({ first = tx.q })) or ''
  end
  if stale_binding() then return E_STALE_BINDING, nil end
  -- A refused operation stores no record, but its binding stays until the retention.
  if not admitted then
    finalize('t:' .. txid)
    return E_USAGE_LIMIT, nil
  end
  local picks, status, why = draw(amount, filter, now)
  if picks == nil then
    finalize('t:' .. txid)
    return status, nil, why
  end
  return OK, picks
end
