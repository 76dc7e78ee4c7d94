/**
 * Operator events (src/webhooks/operator.ts) against a real service and a receiver that
 * verifies every signature with standardwebhooks' Webhook.verify: an upgrade is delivered
 * as exactly one `plan.changed`, a period's close as exactly one `invoice.created` however
 * often the close runs, a failed attempt is retried under the same `webhook-id`, one
 * committed but never queued (its writer killed) is queued by the dispatcher's poll, and a
 * service without an operator endpoint records nothing.
 */
import { randomBytes } from 'node:crypto';
import { sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Invoicing } from '../../src/billing/invoices.js';
import { startTestService, waitFor, type TestProject, type TestService } from '../helpers.js';
import { startReceiver, type Receiver } from './receiver.js';

const secret = `whsec_${randomBytes(24).toString('base64')}`;
const grace_ms = 60_000;
let svc: TestService;
let receiver: Receiver;

beforeAll(async () => {
  receiver = await startReceiver();
  receiver.expect('/operator', secret, [200]);
  svc = await startTestService({
    workers: true,
    config: {
      OPERATOR_WEBHOOK_URL: `${receiver.url}/operator`,
      OPERATOR_WEBHOOK_SECRET: secret,
      WEBHOOK_RETRY_SCHEDULE_MS: [100, 100],
      // The poll runs often and counts a pending event overdue after 2 s (twice this).
      WEBHOOK_DISPATCH_INTERVAL_MS: 100,
      WEBHOOK_STALLED_MS: 1_000,
    },
  });
});

afterAll(async () => {
  expect(receiver.unverified).toEqual([]);
  await svc?.close();
  await receiver?.close();
});

const now = () => svc.rt.plans.nowMs();

/** What the receiver got about this organization, verified. */
const receivedFor = (orgId: string, type: string) => receiver.on('/operator').filter((r) => r.event.type === type && (r.event as { organization_id?: string }).organization_id === orgId);

const eventStatus = (id: string) =>
  svc.rt.db.maybeOne(sql.type(z.object({ status: z.string(), attempts: z.array(z.unknown()) }))`SELECT status, attempts FROM operator_events WHERE id = ${id}`);

async function freshOrg(): Promise<TestProject> {
  const p = await svc.project();
  await svc.rt.db.query(sql.unsafe`UPDATE organizations SET created_at = ${sql.timestamp(new Date(now()))} WHERE id = ${p.organizationId}`);
  return p;
}

