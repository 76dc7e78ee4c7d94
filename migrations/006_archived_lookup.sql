-- Idempotency records leave Redis after REDIS_RETENTION_SECONDS (src/ledger/retention.ts);
-- a replay of an archived id is answered from the ledger. Transaction ids are found
-- through ledger_entries_tx; deposit idempotency keys, kept in the DEPOSIT entry's
-- extra->>'ik', need an index of their own.
CREATE INDEX ledger_entries_deposit_key ON ledger_entries (project_id, (extra->>'ik'))
  WHERE type = 'DEPOSIT' AND extra->>'ik' IS NOT NULL;

-- A gateway call's Idempotency-Key, kept in its GATEWAY entry's extra->>'gk', names the
-- call that claimed it once the claim has left Redis.
CREATE INDEX ledger_entries_gateway_key ON ledger_entries (project_id, customer_id, (extra->>'gk'))
  WHERE type = 'GATEWAY' AND extra->>'gk' IS NOT NULL;
