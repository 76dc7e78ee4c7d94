-- Freezes that the plan counted when they were accepted.
--
-- A freeze with a consume TTL is a billable operation from the moment it is accepted
-- (lua/freeze-10.lua marks it `extra.pc = '1'`, and its CONSUME entry too, which then
-- does not count). The period's count read from the ledger (the plan counter's seed, the
-- invoice) adds these freezes to the entries of ledger_entries_billable; this index
-- finds them per project and time as that one does. No entry written before this
-- version has the mark.
CREATE INDEX ledger_entries_plan_counted ON ledger_entries (project_id, created_at)
  WHERE type = 'FREEZE' AND extra->>'pc' = '1';
