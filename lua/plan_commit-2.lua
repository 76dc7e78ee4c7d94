-- Commits a reservation of lua/plan_reserve-3.lua: its operation applied (or may have:
-- a reply that was lost), so it moves from the pending set to `used`. A reservation that
-- is no longer pending was folded into `used` already when its deadline passed: it is
-- counted once, not twice.
--
-- KEYS[1] counter string committed billable operations in the period
-- KEYS[2] pending zset   reservations in flight
-- ARGV[1] member: the reservation's member
--
-- Returns 1 when committed now, 0 when it was counted before.

if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('INCRBY', KEYS[1], 1)
return 1
