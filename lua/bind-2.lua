-- Binds an id to its owner in its project bucket, or reads the binding: the one command
-- before a money operation's customer script (transaction id -> customer, deposit key ->
-- customer, gateway Idempotency-Key -> call). On a single Redis, deduct, freeze, deposit
-- and consume or unfreeze naming their customer bind in their own script instead
-- (lua/includes/bound.lua).
--
-- KEYS[1] ids    hash    id -> owner .. '|' .. bound at (Redis ms)
-- KEYS[2] bloom  string  Bloom filter of the ids archived from this bucket
-- ARGV[1] id: the id (transaction id or deposit key) to bind
-- ARGV[2] owner: owner to bind; '' to read only (consume, unfreeze, receipts)
-- ARGV[3] force: '1' to bind even when the filter has the id (PostgreSQL said it has no entries
--         of it: a false positive), else '0'
--
-- Returns {status, owner, bound at ms, read at ms}: read at is the Redis time of this
-- read, which the customer script checks against its grace (lua/includes/customer.lua).
-- Status 0 NEW (bound now to ARGV[2]), 1 BOUND (owner and when), 2 ABSENT (read only,
-- never bound or archived: the filter does not have it), 3 ARCHIVED (absent, and the
-- filter has it: nothing written; the caller asks PostgreSQL). See includes/binding.lua.

--@include binding

return bind_id(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3] == '1')
