-- Archives one customer's dead sources: deletes from Redis those that died before the
-- horizon and whose last ledger entry PostgreSQL holds (archive_dead_sources in
-- includes/customer.lua). Their state stays in PostgreSQL. The retention pass calls the
-- same include function.
--
-- KEYS[1..10] and ARGV[1..4]: see includes/customer.lua.
-- ARGV[5]  retention_ms: retention, ms: sources dead for less than this stay
-- ARGV[6]  count_max: at most this many sources per call
--
-- Returns {OK, '', 0, 0, archived count, when the oldest dead source left is due (Redis ms
-- with the clock offset, '' when none is left)}.

--@include customer

local retention_ms = tonumber(ARGV[5])
local count_max = tonumber(ARGV[6])

local now = now_ms()
local archived = archive_dead_sources(now - retention_ms, count_max)
local oldest = redis.call('ZRANGE', K_dead, 0, 0, 'WITHSCORES')
local next_due = ''
if oldest[2] then next_due = N(math.max(tonumber(oldest[2]) + retention_ms, now + 1000)) end
return { OK, '', 0, 0, archived, next_due }
