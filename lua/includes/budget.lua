-- Spending budgets (docs/API.md, "Budgets"): checked and counted in the script that holds
-- or charges, on the customer's own keys (one slot), so concurrent calls cannot overspend
-- and no command is added to the round trip. Pulled in by includes/customer.lua, before its
-- own text (its TTL settlement calls it), so it reads its keys itself.
--
-- What a budget is, in the customer's meta hash (KEYS[1]):
--   bud_l            the customer budget's limit, credits (PATCH /v1/customers/{id})
--   bud_p            its period: day, week, month (calendar periods in UTC) or total
--   bud_c            the customer's counters: 'period|period start ms|spent|held'
--   bud_k:<key id>   a key's counters: 'period|start|spent|held|limit'. A customer-scoped
--                    key's limit and period come with the call (ARGV: 'id|limit|period'),
--                    from the key record the API holds in memory; the limit is kept here
--                    so that a settlement, which may come without the key, can say what
--                    is left
--   bud_pk:<key id>  a project key's budget for this customer: 'limit|period' (PATCH
--                    /v1/customers/{id} `key_budgets`); the call names only the key (ARGV:
--                    its id), the limit is read here in the same HMGET
--   bud_x, bud_xk:<key id>  the budget.exceeded marks of the customer's and a key's budget
--                    (Budget.refuse): 'period|period start ms|limit' of the last event
--
-- Counting: a deduct, a consume and a settled gateway call count as spent at their actual
-- cost; a freeze and a gateway hold count as held until they end. A record counted as held
-- carries marks (`bc` = '1' for the customer, `bk` = the key id), so that its end gives
-- back exactly what it took, even after the budget changed or was cleared; spent counts
-- wherever a budget is set when the charge is made. A period turn (the period start of
-- `now` differs from the stored one, or the period changed) resets spent to 0; held
-- carries over until settled, and a settlement counts in the period in which it settles.
--
-- Every function lives in the one table `Budget`: a script body takes it as one upvalue
-- (Lua 5.1 allows a function 60).

local Budget = {}

local budget_meta, budget_customer
--@per-call
budget_meta, budget_customer = KEYS[1], ARGV[3]
--@end

-- As N in includes/customer.lua: '%d' keeps integers off the float path.
local function N(n)
  return string.format('%d', n)
end

local BUDGET_DAY_MS = 86400000

