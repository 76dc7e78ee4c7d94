-- The Bloom filter of a binding bucket: the ids archived from it. A plain string of
-- BLOOM_BITS bits, allocated whole when its first id is set (so its size never changes
-- afterwards), BLOOM_HASHES bits per id, each from 5 hex digits (20 bits) of the id's
-- SHA-1: digits 1..35. The bucket itself is chosen by digits 37..40 (src/redis/keys.ts).
-- At n archived ids in a bucket a new id hits all its bits with probability about
-- (1 - e^(-k n / m))^k: 1% at n = 27,000, 10% at n = 47,000 (m = 2^18, k = 7). Such a
-- false positive costs the new id one PostgreSQL lookup, never a wrong answer.

--@include clock

local BLOOM_BITS = 262144
local BLOOM_HASHES = 7

local function bloom_bits(id)
  local h = redis.sha1hex(id)
  local bits = {}
  for i = 0, BLOOM_HASHES - 1 do
    bits[i + 1] = tonumber(string.sub(h, i * 5 + 1, i * 5 + 5), 16) % BLOOM_BITS
  end
  return bits
end

local function bloom_has(key, id)
  for _, b in ipairs(bloom_bits(id)) do
    if redis.call('GETBIT', key, b) == 0 then return false end
  end
  return true
end

local function bloom_add(key, id)
  if redis.call('STRLEN', key) == 0 then redis.call('SETBIT', key, BLOOM_BITS - 1, 0) end
  for _, b in ipairs(bloom_bits(id)) do redis.call('SETBIT', key, b, 1) end
end

-- Redis time in ms (no test clock offset: retention and binding reads use real time).
local bucket_now_ms = redis_ms

-- A binding's value: owner .. '|' .. when it was bound (ms).
local function parse_binding(v)
  local owner, at = string.match(v, '^(.*)|(%d+)$')
  return owner, at
end
