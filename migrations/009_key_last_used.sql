-- When each key last authenticated a request, for the dashboard's key list. API processes
-- note uses in memory and write them here in one statement every KEY_LAST_USED_FLUSH_MS
-- (src/keys/usage.ts), so a request never waits for this column.
ALTER TABLE api_keys ADD COLUMN last_used_at timestamptz;
