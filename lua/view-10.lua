-- Reads a customer's profile and balances after settling due TTLs, so a read never shows
-- a freeze that has already timed out. The sums read the live sources and the meta
-- counters of dead ones that still count; only the full listing reads the dead sources.
--
-- KEYS[1..10] and ARGV[1..4]: see includes/customer.lua.
-- ARGV[5]  list_sources: '1' to list the sources Redis holds (live and dead), '0' for the sums only
--
-- Returns {OK, profile JSON, auto-consumed TTL count, TTL entries written, now ms,
-- wallets JSON {wallet: {t, u, f}} (sums over the sources active now, strings),
-- sources (list of JSON, as encode_source; empty without the listing), src_seq,
-- src_archived ('1' when some sources are only in PostgreSQL), the customer budget (JSON of
-- Budget.view in includes/budget.lua, '' for none), the project keys' budgets (JSON of
-- Budget.key_views, '{}' for none)} or
-- {E_CUSTOMER_NOT_FOUND, '', count, written}.

--@include customer
--@include alerts

local listing = ARGV[5] == '1'

local now = now_ms()
local auto_consumed = expire_due(now)
if not customer_exists() then return { E_CUSTOMER_NOT_FOUND, '', auto_consumed, ttl_entries_written } end
expire_spent(now)
local meta = redis.call('HGETALL', K_meta)
local fields = {}
local wallets = {}
for i = 1, #meta, 2 do
  local k, v = meta[i], meta[i + 1]
  fields[k] = v
  local kind, w = string.match(k, '^(w[tu]):(.*)$')
  if kind then
    wallets[w] = wallets[w] or { t = 0, u = 0, f = 0 }
    wallets[w][(kind == 'wt' and 't') or 'u'] = tonumber(v)
  end
end
local profile = cjson.encode({
  created_at = fields.created_at, name = fields.name or cjson.null, email = fields.email or cjson.null,
  metadata = fields.metadata or cjson.null, alerts = fields.al or cjson.null,
})

local sources = {}
walk_live(function(s)
  local w = wallets[s.w] or { t = 0, u = 0, f = 0 }
  wallets[s.w] = w
  if is_active(s, now) then
    w.t = w.t + s.t
    w.u = w.u + s.u
    w.f = w.f + s.f
  end
  if listing then table.insert(sources, encode_source(s)) end
end)
if listing then
  local dead = redis.call('ZRANGE', K_dead, 0, -1)
  for from = 1, #dead, 100 do
    local ids = {}
    for i = from, math.min(from + 99, #dead) do ids[#ids + 1] = dead[i] end
    for _, s in ipairs(load_sources(ids)) do
      if s then table.insert(sources, encode_source(s)) end
    end
  end
end

local sums = {}
for w, a in pairs(wallets) do sums[w] = { t = N(a.t), u = N(a.u), f = N(a.f) } end
-- cjson encodes an empty table as {}, which is what an empty wallet map should be.
return { OK, profile, auto_consumed, ttl_entries_written, N(now), cjson.encode(sums), sources,
  fields.src_seq or '0', fields.src_archived or '0', Budget.view(fields, now),
  Budget.key_views(fields, now) }
