-- Resilient routing (docs/API.md, "Upstreams and failover"): a model may list several
-- upstreams, each `{id, base_url, upstream_model, weight, key}` with `key` the provider
-- key encrypted like upstream_key_ciphertext (base64, bound to the model and the
-- upstream's id), NULL for the model's own key; NULL for a model served by its
-- upstream_base_url alone. `timeouts` holds the model's connect / first byte / idle
-- timeouts in ms, NULL (or an absent field) for the service's defaults.
ALTER TABLE models
  ADD COLUMN upstreams jsonb CHECK (upstreams IS NULL OR jsonb_typeof(upstreams) = 'array'),
  ADD COLUMN timeouts jsonb CHECK (timeouts IS NULL OR jsonb_typeof(timeouts) = 'object');

-- Which upstream served a call, and every attempt it took: `{upstream, outcome, ms}`,
-- outcome the upstream's HTTP status or the error kind (unreachable, timeout, ...).
ALTER TABLE usage_records
  ADD COLUMN upstream text,
  ADD COLUMN attempts jsonb;
