-- Organization-level events for the operator's payment system (docs/API.md, "Operator
-- events"): `plan.changed` and `invoice.created`, written in the transaction of the plan
-- change or of the invoice's close, while an operator endpoint is configured
-- (OPERATOR_WEBHOOK_URL). There is one endpoint, so an event carries its own delivery:
-- its status, its attempt log (as webhook_deliveries.attempts) and when the next
-- scheduled attempt is due. Ids derive from what caused them (`evt_<plan change id>`,
-- `evt_<invoice id>`), so writing one again writes nothing.
CREATE TABLE operator_events (
  id              text PRIMARY KEY,
  organization_id text NOT NULL REFERENCES organizations(id),
  type            text NOT NULL,
  data            jsonb NOT NULL,
  created_at      timestamptz NOT NULL,
  status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'succeeded', 'failed')),
  attempts        jsonb NOT NULL DEFAULT '[]',
  next_attempt_at timestamptz DEFAULT now(),
  finished_at     timestamptz
);
CREATE INDEX operator_events_organization ON operator_events (organization_id, created_at DESC, id DESC);
-- The dispatcher's re-queue of deliveries whose job was lost.
CREATE INDEX operator_events_pending ON operator_events (next_attempt_at) WHERE status = 'pending';
