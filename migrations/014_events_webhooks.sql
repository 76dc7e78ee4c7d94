-- Events, webhook endpoints and their deliveries (docs/design/events-webhooks.md).
--
-- An event is written once, by id (the persist worker copies it from the outbox in the
-- transaction of its ledger entries; a second copy does nothing). `fanned_out_at` is set
-- once the dispatcher has made a delivery row and queued a job for every endpoint that
-- wants it; until then the dispatcher finds it again, and every step it repeats is a no-op.
CREATE TABLE events (
  id            text PRIMARY KEY,
  project_id    text NOT NULL REFERENCES projects(id),
  type          text NOT NULL,
  customer_id   text,
  data          jsonb NOT NULL,
  created_at    timestamptz NOT NULL,
  fanned_out_at timestamptz
);
-- GET /v1/events, newest first, with or without its filters.
CREATE INDEX events_page ON events (project_id, created_at DESC, id DESC);
CREATE INDEX events_type_page ON events (project_id, type, created_at DESC, id DESC);
CREATE INDEX events_customer_page ON events (project_id, customer_id, created_at DESC, id DESC) WHERE customer_id IS NOT NULL;
-- The dispatcher's work: events not yet fanned out, oldest first.
CREATE INDEX events_unfanned ON events (created_at) WHERE fanned_out_at IS NULL;

-- A project's webhook endpoints. `events` NULL: every type. The signing secret is
-- encrypted with the master key (as upstream keys are), the endpoint id as associated data.
CREATE TABLE webhook_endpoints (
  id               text PRIMARY KEY,
  project_id       text NOT NULL REFERENCES projects(id),
  url              text NOT NULL,
  events           text[],
  description      text,
  secret_encrypted bytea NOT NULL,
  enabled          boolean NOT NULL DEFAULT true,
  disabled_reason  text,
  disabled_at      timestamptz,
  created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoints_project ON webhook_endpoints (project_id, created_at DESC, id DESC);

-- One delivery per event and endpoint: the id is derived from both, and the pair is
-- unique, so fanning out again makes nothing new. `attempts` is the delivery log: one
-- object per attempt, scheduled or manual (a replay).
CREATE TABLE webhook_deliveries (
  id              text PRIMARY KEY,
  endpoint_id     text NOT NULL REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
  event_id        text NOT NULL REFERENCES events(id),
  status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'succeeded', 'failed')),
  attempts        jsonb NOT NULL DEFAULT '[]',
  next_attempt_at timestamptz,
  created_at      timestamptz NOT NULL DEFAULT now(),
  finished_at     timestamptz,
  UNIQUE (endpoint_id, event_id)
);
CREATE INDEX webhook_deliveries_page ON webhook_deliveries (endpoint_id, created_at DESC, id DESC);
-- The dispatcher's re-queue of deliveries whose job was lost (a Redis that came back empty).
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
