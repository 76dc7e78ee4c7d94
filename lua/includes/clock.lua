-- Redis time in ms (no test clock offset), read once per script: nothing else runs on a
-- Redis while one of its scripts runs, so one reading is the script's time, and TIME is
-- one command instead of up to four. XADD's `*` ids come from the clock when the XADD
-- runs, a little later: what must not be earlier than an entry's stream id takes that id
-- (see finalize in includes/customer.lua).
local script_ms
--@per-call
script_ms = nil
--@end

local function redis_ms()
  if script_ms == nil then
    local t = redis.call('TIME')
    script_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return script_ms
end
