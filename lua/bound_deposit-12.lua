-- Deposit with an idempotency key, and the key's binding, in one script (a single Redis):
-- binds the key to the customer as lua/bind-2.lua does, then deposits as
-- lua/deposit-10.lua. A deposit without a key has no binding: lua/deposit-10.lua alone.
--
-- KEYS[1..10] and ARGV: as lua/deposit-10.lua; the last ARGV is '' (see includes/bound.lua).
-- KEYS[11] ids    hash    the `d` bucket of the idempotency key (lua/bind-2.lua)
-- KEYS[12] bloom  string  its Bloom filter
--
-- Returns as lua/deposit-10.lua, or before anything is written E_CONFLICT (the key is
-- bound to another customer) or E_BINDING_ARCHIVED (the filter has the key: the caller
-- takes the two steps).

--@include customer
--@include bound

local refused = bind_to_customer()
if refused then return refused end

--@script deposit
