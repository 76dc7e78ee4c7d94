-- Incremental holds (docs/API.md, "Incremental holds"): true when the wallet (or a budget)
-- ended the call's stream, as the X-Service-Hold-Exhausted trailer says, for the SDKs that
-- cannot read trailers; false for every other call.
ALTER TABLE usage_records
  ADD COLUMN hold_exhausted boolean NOT NULL DEFAULT false;
