/**
 * Upgrades and the period's invoice on the controllable clock: an upgrade applies at once
 * with its pro-rated charge (the preview's), a downgrade at the next period; the close
 * job writes one invoice per organization and period however often it runs (twice in a
 * row, concurrently, through BullMQ), only after the period's end plus the grace, and not
 * while entries of the period are still in Redis.
 */
import { Job } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'slonik';
import { Invoicing } from '../../src/billing/invoices.js';
import { close_periods_job } from '../../workers/index.js';
import { startTestService, waitFor, type TestProject, type TestService } from '../helpers.js';
import { ownDatabase } from '../support/own-database.js';

const grace_seconds = 60;
let svc: TestService;

beforeAll(async () => {
  // The job closes every organization of its database: this file's clock, months ahead,
  // must not close those of the files running beside it.
  const DATABASE_URL = await ownDatabase('invoices');
  svc = await startTestService({ workers: true, config: { INVOICE_GRACE_SECONDS: grace_seconds, DATABASE_URL } });
});
afterAll(() => svc.close());

const now = () => svc.rt.plans.nowMs();
/**
 * Moves the service clock to `ms` (it only goes forward). Leased plan operations go back
 * first: a lease's reservation counts as used once its deadline passes, and a jump of days
 * would pass it.
 */
async function moveTo(ms: number) {
  for (const org of orgs) await svc.rt.plans.giveBackLeases(org);
  const by = ms - now();
  if (by > 0) svc.rt.clock.advance(by);
}

const orgs: string[] = [];

/** An organization whose billing anchor is the service clock's now (which the tests move). */
async function freshOrg(): Promise<TestProject> {
  const p = await svc.project();
  orgs.push(p.organizationId);
  await svc.rt.db.query(sql.unsafe`UPDATE organizations SET created_at = ${sql.timestamp(new Date(now()))} WHERE id = ${p.organizationId}`);
  const r = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'c1', amount: 1_000_000 } });
  expect(r.status).toBe(200);
  return p;
}

let serial = 0;
async function deduct(p: TestProject, n = 1) {
  for (let i = 0; i < n; i++) {
    const r = await svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'c1', transaction_id: `d${++serial}`, amount: 10 } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  }
}

const invoicing = () => new Invoicing(svc.rt.db, svc.rt.redis, svc.rt.config.REDIS_PREFIX, grace_seconds * 1000, svc.rt.logger);
const invoicesOf = async (p: TestProject) => (await svc.call('GET', '/v1/admin/invoices', { key: p.adminKey })).body.data;

