-- The system of record. Forward-only; constraints restate the ledger's invariants.

CREATE TABLE organizations (
  id            text PRIMARY KEY,
  name          text NOT NULL,
  plan          text NOT NULL DEFAULT 'free',
  created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE projects (
  id               text PRIMARY KEY,
  organization_id  text NOT NULL REFERENCES organizations(id),
  name             text NOT NULL,
  contract         text NOT NULL DEFAULT 'B' CHECK (contract IN ('A', 'B')),
  created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX projects_org ON projects (organization_id);

-- Secrets are never stored: only the SHA-256 of the whole key.
CREATE TABLE api_keys (
  id               text PRIMARY KEY,
  organization_id  text NOT NULL REFERENCES organizations(id),
  project_id       text REFERENCES projects(id),
  type             text NOT NULL CHECK (type IN ('admin', 'project', 'customer')),
  name             text,
  prefix           text NOT NULL,
  secret_hash      bytea NOT NULL UNIQUE,
  customer_id      text,
  allowed_models   text[],
  expires_at       timestamptz,
  revoked_at       timestamptz,
  created_at       timestamptz NOT NULL DEFAULT now(),
  CHECK ((type = 'admin') = (project_id IS NULL)),
  CHECK ((type = 'customer') = (customer_id IS NOT NULL))
);
CREATE INDEX api_keys_project ON api_keys (project_id);

CREATE TABLE customers (
  project_id   text NOT NULL REFERENCES projects(id),
  id           text NOT NULL,
  name         text,
  email        text,
  metadata     jsonb,
  created_at   timestamptz NOT NULL,
  PRIMARY KEY (project_id, id)
);

-- One row per deposit. Balances are not stored here: they are folded from the entries.
CREATE TABLE sources (
  project_id   text NOT NULL,
  customer_id  text NOT NULL,
  id           text NOT NULL,
  wallet       text NOT NULL,
  label        text NOT NULL,
  amount       bigint NOT NULL CHECK (amount > 0),
  seq          bigint NOT NULL CHECK (seq > 0),
  starts_at    timestamptz,
  expires_at   timestamptz,
  created_at   timestamptz NOT NULL,
  PRIMARY KEY (project_id, id),
  UNIQUE (project_id, customer_id, seq),
  FOREIGN KEY (project_id, customer_id) REFERENCES customers (project_id, id),
  CHECK (expires_at IS NULL OR starts_at IS NULL OR expires_at > starts_at)
);

CREATE TABLE ledger_entries (
  id              text PRIMARY KEY,
  project_id      text NOT NULL,
  customer_id     text NOT NULL,
  seq             bigint NOT NULL CHECK (seq > 0),
  type            text NOT NULL CHECK (type IN ('DEPOSIT', 'DEDUCT', 'FREEZE', 'CONSUME', 'UNFREEZE', 'GATEWAY')),
  transaction_id  text NOT NULL,
  amount          bigint NOT NULL CHECK (amount > 0),
  returned_amount bigint CHECK (returned_amount >= 0),
  wallet          text,
  details         jsonb NOT NULL,
  reason          text CHECK (reason IN ('ttl_release', 'ttl_consume')),
  business_type   text,
  description     text,
  state           text,
  result          jsonb NOT NULL,
  extra           jsonb,
  created_at      timestamptz NOT NULL,
  persisted_at    timestamptz NOT NULL DEFAULT now(),
  UNIQUE (project_id, customer_id, seq),
  FOREIGN KEY (project_id, customer_id) REFERENCES customers (project_id, id)
);
CREATE INDEX ledger_entries_tx ON ledger_entries (project_id, transaction_id);
CREATE INDEX ledger_entries_type ON ledger_entries (project_id, customer_id, type, seq DESC);
