-- Plans, rate limits and models (management API).

ALTER TABLE organizations
  ADD COLUMN pending_plan text,
  ADD COLUMN pending_from timestamptz,
  ADD CONSTRAINT organizations_plan_check CHECK (plan IN ('free', 'pro_500k', 'pro_2m', 'pro_5m', 'pro_15m', 'pro_50m', 'enterprise')),
  ADD CONSTRAINT organizations_pending_check CHECK ((pending_plan IS NULL) = (pending_from IS NULL));

-- Requests per minute per key; null means the service default.
ALTER TABLE projects ADD COLUMN rate_limit_per_minute integer CHECK (rate_limit_per_minute > 0);

CREATE INDEX ledger_entries_billable ON ledger_entries (project_id, created_at) WHERE type IN ('DEDUCT', 'CONSUME', 'GATEWAY');

CREATE TABLE models (
  project_id                           text NOT NULL REFERENCES projects(id),
  id                                   text NOT NULL CHECK (length(id) BETWEEN 1 AND 128),
  provider                             text NOT NULL CHECK (provider IN ('openai', 'anthropic')),
  upstream_base_url                    text NOT NULL,
  upstream_model                       text NOT NULL,
  upstream_key_ciphertext              bytea,
  display_name                         text,
  description                          text,
  context_window                       integer NOT NULL CHECK (context_window > 0),
  max_output_tokens                    integer NOT NULL CHECK (max_output_tokens > 0),
  supports_streaming                   boolean NOT NULL,
  active                               boolean NOT NULL DEFAULT true,
  input_price_per_million_credits      bigint NOT NULL CHECK (input_price_per_million_credits >= 0),
  output_price_per_million_credits     bigint NOT NULL CHECK (output_price_per_million_credits >= 0),
  cache_read_price_per_million_credits bigint NOT NULL DEFAULT 0 CHECK (cache_read_price_per_million_credits >= 0),
  cache_write_price_per_million_credits bigint NOT NULL DEFAULT 0 CHECK (cache_write_price_per_million_credits >= 0),
  created_at                           timestamptz NOT NULL DEFAULT now(),
  updated_at                           timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (project_id, id)
);
