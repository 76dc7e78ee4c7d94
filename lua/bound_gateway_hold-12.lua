-- A gateway hold with its call's receipt index entry in one script (a single Redis): holds
-- as lua/gateway_hold-10.lua, then, only when the hold applied, binds the new transaction
-- id to the customer as lua/bind-2.lua does without the filter (src/ledger/bindings.ts
-- indexCall, which a Redis Cluster sends beside the hold). A refused hold writes no entry.
--
-- KEYS[1..10] and ARGV: as lua/gateway_hold-10.lua; the last ARGV is '' (see includes/bound.lua).
-- KEYS[11] ids    hash    the `t` bucket of the transaction id (lua/bind-2.lua)
-- KEYS[12] bloom  string  its Bloom filter (not read: the id is new)
--
-- Returns as lua/gateway_hold-10.lua.

--@include customer
--@include bound

-- The hold in a function of its own: its returns end the function, and its reply says
-- whether the hold applied.
local reply = (function()
--@script gateway_hold
end)()
if reply[1] == OK then index_call() end
return reply
