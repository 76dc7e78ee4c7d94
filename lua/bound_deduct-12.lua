-- Deduct with its transaction id's binding in one script (a single Redis): binds the id to
-- the customer as lua/bind-2.lua does, then deducts as lua/deduct-10.lua.
--
-- KEYS[1..10] and ARGV: as lua/deduct-10.lua; the last ARGV is '' (see includes/bound.lua).
-- KEYS[11] ids    hash    the `t` bucket of the transaction id (lua/bind-2.lua)
-- KEYS[12] bloom  string  its Bloom filter
--
-- Returns as lua/deduct-10.lua, or before anything is written E_CONFLICT (the id is bound
-- to another customer) or E_BINDING_ARCHIVED (the filter has the id: the caller takes
-- the two steps).

--@include customer
--@include bound

local refused = bind_to_customer()
if refused then return refused end

--@script deduct
