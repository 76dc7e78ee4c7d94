-- Puts back a record archived from Redis, as folded from its ledger entries in
-- PostgreSQL (src/ledger/bindings.ts), so that the customer script answers a replay or a
-- conflict exactly as before. Only if absent: a record still in Redis (its deletion
-- pending) is kept, and no longer deleted. Either way it is listed as final again, so
-- it stays another retention.
--
-- KEYS[1] tx   hash  transaction id -> JSON transaction
-- KEYS[2] dep  hash  deposit idempotency key -> JSON {h, r}
-- KEYS[3] fin  zset  final records by when (lua/includes/customer.lua)
-- KEYS[4] arch zset  archived records by when they may be deleted (lua/trim-5.lua)
-- ARGV[1] member: 't:<txid>', 'g:<gateway txid>' or 'd:<key>'
-- ARGV[2] record: the record as the scripts store it
--
-- Returns 1 when written, 0 when it was there.

--@include bloom

local K_tx, K_dep, K_fin, K_arch = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local member = ARGV[1]
local value = ARGV[2]

local key = (string.sub(member, 1, 1) == 'd' and K_dep) or K_tx
local written = redis.call('HSETNX', key, string.sub(member, 3), value)
redis.call('ZREM', K_arch, member)
redis.call('ZADD', K_fin, bucket_now_ms(), member)
return written
