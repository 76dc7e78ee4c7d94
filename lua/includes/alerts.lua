-- Balance alerts (docs/API.md, "Events and webhooks"): balance.low, balance.depleted and
-- balance.top_up_requested, from the customer's settings in the meta hash (`al`, written
-- by PATCH /v1/customers/{id}, src/customers/alerts.ts). Pulled in by the scripts that take
-- credits from what is available: deduct, freeze, gateway_hold, gateway_settle. Each calls
-- balance_alerts(taken, now) once, after its change.
--
-- "Available" is the customer's available credits in every wallet: the active sources'
-- total less used and frozen (as GET /v1/customers/{id}/balance sums them). The value
-- before the change is the value after it plus what the change took: a crossing is seen
-- by the operation that makes it, exactly once (scripts run one at a time per customer).
--
-- Cost: a customer without settings pays one HGET; with settings, one read of its live
-- sources (as a gateway hold reads them anyway).
--
-- meta fields (all strings):
--   al    JSON {t, b, a, m}: low balance threshold; auto top-up below, amount, monthly
--         limit; each absent when not set. No `al`: no alerts, no depleted event.
--   tu_o  the id of the open top-up request (its event), absent when none is open
--   tu_t  when it was opened (ms, the scripts' clock)
--   tu_m  the calendar month (UTC, 'YYYY-MM') of tu_s
--   tu_s  credits requested in that month
-- A request is open until a deposit names its event id as idempotency key
-- (deposit_created in includes/events.lua) or top_up_open_ms passes.

--@include customer

local top_up_open_ms = 3600000

-- 'YYYY-MM' of an epoch ms, in UTC (days to civil date, H. Hinnant's algorithm).
local function month_of(ms)
  local z = math.floor(ms / 86400000) + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = (mp < 10 and mp + 3) or (mp - 9)
  local y = yoe + era * 400 + ((m <= 2 and 1) or 0)
  return string.format('%04d-%02d', y, m)
end

-- balance.top_up_requested, unless a request is open or the month's limit would be passed.
local function request_top_up(al, available, now)
  local st = redis.call('HMGET', K_meta, 'tu_o', 'tu_t', 'tu_m', 'tu_s')
  if st[1] and now - tonumber(st[2]) < top_up_open_ms then return end
  local amount = tonumber(al.a)
  local month = month_of(now)
  local requested = ((st[3] == month and tonumber(st[4])) or 0) + amount
  local limit = tonumber(al.m)
  if limit and requested > limit then return end
  local id = emit_event('balance.top_up_requested', {
    amount = N(amount), available = N(available), below = al.b, monthly_limit = (limit and N(limit)) or cjson.null,
    requested_this_month = N(requested), open_until = N(now + top_up_open_ms),
  }, now)
  redis.call('HSET', K_meta, 'tu_o', id, 'tu_t', N(now), 'tu_m', month, 'tu_s', N(requested))
end

-- After a change that took `taken` credits (> 0) from what is available.
local function balance_alerts(taken, now)
  if taken <= 0 then return end
  local raw = redis.call('HGET', K_meta, 'al')
  if not raw then return end
  local al = cjson.decode(raw)
  local after = 0
  for _, s in ipairs(load_live()) do
    if is_active(s, now) then after = after + (s.t - s.u - s.f) end
  end
  local before = after + taken
  local threshold = tonumber(al.t)
  if threshold and before >= threshold and after < threshold then
    emit_event('balance.low', { available = N(after), threshold = N(threshold) }, now)
  end
  if before > 0 and after <= 0 then emit_event('balance.depleted', { available = N(after) }, now) end
  if al.b and after < tonumber(al.b) then request_top_up(al, after, now) end
end

-- Credits that left by a source's expiry (expire_sources, includes/customer.lua) take from
-- what is available as an operation does: a script that includes this file alerts on them.
expiry_alerts = balance_alerts
