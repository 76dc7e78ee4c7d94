-- Gateway settlement rules (lua/gateway_settle-6.lua).
--
-- A call on a model priced at zero (or whose usage rounds to nothing) is still a settled
-- call: it counts toward the plan and is in the ledger as its GATEWAY entry, with amount
-- 0. Every other entry moves money and stays strictly positive.
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_amount_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_amount_check
  CHECK (amount > 0 OR (type = 'GATEWAY' AND amount = 0));

-- A call may cost more than its hold (input a request's size cannot bound, such as
-- images): the rest is charged from the wallet's available credits. What is returned is
-- then what the hold did not need, never more than the hold; cost and returned no longer
-- add up to the hold.
ALTER TABLE usage_records DROP CONSTRAINT usage_records_check;
ALTER TABLE usage_records ADD CONSTRAINT usage_records_returned_check
  CHECK (status = 'failed' OR returned_credits <= reserved_credits);
