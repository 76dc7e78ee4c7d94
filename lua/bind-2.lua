-- Binds an id to its owner in its project bucket, or reads the binding: the one command
-- before a money operation's customer script (transaction id -> customer, deposit key ->
-- customer, gateway Idempotency-Key -> call).
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
-- filter has it: nothing written; the caller asks PostgreSQL).

--@include bloom

local K_ids, K_bloom = KEYS[1], KEYS[2]
local id = ARGV[1]
local owner = ARGV[2]
local force = ARGV[3] == '1'

local now = bucket_now_ms()
local v = redis.call('HGET', K_ids, id)
if v then
  local o, at = parse_binding(v)
  return { 1, o, at, now }
end
if not force and bloom_has(K_bloom, id) then return { 3, '', '', now } end
if owner == '' then return { 2, '', '', now } end
redis.call('HSET', K_ids, id, owner .. '|' .. now)
return { 0, owner, now, now }
