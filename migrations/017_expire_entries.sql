-- EXPIRE ledger entries (docs/API.md, "Ledger entries"): the credits a source still had
-- when it died expired (lua/includes/customer.lua, retire). The entry moves nothing in
-- the fold (the source stopped counting at its expiry); it records what left the
-- balance. Never billable (ledger_entries_billable lists the billable types).
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_type_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_type_check
  CHECK (type IN ('DEPOSIT', 'DEDUCT', 'FREEZE', 'CONSUME', 'UNFREEZE', 'GATEWAY', 'EXPIRE'));
