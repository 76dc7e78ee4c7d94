-- Gateway usage records (one per call, billed or not) and their receipts (billed calls).

CREATE TABLE usage_records (
  id                    text PRIMARY KEY,
  project_id            text NOT NULL REFERENCES projects(id),
  customer_id           text NOT NULL,
  transaction_id        text NOT NULL,
  trace_id              text,
  wallet                text NOT NULL,
  model                 text NOT NULL,
  endpoint              text NOT NULL CHECK (endpoint IN ('chat.completions', 'messages')),
  stream                boolean NOT NULL,
  status                text NOT NULL CHECK (status IN ('settled', 'failed', 'client_aborted')),
  input_tokens          bigint NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
  output_tokens         bigint NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
  cache_read_tokens     bigint NOT NULL DEFAULT 0 CHECK (cache_read_tokens >= 0),
  cache_write_tokens    bigint NOT NULL DEFAULT 0 CHECK (cache_write_tokens >= 0),
  usage_estimated       boolean NOT NULL DEFAULT false,
  cost_credits          bigint NOT NULL DEFAULT 0 CHECK (cost_credits >= 0),
  latency_ms            integer NOT NULL CHECK (latency_ms >= 0),
  prices                jsonb NOT NULL,
  reserved_credits      bigint NOT NULL CHECK (reserved_credits >= 0),
  returned_credits      bigint NOT NULL CHECK (returned_credits >= 0),
  details               jsonb NOT NULL,
  balance_after_credits bigint,
  upstream_status       integer,
  created_at            timestamptz NOT NULL,
  UNIQUE (project_id, transaction_id),
  CHECK (cost_credits + returned_credits = reserved_credits OR status = 'failed')
);
CREATE INDEX usage_records_recent ON usage_records (project_id, created_at DESC, id DESC);
CREATE INDEX usage_records_trace ON usage_records (project_id, trace_id) WHERE trace_id IS NOT NULL;
CREATE INDEX usage_records_customer ON usage_records (project_id, customer_id, created_at DESC);
