-- Archives bindings of one bucket (the trim, src/ledger/retention.ts; reconcile's repair):
-- each is removed and its id added to the bucket's Bloom filter, so that a later request
-- with it asks PostgreSQL instead of taking it as new.
--
-- KEYS[1] ids    hash    id -> owner .. '|' .. bound at (Redis ms)
-- KEYS[2] bloom  string  Bloom filter of the ids archived from this bucket
-- ARGV[1] owner: owner whose bindings these are: a binding that names another owner stays
-- ARGV[2..] ids: the ids to unbind
--
-- Returns the Redis time (ms) after which every binding named is gone.

--@include bloom

local K_ids, K_bloom = KEYS[1], KEYS[2]
local owner = ARGV[1]

for i = 2, #ARGV do
  local id = ARGV[i]
  local v = redis.call('HGET', K_ids, id)
  local o = v and parse_binding(v)
  if v == false or o == owner then
    if v then redis.call('HDEL', K_ids, id) end
    bloom_add(K_bloom, id)
  end
end
return bucket_now_ms()
