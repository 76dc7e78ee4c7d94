/**
 * The upcoming invoice (GET /v1/admin/invoices/upcoming) on the controllable clock: right
 * after an upgrade it holds the upgrade line with the amount the PUT answered, and the
 * operations so far; once the period closes, the closed invoice holds the same lines and
 * the next upcoming one none of them. A viewer reads it through the dashboard API; another
 * organization's keys see only their own.
 */
import { sql } from 'slonik';
import { describe, expect, it } from 'vitest';
import { Invoicing } from '../../src/billing/invoices.js';
import type { Json, TestProject } from '../helpers.js';
import { addMember, dash, signIn } from '../admin/dashboard-support.js';
import { svc, useTestService } from '../support/service.js';

useTestService({ workers: true, variants: [] });

const grace_ms = 60_000;
const now = () => svc.rt.plans.nowMs();

/** An organization whose billing anchor is the service clock's now, with a funded customer. */
async function freshOrg(): Promise<TestProject> {
  const p = await svc.project();
  await svc.rt.db.query(sql.unsafe`UPDATE organizations SET created_at = ${sql.timestamp(new Date(now()))} WHERE id = ${p.organizationId}`);
  const r = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'c1', amount: 1_000_000 } });
  expect(r.status).toBe(200);
  return p;
}

async function deduct(p: TestProject, n: number) {
  for (let i = 0; i < n; i++) {
    const r = await svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'c1', transaction_id: `u${i}-${now()}`, amount: 10 } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  }
}

/** Moves the service clock forward to `ms`, the organization's leased operations given back first. */
async function moveTo(p: TestProject, ms: number) {
  await svc.rt.plans.giveBackLeases(p.organizationId);
  if (ms > now()) svc.rt.clock.advance(ms - now());
}

const upcoming = async (key: string) => {
  const r = await svc.call('GET', '/v1/admin/invoices/upcoming', { key });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body;
};
const linesOf = (inv: Json) => inv.lines.map((l: Json) => [l.type, l.amount_cents]);

describe('the upcoming invoice', () => {
  it('shows an upgrade at once with the charge the PUT answered, the usage so far, and hands both to the closed invoice', async () => {
    const p = await freshOrg();
    const org = (await svc.call('GET', '/v1/admin/organization', { key: p.adminKey })).body;
    const [start, end] = [Date.parse(org.period_start), Date.parse(org.period_end)];

    const before = await upcoming(p.adminKey);
    expect(before).toMatchObject({ id: null, organization_id: p.organizationId, period_start: org.period_start, period_end: org.period_end, plan: 'free', total_cents: 0 });
    expect(linesOf(before)).toEqual([['plan', 0], ['overage', 0]]);

    await moveTo(p, start + Math.round((end - start) * 0.25));
    const up = await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_500k' } });
    expect(up.status).toBe(200);
    const charge = up.body.change.prorated_charge_cents;
    expect(charge).toBeGreaterThan(1000);
    await deduct(p, 3);
    await svc.drained();

    const after = await upcoming(p.adminKey);
    expect(after).toMatchObject({ id: null, plan: 'pro_500k', included_ops: 500_000, operations_used: 3, overage_ops: 0, total_cents: charge });
    expect(after.total_usd).toBe(up.body.change.prorated_charge_usd);
    expect(linesOf(after)).toEqual([['plan', 0], ['upgrade', charge], ['overage', 0]]);
    expect(after.lines[1]).toMatchObject({
      from_plan: 'free',
      to_plan: 'pro_500k',
      effective_at: up.body.change.effective_at,
      remaining_ms: up.body.change.remaining_ms,
      period_ms: end - start,
      amount_usd: up.body.change.prorated_charge_usd,
    });
    expect(after.lines[2]).toMatchObject({ type: 'overage', operations_used: 3, included_ops: 500_000 });
    expect(Date.parse(after.created_at)).toBeGreaterThanOrEqual(Date.parse(up.body.change.effective_at));

    // The period closes: its invoice holds what the upcoming one showed; the next upcoming starts from its plan's price.
    await moveTo(p, end + grace_ms + 1_000);
    const invoicing = new Invoicing(svc.rt.db, svc.rt.redis, svc.rt.config.REDIS_PREFIX, grace_ms, svc.rt.logger);
    expect((await invoicing.closeOrganization(p.organizationId, now())).closed).toBe(1);
    const [closed] = (await svc.call('GET', '/v1/admin/invoices', { key: p.adminKey })).body.data;
    const { id, created_at: _c, ...closedRest } = closed;
    const { id: none, created_at: _u, ...upcomingRest } = after;
    expect(id).toMatch(/^inv_/);
    expect(none).toBeNull();
    expect(closedRest).toEqual(upcomingRest);

    const next = await upcoming(p.adminKey);
    expect(next).toMatchObject({ id: null, period_start: org.period_end, plan: 'pro_500k', operations_used: 0, total_cents: 2000 });
    expect(linesOf(next)).toEqual([['plan', 2000], ['overage', 0]]);
  });

  it('is read by a viewer, and by no key of another organization', async () => {
    const p = await freshOrg();
    expect((await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_2m' } })).status).toBe(200);
    const viewer = await addMember(svc, p, 'viewer');
    const s = await signIn(svc, viewer.email, viewer.password);
    const seen = await dash(svc, s, 'GET', '/invoices/upcoming');
    expect(seen.status).toBe(200);
    const own = await upcoming(p.adminKey);
    expect(seen.body).toEqual({ ...own, created_at: seen.body.created_at });
    expect(linesOf(seen.body).map(([type]: [string]) => type)).toEqual(['plan', 'upgrade', 'overage']);

    // Another organization's admin key answers that organization's, which has no upgrade.
    const other = await freshOrg();
    const theirs = await upcoming(other.adminKey);
    expect(theirs).toMatchObject({ organization_id: other.organizationId, plan: 'free', total_cents: 0 });
    expect(linesOf(theirs)).toEqual([['plan', 0], ['overage', 0]]);
    // A project key is no management key.
    expect((await svc.call('GET', '/v1/admin/invoices/upcoming', { key: p.projectKey })).status).toBe(403);
  });
});