describe('a period with upgrades, closed at its boundary', () => {
  it('charges each upgrade pro rata at once, and closes the period into one invoice however often the job runs', async () => {
    const p = await freshOrg();
    const first = (await svc.call('GET', '/v1/admin/organization', { key: p.adminKey })).body;
    const [start, end] = [Date.parse(first.period_start), Date.parse(first.period_end)];
    await deduct(p, 3);

    // 40% into the period: the preview says what the upgrade charges, and the upgrade charges it.
    await moveTo(start + Math.round((end - start) * 0.4));
    const preview = await svc.call('GET', '/v1/admin/organization/plan/preview?plan=pro_500k', { key: p.adminKey });
    expect(preview.status).toBe(200);
    expect(preview.body).toMatchObject({ current_plan: 'free', plan: 'pro_500k', change: 'upgrade', price_difference_cents: 2000, period_ms: end - start });
    const expected = (remaining: number, diff: number) => Math.floor((2 * diff * remaining + (end - start)) / (2 * (end - start)));
    expect(preview.body.prorated_charge_cents).toBe(expected(preview.body.remaining_ms, 2000));
    expect(preview.body.prorated_charge_usd).toBe((preview.body.prorated_charge_cents / 100).toFixed(2));
    const up = await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_500k' } });
    expect(up.status).toBe(200);
    // The charge is the preview's, for the milliseconds that passed in between. The new
    // allowance applies at once.
    const { effective_at: _e, remaining_ms: _r, prorated_charge_cents: _c, prorated_charge_usd: _u, ...rest } = preview.body;
    expect(up.body.change).toMatchObject(rest);
    expect(preview.body.remaining_ms - up.body.change.remaining_ms).toBeLessThan(5_000);
    expect(up.body.change.prorated_charge_cents).toBe(expected(up.body.change.remaining_ms, 2000));
    expect(Math.abs(up.body.change.prorated_charge_cents - preview.body.prorated_charge_cents)).toBeLessThanOrEqual(1);
    expect(up.body).toMatchObject({ plan: 'pro_500k', included_ops: 500_000, hard_limit: false, billable_ops: 3 });
    const charge1 = up.body.change.prorated_charge_cents;
    expect(charge1).toBeGreaterThan(1100);
    expect(charge1).toBeLessThan(1300);

    await moveTo(start + Math.round((end - start) * 0.7));
    const up2 = await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_2m' } });
    const charge2 = up2.body.change.prorated_charge_cents;
    expect(charge2).toBe(expected(up2.body.change.remaining_ms, 3000));
    // A downgrade waits for the next period and charges nothing.
    const down = await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_500k' } });
    expect(down.body).toMatchObject({ plan: 'pro_2m', pending_plan: 'pro_500k', pending_plan_from: first.period_end });
    expect(down.body.change).toMatchObject({ change: 'downgrade', prorated_charge_cents: 0, effective_at: first.period_end });

    // The period's last seconds, then the next period's first.
    await moveTo(end - 5_000);
    await deduct(p, 2);
    await moveTo(end + 1_000);
    await deduct(p, 1);
    await svc.drained();
    expect(await invoicing().closeDue(now())).toEqual({ closed: 0, postponed: 0 });
    await moveTo(end + grace_seconds * 1000 - 1_000);
    expect(await invoicing().closeDue(now())).toEqual({ closed: 0, postponed: 0 });
    expect(await invoicesOf(p)).toEqual([]);

    await moveTo(end + grace_seconds * 1000 + 1_000);
    expect((await invoicing().closeOrganization(p.organizationId, now())).closed).toBe(1);
    expect((await invoicing().closeOrganization(p.organizationId, now())).closed).toBe(0);
    const [again, concurrent] = await Promise.all([invoicing().closeDue(now()), invoicing().closeDue(now())]);
    expect(again.closed + concurrent.closed).toBe(0);
    const job = await svc.rt.ledgerQueue.add(close_periods_job, {});
    await waitFor(async () => (await Job.fromId(svc.rt.ledgerQueue, job.id!))?.finishedOn, 10_000, 'the close-periods job');
    expect((await Job.fromId(svc.rt.ledgerQueue, job.id!))!.failedReason).toBeUndefined();

    const list = await invoicesOf(p);
    expect(list).toHaveLength(1);
    const inv = list[0];
    expect(inv).toMatchObject({
      organization_id: p.organizationId,
      period_start: first.period_start,
      period_end: first.period_end,
      plan: 'pro_2m',
      included_ops: 2_000_000,
      operations_used: 5,
      overage_ops: 0,
      overage_rate_cents_per_10k: 30,
      total_cents: charge1 + charge2,
    });
    expect(inv.lines.map((l: { type: string; amount_cents: number }) => [l.type, l.amount_cents])).toEqual([
      ['plan', 0],
      ['upgrade', charge1],
      ['upgrade', charge2],
      ['overage', 0],
    ]);
    expect(inv.lines[1]).toMatchObject({ from_plan: 'free', to_plan: 'pro_500k', remaining_ms: up.body.change.remaining_ms, period_ms: end - start });
    expect(inv.total_usd).toBe(((charge1 + charge2) / 100).toFixed(2));
    expect((await svc.call('GET', `/v1/admin/invoices/${inv.id}`, { key: p.adminKey })).body).toEqual(inv);

    // The next period: the downgrade is in force from its start; one operation so far.
    const next = (await svc.call('GET', '/v1/admin/organization', { key: p.adminKey })).body;
    expect(next).toMatchObject({ plan: 'pro_500k', pending_plan: null, period_start: first.period_end, billable_ops: 1 });
    await moveTo(Date.parse(next.period_end) + grace_seconds * 1000 + 1_000);
    expect((await invoicing().closeOrganization(p.organizationId, now())).closed).toBe(1);
    const both = await invoicesOf(p);
    expect(both.map((i: { period_start: string }) => i.period_start)).toEqual([next.period_start, first.period_start]);
    expect(both[0]).toMatchObject({ plan: 'pro_500k', operations_used: 1, total_cents: 2000 });
    expect(both[0].lines.map((l: { type: string }) => l.type)).toEqual(['plan', 'overage']);
  });
});

describe('closing waits for the ledger', () => {
  it('postpones a period while an entry of it is still in an outbox, and closes it with that entry once persisted', async () => {
    const p = await freshOrg();
    await svc.drained();
    const end = Date.parse((await svc.call('GET', '/v1/admin/organization', { key: p.adminKey })).body.period_end);
    // The workers stop: the next deduct stays in its outbox.
    await svc.workers!.stop();
    try {
      await deduct(p, 1);
      await moveTo(end + grace_seconds * 1000 + 1_000);
      expect(await invoicing().closeOrganization(p.organizationId, now())).toEqual({ closed: 0, postponed: 1 });
      expect(await invoicesOf(p)).toEqual([]);
    } finally {
      const { startWorkers } = await import('../../workers/index.js');
      svc.workers = await startWorkers(svc.rt);
    }
    await svc.drained();
    expect((await invoicing().closeOrganization(p.organizationId, now())).closed).toBeGreaterThanOrEqual(1);
    const invoices = await invoicesOf(p);
    expect(invoices[invoices.length - 1]).toMatchObject({ operations_used: 1, plan: 'free', total_cents: 0 });
  });
});

describe('invoices are the organization\'s own', () => {
  it('lists in cursor pages, newest period first, and another organization\'s invoice is 404', async () => {
    const p = await freshOrg();
    const other = await freshOrg();
    await moveTo(now() + 100 * 86_400_000);
    await svc.drained();
    await invoicing().closeDue(now());
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const r = await svc.call('GET', `/v1/admin/invoices?limit=1${cursor ? `&cursor=${cursor}` : ''}`, { key: p.adminKey });
      expect(r.body.data.length).toBeLessThanOrEqual(1);
      seen.push(...r.body.data.map((i: { period_start: string }) => i.period_start));
      cursor = r.body.next_cursor;
    } while (cursor);
    expect(seen.length).toBeGreaterThanOrEqual(3);
    expect([...seen].sort().reverse()).toEqual(seen);
    const theirs = (await invoicesOf(other))[0];
    expect((await svc.call('GET', `/v1/admin/invoices/${theirs.id}`, { key: p.adminKey })).status).toBe(404);
  });
});
