-- Organisation features behind the dashboard: team members and their sessions, plan
-- changes with their pro-rated charges, and the invoices the period-close job writes.

-- Email is unique per organisation whatever its case; the same person may belong to
-- several organisations, each membership with its own password. The password is stored
-- as `scrypt$N$r$p$salt$hash` (src/members/passwords.ts), never in clear.
CREATE TABLE members (
  id               text PRIMARY KEY,
  organization_id  text NOT NULL REFERENCES organizations(id),
  email            text NOT NULL CHECK (length(email) BETWEEN 3 AND 320),
  password_hash    text NOT NULL,
  role             text NOT NULL CHECK (role IN ('owner', 'admin', 'viewer')),
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX members_org_email ON members (organization_id, lower(email));
-- Sign-in finds a member by email alone.
CREATE INDEX members_email ON members (lower(email));
CREATE INDEX members_recent ON members (organization_id, created_at DESC, id DESC);

-- A dashboard session: the cookie carries a random 256-bit id, of which only the SHA-256
-- is stored, so a copy of this table signs nobody in. Removing a member ends its sessions.
CREATE TABLE member_sessions (
  id_hash        bytea PRIMARY KEY CHECK (length(id_hash) = 32),
  member_id      text NOT NULL REFERENCES members(id) ON DELETE CASCADE,
  csrf_token     text NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  last_seen_at   timestamptz NOT NULL DEFAULT now(),
  expires_at     timestamptz NOT NULL
);
CREATE INDEX member_sessions_member ON member_sessions (member_id);

-- Every plan change: an upgrade takes effect when made and carries its pro-rated charge;
-- a downgrade takes effect at the end of the period it was made in, unless a later change
-- of that period cancels it. Invoices read the plan in force at any time from here.
CREATE TABLE plan_changes (
  id               text PRIMARY KEY,
  organization_id  text NOT NULL REFERENCES organizations(id),
  kind             text NOT NULL CHECK (kind IN ('upgrade', 'downgrade')),
  from_plan        text NOT NULL,
  to_plan          text NOT NULL,
  requested_at     timestamptz NOT NULL,
  effective_at     timestamptz NOT NULL,
  period_start     timestamptz NOT NULL,
  period_end       timestamptz NOT NULL,
  remaining_ms     bigint NOT NULL CHECK (remaining_ms >= 0),
  charge_cents     bigint NOT NULL DEFAULT 0 CHECK (charge_cents >= 0),
  cancelled_at     timestamptz,
  CHECK (kind = 'upgrade' OR charge_cents = 0)
);
CREATE INDEX plan_changes_org ON plan_changes (organization_id, effective_at);

-- One invoice per organisation and period: the unique key makes closing a period
-- idempotent however many times (or workers) the job runs.
CREATE TABLE invoices (
  id                          text PRIMARY KEY,
  organization_id             text NOT NULL REFERENCES organizations(id),
  period_start                timestamptz NOT NULL,
  period_end                  timestamptz NOT NULL CHECK (period_end > period_start),
  plan                        text NOT NULL,
  included_ops                bigint,
  operations_used             bigint NOT NULL CHECK (operations_used >= 0),
  overage_ops                 bigint NOT NULL CHECK (overage_ops >= 0),
  overage_rate_cents_per_10k  bigint NOT NULL CHECK (overage_rate_cents_per_10k >= 0),
  lines                       jsonb NOT NULL,
  total_cents                 bigint NOT NULL CHECK (total_cents >= 0),
  created_at                  timestamptz NOT NULL DEFAULT now(),
  UNIQUE (organization_id, period_start)
);
CREATE INDEX invoices_recent ON invoices (organization_id, period_start DESC, id DESC);

-- When the organisation's next period is due to be closed; null until the job first
-- looks at the organisation (it is then the end of its first period).
ALTER TABLE organizations ADD COLUMN next_invoice_at timestamptz;
CREATE INDEX organizations_invoice_due ON organizations (next_invoice_at);

-- The dashboard lists a project's customers newest first.
CREATE INDEX customers_recent ON customers (project_id, created_at DESC, id DESC);