describe('operator events', () => {
  it('an upgrade is delivered as exactly one signed plan.changed', async () => {
    const p = await freshOrg();
    const up = await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_500k' } });
    expect(up.status).toBe(200);
    const [got] = await waitFor(() => {
      const r = receivedFor(p.organizationId, 'plan.changed');
      return r.length > 0 ? r : null;
    }, 10_000, 'the plan.changed delivery');
    expect(got.headers['webhook-id']).toBe(got.event.id);
    expect(got.event).toMatchObject({ type: 'plan.changed', organization_id: p.organizationId });
    expect(got.event.data).toMatchObject({
      change: 'upgrade',
      current_plan: 'free',
      plan: 'pro_500k',
      effective_at: up.body.change.effective_at,
      prorated_charge_cents: up.body.change.prorated_charge_cents,
      prorated_charge_usd: up.body.change.prorated_charge_usd,
      replaced_pending_plan: null,
    });
    expect(got.event.data.plan_change_id).toMatch(/^pchg_/);
    expect(got.event.id).toBe(`evt_${got.event.data.plan_change_id as string}`);
    await waitFor(async () => (await eventStatus(got.event.id))?.status === 'succeeded', 5_000, 'the event marked delivered');
    // Nothing more arrives for it: the delivery's job is done, and the poll finds nothing pending.
    await new Promise((r) => setTimeout(r, 300));
    expect(receivedFor(p.organizationId, 'plan.changed')).toHaveLength(1);
  });

  it('a downgrade given up (a change back to the plan in force) is told too; a change to the same plan without one is not', async () => {
    const p = await freshOrg();
    expect((await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_2m' } })).status).toBe(200);
    expect((await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_500k' } })).status).toBe(200);
    expect((await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_2m' } })).status).toBe(200);
    expect((await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_2m' } })).status).toBe(200);
    const events = await waitFor(() => {
      const r = receivedFor(p.organizationId, 'plan.changed');
      return r.length >= 3 ? r : null;
    }, 10_000, 'three plan.changed deliveries');
    const byChange = events.map((e) => [e.event.data.change, e.event.data.plan, e.event.data.replaced_pending_plan]);
    expect(byChange).toEqual(expect.arrayContaining([['upgrade', 'pro_2m', null], ['downgrade', 'pro_500k', null], ['none', 'pro_2m', 'pro_500k']]));
    await new Promise((r) => setTimeout(r, 300));
    expect(receivedFor(p.organizationId, 'plan.changed')).toHaveLength(3);
  });

  it('closing a period is delivered as exactly one invoice.created, however often the close runs', async () => {
    const p = await freshOrg();
    const org = (await svc.call('GET', '/v1/admin/organization', { key: p.adminKey })).body;
    expect((await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_500k' } })).status).toBe(200);
    await svc.rt.plans.giveBackLeases(p.organizationId);
    svc.rt.clock.advance(Date.parse(org.period_end) + grace_ms + 1_000 - now());
    const invoicing = () => new Invoicing(svc.rt.db, svc.rt.redis, svc.rt.config.REDIS_PREFIX, grace_ms, svc.rt.logger, svc.rt.operatorEvents);
    const runs = await Promise.all([invoicing().closeOrganization(p.organizationId, now()), invoicing().closeOrganization(p.organizationId, now())]);
    expect(runs.map((r) => r.closed).sort()).toEqual([0, 1]);
    expect((await invoicing().closeOrganization(p.organizationId, now())).closed).toBe(0);
    // A run that read the organization before the first moved it on: the invoice exists, nothing is written.
    await svc.rt.db.query(sql.unsafe`UPDATE organizations SET next_invoice_at = ${sql.timestamp(new Date(org.period_end))} WHERE id = ${p.organizationId}`);
    expect((await invoicing().closeOrganization(p.organizationId, now())).closed).toBe(0);

    const [invoice] = (await svc.call('GET', '/v1/admin/invoices', { key: p.adminKey })).body.data;
    const [got] = await waitFor(() => {
      const r = receivedFor(p.organizationId, 'invoice.created');
      return r.length > 0 ? r : null;
    }, 10_000, 'the invoice.created delivery');
    expect(got.event.id).toBe(`evt_${invoice.id}`);
    expect(got.event.data).toEqual(invoice);
    expect(invoice.lines.map((l: { type: string }) => l.type)).toEqual(['plan', 'upgrade', 'overage']);
    await new Promise((r) => setTimeout(r, 300));
    expect(receivedFor(p.organizationId, 'invoice.created')).toHaveLength(1);
    const rows = await svc.rt.db.oneFirst(sql.type(z.object({ n: z.number() }))`
      SELECT count(*)::int AS n FROM operator_events WHERE organization_id = ${p.organizationId} AND type = 'invoice.created'`);
    expect(rows).toBe(1);
  });

  it('a failed attempt is retried under the same webhook-id', async () => {
    receiver.reply('/operator', [500, 200]);
    try {
      const p = await freshOrg();
      expect((await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_5m' } })).status).toBe(200);
      const got = await waitFor(() => {
        const r = receivedFor(p.organizationId, 'plan.changed');
        return r.length >= 2 ? r : null;
      }, 10_000, 'the retried delivery');
      expect(got[1].event.id).toBe(got[0].event.id);
      const row = await waitFor(async () => {
        const e = await eventStatus(got[0].event.id);
        return e?.status === 'succeeded' ? e : null;
      }, 5_000, 'the retried event delivered');
      expect(row.attempts).toHaveLength(2);
    } finally {
      receiver.reply('/operator', [200]);
    }
  });
});

describe('an operator event whose writer died before queueing it', () => {
  it('is queued by the dispatcher\'s poll once overdue, and delivered once', async () => {
    const p = await freshOrg();
    const id = `evt_pchg_${randomBytes(8).toString('hex')}`;
    // Committed, as by a PUT whose process stopped before `committed`: no job.
    await svc.rt.operatorEvents.record(svc.rt.db, { id, type: 'plan.changed', organizationId: p.organizationId, atMs: now(), data: { change: 'upgrade' } });
    const [got] = await waitFor(() => {
      const r = receivedFor(p.organizationId, 'plan.changed');
      return r.length > 0 ? r : null;
    }, 15_000, 'the poll\'s delivery');
    expect(got.event.id).toBe(id);
    await waitFor(async () => (await eventStatus(id))?.status === 'succeeded', 5_000, 'the event marked delivered');
    await new Promise((r) => setTimeout(r, 2_500));
    expect(receivedFor(p.organizationId, 'plan.changed')).toHaveLength(1);
  });
});

describe('without an operator endpoint', () => {
  it('records no operator event', async () => {
    const plain = await startTestService();
    try {
      const p = await plain.project();
      expect((await plain.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_500k' } })).status).toBe(200);
      const n = await plain.rt.db.oneFirst(sql.type(z.object({ n: z.number() }))`SELECT count(*)::int AS n FROM operator_events WHERE organization_id = ${p.organizationId}`);
      expect(n).toBe(0);
    } finally {
      await plain.close();
    }
  });
});
