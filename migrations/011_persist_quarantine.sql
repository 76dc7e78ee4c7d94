-- Outbox entries that PostgreSQL refused for a reason retrying cannot fix (a data error:
-- SQLSTATE class 22, an integrity violation other than a seq clash, or a value our own
-- code cannot serialize). The persist worker parks such an entry here, with the stream
-- entry's fields exactly as Redis held them, and trims it from the outbox, so that the
-- customer's later entries and other customers' go on (src/ledger/quarantine.ts). Its seq
-- is a known hole in the ledger that reconcile reports until an operator releases the
-- entry (docs/OPERATIONS.md, "Quarantined ledger entries").
CREATE TABLE persist_quarantine (
  id             bigserial PRIMARY KEY,
  -- The service's REDIS_PREFIX and the customer's key base there: several services may
  -- share one database, each counting only its own.
  redis_prefix   text NOT NULL,
  base           text NOT NULL,
  -- The entry's id in the customer's outbox stream.
  stream_id      text NOT NULL,
  project_id     text NOT NULL,
  customer_id    text NOT NULL,
  -- Null when the entry does not name a usable one (it could not be read at all).
  seq            bigint CHECK (seq > 0),
  entry_id       text,
  entry_type     text,
  -- The stream entry's fields, name and value alternating, each as its bytes.
  fields         bytea[] NOT NULL CHECK (cardinality(fields) % 2 = 0),
  error          text NOT NULL,
  sqlstate       text,
  first_seen_at  timestamptz NOT NULL DEFAULT now(),
  last_seen_at   timestamptz NOT NULL DEFAULT now(),
  seen_count     integer NOT NULL DEFAULT 1 CHECK (seen_count > 0),
  -- Set when an operator released it: written to the ledger, or dropped on purpose.
  released_at    timestamptz,
  release_note   text,
  UNIQUE (redis_prefix, base, stream_id),
  CHECK (released_at IS NULL OR first_seen_at <= released_at)
);
CREATE INDEX persist_quarantine_open ON persist_quarantine (redis_prefix, project_id, customer_id) WHERE released_at IS NULL;
