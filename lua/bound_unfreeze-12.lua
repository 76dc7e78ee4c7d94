-- Unfreeze naming its customer, with the transaction id's binding read in the same script
-- (a single Redis): reads the binding as lua/bind-2.lua does, then unfreezes as
-- lua/unfreeze-10.lua. Without a customer the binding must name it first: two steps.
--
-- KEYS[1..10] and ARGV: as lua/unfreeze-10.lua; the last ARGV is '' (see includes/bound.lua).
-- KEYS[11] ids    hash    the `t` bucket of the transaction id (lua/bind-2.lua)
-- KEYS[12] bloom  string  its Bloom filter
--
-- Returns as lua/unfreeze-10.lua, or before anything is written E_NO_UNFREEZABLE (the id
-- is bound to nobody), E_SCOPE_MISMATCH (bound to another customer) or E_BINDING_ARCHIVED
-- (the filter has the id: the caller takes the two steps).

--@include customer
--@include bound

local refused = bound_to_customer(E_NO_UNFREEZABLE)
if refused then return refused end

--@script unfreeze
