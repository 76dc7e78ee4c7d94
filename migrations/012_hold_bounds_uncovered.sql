-- What bytes do not bound, and what a hold did not cover.
--
-- A gateway call's hold bounds its input by the request's bytes; an image or a file part
-- costs tokens that its bytes do not bound (a URL, a file id). Each model may set the
-- tokens one such part adds to the bound; null takes the provider's default
-- (src/gateway/models.ts, docs/API.md "Models").
ALTER TABLE models ADD COLUMN image_token_bound integer CHECK (image_token_bound >= 0);
ALTER TABLE models ADD COLUMN file_token_bound integer CHECK (file_token_bound >= 0);

-- The part of a call's cost that its wallet could not pay (the hold and the available
-- credits together): recorded, never charged later. Settled calls only; 0 without one.
ALTER TABLE usage_records ADD COLUMN uncovered_credits bigint NOT NULL DEFAULT 0
  CHECK (uncovered_credits >= 0 AND (uncovered_credits = 0 OR status <> 'failed'));
