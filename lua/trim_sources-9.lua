-- Archives one customer's dead sources: deletes from Redis those that died before the
-- horizon and whose last ledger entry PostgreSQL holds (archive_dead_sources in
-- includes/customer.lua). Their state stays in PostgreSQL. The retention pass calls the
-- same include function.
--
-- KEYS[1..9] and ARGV[1..4]: see includes/customer.lua.
-- ARGV[5]  retention, ms: sources dead for less than this stay
-- ARGV[6]  at most this many sources per call
--
-- Returns {OK, '', 0, 0, archived count}.

--@include customer

local retention_ms = tonumber(ARGV[5])
local count_max = tonumber(ARGV[6])

local archived = archive_dead_sources(now_ms() - retention_ms, count_max)
return { OK, '', 0, 0, archived }
