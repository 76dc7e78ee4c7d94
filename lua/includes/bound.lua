-- The binding step of a bound script (lua/bound_<op>-12.lua): on a single Redis, where a
-- script may take keys of several slots, the binding of the operation's id (ARGV[5]: its
-- transaction id or deposit key) and the operation run as one script, one command. A
-- Redis Cluster keeps the two steps (src/ledger/service.ts). The gateway hold binds after
-- its operation instead, only when the hold applied (lua/bound_gateway_hold-12.lua).
-- Pulled in after customer.
--
-- A bound script takes the ten KEYS and the ARGV of its operation's script (see
-- includes/customer.lua), and after them:
--   KEYS[11] ids    hash    the bucket of the id (lua/bind-2.lua)
--   KEYS[12] bloom  string  the bucket's Bloom filter
-- Its last ARGV (binding_read_at_ms) is '': the binding is read in this same script, so
-- no archive can come between the read and the record, and no grace applies.

--@include binding

local K_bucket_ids, K_bucket_bloom, bound_id
--@per-call
K_bucket_ids, K_bucket_bloom, bound_id = KEYS[11], KEYS[12], ARGV[5]
--@end

-- Binds ARGV[5] to this customer (`owner` is customer_id), or reads its binding (`owner`
-- ''), exactly as lua/bind-2.lua does. Returns nil when the operation goes on: the id is
-- bound to this customer. Otherwise the reply to answer at once, nothing written:
-- E_BINDING_ARCHIVED (the filter has the id: the caller takes the two steps, which ask
-- PostgreSQL), `absent` (read only, no binding) or `other` (bound to another customer,
-- whom the second value names: '{"owner": <customer id>}').
local function binding_step(owner, absent, other)
  local b = bind_id(K_bucket_ids, K_bucket_bloom, bound_id, owner, false)
  if b[1] == BIND_ARCHIVED then return { E_BINDING_ARCHIVED, '', 0, 0 } end
  if b[1] == BIND_ABSENT then return { absent, '', 0, 0 } end
  if b[2] ~= customer_id then return { other, cjson.encode({ owner = b[2] }), 0, 0 } end
  return nil
end

-- Deduct, freeze, deposit: the id is bound to this customer now, or was; bound to
-- another it is a conflict.
local function bind_to_customer()
  return binding_step(customer_id, nil, E_CONFLICT)
end

-- Consume, unfreeze naming their customer: the id must be bound to it; `absent` when
-- it is bound to nobody.
local function bound_to_customer(absent)
  return binding_step('', absent, E_SCOPE_MISMATCH)
end

-- A gateway call's receipt index entry: its new transaction id bound to this customer
-- without asking the filter, as src/ledger/bindings.ts indexCall binds it on a cluster.
local function index_call()
  bind_id(K_bucket_ids, K_bucket_bloom, bound_id, customer_id, true)
end