-- Days since 1970-01-01 of a proleptic Gregorian date, and back (H. Hinnant's algorithms).
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (m > 2 and m - 3) or m + 9
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

local function civil_from_days(days)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = (mp < 10 and mp + 3) or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m
end

-- The start (ms) of the period that holds `now`, and its end (nil for total): a day from
-- 00:00 UTC, a week from Monday 00:00 (1970-01-01 was a Thursday), a month from the 1st.
function Budget.period(period, now)
  if period == 'total' then return 0, nil end
  local days = math.floor(now / BUDGET_DAY_MS)
  if period == 'day' then return days * BUDGET_DAY_MS, (days + 1) * BUDGET_DAY_MS end
  if period == 'week' then
    local monday = days - (days + 3) % 7
    return monday * BUDGET_DAY_MS, (monday + 7) * BUDGET_DAY_MS
  end
  local y, m = civil_from_days(days)
  local ny, nm = y, m + 1
  if nm > 12 then ny, nm = y + 1, 1 end
  return days_from_civil(y, m, 1) * BUDGET_DAY_MS, days_from_civil(ny, nm, 1) * BUDGET_DAY_MS
end

-- One scope's counters from their stored value (nil: none yet), turned to the period of
-- `now`: spent is 0 in a new period (or a changed one), held carries over.
local function counters(raw, period, now)
  local start, ends = Budget.period(period, now)
  local c = { period = period, start = start, ends = ends, spent = 0, held = 0 }
  if raw then
    local p, s, sp, h, l = string.match(raw, '^([^|]*)|(%d+)|(%d+)|(%d+)|?(%d*)$')
    if p then
      c.held = tonumber(h)
      if p == period and tonumber(s) == start then c.spent = tonumber(sp) end
      c.stored_limit = tonumber(l)
    end
  end
  return c
end

local function encode(c)
  local v = c.period .. '|' .. N(c.start) .. '|' .. N(c.spent) .. '|' .. N(c.held)
  if c.scope == 'key' then v = v .. '|' .. N(c.limit) end
  return v
end

-- The budgets a hold or charge answers to, read in one HMGET: the customer's (when set)
-- and the calling key's: `key_arg` 'id|limit|period' (a customer-scoped key), a bare key
-- id (a project key: its budget for this customer, when set, is meta `bud_pk:<id>`), ''
-- for none. A list of scopes, each {scope, limit, period, start, ends, spent, held,
-- field}; empty when no budget applies.
function Budget.load(key_arg, now)
  local key_id, key_limit, key_period, in_meta
  if key_arg ~= nil and key_arg ~= '' then
    key_id, key_limit, key_period = string.match(key_arg, '^(.*)|(%d+)|(%a+)$')
    if not key_id then key_id, in_meta = key_arg, true end
  end
  local fields = { 'bud_l', 'bud_p', 'bud_c' }
  if key_id then fields[4] = 'bud_k:' .. key_id end
  if in_meta then fields[5] = 'bud_pk:' .. key_id end
  local r = redis.call('HMGET', budget_meta, unpack(fields))
  if in_meta then
    if r[5] then key_limit, key_period = string.match(r[5], '^(%d+)|(%a+)$') end
    if not key_limit then key_id = nil end
  end
  local scopes = {}
  if r[1] and r[2] then
    local c = counters(r[3], r[2], now)
    c.scope, c.limit, c.field = 'customer', tonumber(r[1]), 'bud_c'
    scopes[#scopes + 1] = c
  end
  if key_id then
    local c = counters(r[4] or nil, key_period, now)
    c.scope, c.limit, c.field, c.key_id = 'key', tonumber(key_limit), 'bud_k:' .. key_id, key_id
    scopes[#scopes + 1] = c
  end
  return scopes
end

-- What the tightest scope has left (limit - spent - held, at least 0), and that scope; nil
-- without a budget.
function Budget.room(scopes)
  local room, which = nil, nil
  for _, c in ipairs(scopes) do
    local r = math.max(0, c.limit - c.spent - c.held)
    if room == nil or r < room then room, which = r, c end
  end
  return room, which
end

-- The refusal of `requested` credits by scope `c`, as JSON for the error's words and
-- details (src/ledger/budgets.ts); a key scope names its key (`key_id`).
function Budget.refusal(c, requested)
  return cjson.encode({
    scope = c.scope, limit = N(c.limit), period = c.period, spent = N(c.spent), held = N(c.held),
    requested = N(requested), resets_at = (c.ends and N(c.ends)) or '', key_id = c.key_id,
  })
end

-- The refusal of `requested` credits by scope `c` at `now`: its JSON (Budget.refusal), and
-- its budget.exceeded event (docs/API.md, "Events and webhooks") in the same step, once per
-- budget per period, so that a tenant is told without being flooded. The scope's mark
-- (`bud_x`, `bud_xk:<key id>`) holds 'period|period start ms|limit' of the refusal that
-- fired; a new period, another period or another limit re-arm it. A refused call stores no
-- record, so its retry is refused again: the mark keeps that from firing twice. Read only
-- on a refusal's path: a call that fits pays nothing for it. emit_event is
-- includes/events.lua's, pulled in before this file by includes/customer.lua.
function Budget.refuse(c, requested, now)
  local mark = (c.scope == 'customer' and 'bud_x') or ('bud_xk:' .. c.key_id)
  local armed = c.period .. '|' .. N(c.start) .. '|' .. N(c.limit)
  if redis.call('HGET', budget_meta, mark) ~= armed then
    redis.call('HSET', budget_meta, mark, armed)
    emit_event('budget.exceeded', {
      scope = c.scope, key_id = c.key_id, budget_credits = N(c.limit), spent_credits = N(c.spent), held_credits = N(c.held),
      requested_credits = N(requested), period = c.period, resets_at = (c.ends and N(c.ends)) or '',
    }, now)
  end
  return Budget.refusal(c, requested)
end

-- The refusal JSON when `amount` more would take a scope past its limit (the first such
-- scope refuses, and may fire its event), else nil.
function Budget.check(scopes, amount, now)
  for _, c in ipairs(scopes) do
    if c.spent + c.held + amount > c.limit then return Budget.refuse(c, amount, now) end
  end
  return nil
end

-- Counts `spent` and `held` credits in every scope, and marks record `tx` (when given) with
-- the scopes that hold its `held`.
function Budget.add(scopes, spent, held, tx)
  if #scopes == 0 then return end
  local hset = {}
  for _, c in ipairs(scopes) do
    c.spent = c.spent + spent
    c.held = c.held + held
    hset[#hset + 1] = c.field
    hset[#hset + 1] = encode(c)
    if tx and held > 0 then
      if c.scope == 'customer' then tx.bc = '1' else tx.bk = c.key_id end
    end
  end
  redis.call('HSET', budget_meta, unpack(hset))
end

-- The end of record `tx`'s hold: `released` credits leave held in the scopes that counted
-- them (its marks), and `spent` credits count as spent in the customer's budget (when one
-- is set) and in the key's that held it. Returns what the tightest of those scopes has left
-- after it (a string, '' without a budget), for X-Service-Budget-Remaining-Credits.
function Budget.settle(tx, released, spent, now)
  local fields = { 'bud_l', 'bud_p', 'bud_c' }
  if tx.bk then fields[4] = 'bud_k:' .. tx.bk end
  local r = redis.call('HMGET', budget_meta, unpack(fields))
  local set = r[1] and r[2]
  local room = nil
  local hset = {}
  if set or (tx.bc and r[3]) then
    local c = counters(r[3], r[2] or string.match(r[3], '^([^|]*)|'), now)
    if tx.bc then c.held = math.max(0, c.held - released) end
    if set then
      c.spent = c.spent + spent
      room = math.max(0, tonumber(r[1]) - c.spent - c.held)
    end
    hset[#hset + 1] = 'bud_c'
    hset[#hset + 1] = encode(c)
  end
  if tx.bk and r[4] then
    local c = counters(r[4], string.match(r[4], '^([^|]*)|'), now)
    c.scope, c.limit = 'key', c.stored_limit or 0
    c.held = math.max(0, c.held - released)
    c.spent = c.spent + spent
    local left = math.max(0, c.limit - c.spent - c.held)
    if room == nil or left < room then room = left end
    hset[#hset + 1] = 'bud_k:' .. tx.bk
    hset[#hset + 1] = encode(c)
  end
  if #hset > 0 then redis.call('HSET', budget_meta, unpack(hset)) end
  return (room and N(room)) or ''
end

-- The customer budget as GET /v1/customers/{id} shows it, from the meta fields (a table of
-- the HGETALL): JSON {limit, period, spent, held, resets_at}, or '' when none is set.
function Budget.view(fields, now)
  if not (fields.bud_l and fields.bud_p) then return '' end
  local c = counters(fields.bud_c, fields.bud_p, now)
  return cjson.encode({
    limit = fields.bud_l, period = c.period, spent = N(c.spent), held = N(c.held),
    resets_at = (c.ends and N(c.ends)) or '',
  })
end

-- The project keys' budgets of this customer as GET /v1/customers/{id} shows them, from the
-- meta fields (`bud_pk:<id>` and the counters `bud_k:<id>`): JSON {key id: {limit, period,
-- spent, held, resets_at}}, '{}' for none.
function Budget.key_views(fields, now)
  local out = {}
  local any = false
  for f, v in pairs(fields) do
    local id = string.match(f, '^bud_pk:(.*)$')
    local limit, period
    if id then limit, period = string.match(v, '^(%d+)|(%a+)$') end
    if limit then
      local c = counters(fields['bud_k:' .. id], period, now)
      out[id] = { limit = limit, period = period, spent = N(c.spent), held = N(c.held), resets_at = (c.ends and N(c.ends)) or '' }
      any = true
    end
  end
  if not any then return '{}' end
  return cjson.encode(out)
end
