-- Where a model's prices came from (docs/API.md, "Prices from the catalogue"): the
-- @pydantic/genai-prices entry the model names (provider and model id, as the catalogue
-- spells them) and the catalogue version its prices were resolved from, all NULL for a
-- model priced by hand; and which of the four prices are the catalogue's (the others
-- were given explicitly: overrides). The prices themselves stay in their columns, so the
-- gateway reads stored numbers and a catalogue update changes no settled call.
ALTER TABLE models
  ADD COLUMN catalogue_provider text,
  ADD COLUMN catalogue_model text,
  ADD COLUMN catalogue_version text,
  ADD COLUMN catalogue_price_kinds text[] NOT NULL DEFAULT '{}'
    CHECK (catalogue_price_kinds <@ ARRAY['input', 'output', 'cache_read', 'cache_write']::text[]),
  ADD CONSTRAINT models_catalogue_whole CHECK (
    (catalogue_provider IS NULL AND catalogue_model IS NULL AND catalogue_version IS NULL AND catalogue_price_kinds = '{}')
    OR (catalogue_provider IS NOT NULL AND catalogue_model IS NOT NULL AND catalogue_version IS NOT NULL));
