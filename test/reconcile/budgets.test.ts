/**
 * Budgets and reconcile (docs/ARCHITECTURE.md, "Budgets"): the budget marks on records and
 * the counters are Redis-only bookkeeping, not drift; a customer rebuilt from PostgreSQL
 * gets its budget's limit and period back, its counters start over (the documented gap),
 * and the budget is enforced again at once; project key budgets (`key_budgets`) alike.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { customerKeys } from '../../src/redis/keys.js';
import { reconcile } from '../../src/reconcile/walk.js';
import { expectError } from '../support/errors.js';
import { p, svc, useTestService } from '../support/service.js';

useTestService({ workers: true });

const post = (path: string, body: Record<string, unknown>) => svc.call('POST', path, { key: p.projectKey, body });
const newTx = () => `tx_${randomBytes(6).toString('hex')}`;

/** Redis loses the customer's keys; the repair rebuilds them from PostgreSQL, without errors. */
async function loseAndRepair(id: string): Promise<void> {
  const k = customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, id);
  await svc.rt.redis.del(k.meta, k.src, k.tx, k.dep, k.ttl, k.live, k.dead, k.spent, k.fin);
  const repaired = await reconcile(svc.rt, { projectId: p.projectId, repair: true });
  expect(repaired.errors).toEqual([]);
}

describe('budgets through reconcile', () => {
  it('report no drift for budgeted records, and a rebuild restores the limit with fresh counters', async () => {
    const id = `rb_${randomBytes(5).toString('hex')}`;
    expect((await post('/v1/customers/deposit', { customer_id: id, amount: 100_000 })).status).toBe(200);
    expect((await svc.call('PATCH', `/v1/customers/${id}`, { key: p.projectKey, body: { budget: { limit: 10_000, period: 'total' } } })).status).toBe(200);
    expect((await post('/v1/billing/deduct', { customer_id: id, transaction_id: newTx(), amount: 3_000 })).status).toBe(200);
    const open = newTx();
    expect((await post('/v1/billing/freeze', { customer_id: id, transaction_id: open, amount: 2_000 })).status).toBe(200);
    const done = newTx();
    expect((await post('/v1/billing/freeze', { customer_id: id, transaction_id: done, amount: 1_000 })).status).toBe(200);
    expect((await post('/v1/billing/consume', { transaction_id: done, amount: 400 })).status).toBe(200);
    const budget = async () => (await svc.call('GET', `/v1/customers/${id}`, { key: p.projectKey })).body.budget;
    expect(await budget()).toMatchObject({ spent: 3_400, held: 2_000, remaining: 4_600 });

    await svc.drained();
    expect(await reconcile(svc.rt, { projectId: p.projectId, repair: false })).toMatchObject({ customers_with_drift: 0, drift: [], errors: [] });

    // Redis loses the customer: the repair rebuilds it from PostgreSQL.
    await loseAndRepair(id);
    expect(await budget()).toEqual({ limit: 10_000, period: 'total', spent: 0, held: 0, remaining: 10_000, resets_at: null });
    // The open freeze is still open; its end gives back nothing the fresh counters did not hold.
    expect((await post('/v1/billing/unfreeze', { transaction_id: open })).status).toBe(200);
    expect(await budget()).toMatchObject({ spent: 0, held: 0 });
    expect((await post('/v1/billing/deduct', { customer_id: id, transaction_id: newTx(), amount: 10_000 })).status).toBe(200);
    expectError(await post('/v1/billing/deduct', { customer_id: id, transaction_id: newTx(), amount: 1 }), 400, 'budget_exceeded');
  });
});

describe('project key budgets through reconcile', () => {
  it('report no drift, and a rebuild from PostgreSQL keeps their limits, enforced again at once', async () => {
    expect((await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_500k' } })).status).toBe(200);
    const made = await svc.call('POST', `/v1/admin/projects/${p.projectId}/keys`, { key: p.adminKey, body: { type: 'project' } });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    const key = made.body.key as string;
    const keyId = made.body.id as string;
    const id = `rk_${randomBytes(5).toString('hex')}`;
    expect((await post('/v1/customers/deposit', { customer_id: id, amount: 100_000 })).status).toBe(200);
    expect((await svc.call('PATCH', `/v1/customers/${id}`, { key: p.projectKey, body: { key_budgets: { [keyId]: { limit: 5_000, period: 'total' } } } })).status).toBe(200);
    const byKey = (body: Record<string, unknown>) => svc.call('POST', '/v1/billing/deduct', { key, body });
    expect((await byKey({ customer_id: id, transaction_id: newTx(), amount: 3_000 })).status).toBe(200);
    const keyBudgets = async () => (await svc.call('GET', `/v1/customers/${id}`, { key: p.projectKey })).body.key_budgets;
    expect((await keyBudgets())[keyId]).toMatchObject({ spent: 3_000, remaining: 2_000 });

    await svc.drained();
    expect(await reconcile(svc.rt, { projectId: p.projectId, repair: false })).toMatchObject({ customers_with_drift: 0, drift: [], errors: [] });

    await loseAndRepair(id);
    expect(await keyBudgets()).toEqual({ [keyId]: { limit: 5_000, period: 'total', spent: 0, held: 0, remaining: 5_000, resets_at: null } });
    expect((await byKey({ customer_id: id, transaction_id: newTx(), amount: 5_000 })).status).toBe(200);
    const refused = await byKey({ customer_id: id, transaction_id: newTx(), amount: 1 });
    expectError(refused, 400, 'budget_exceeded', { fields: { details: expect.objectContaining({ scope: 'key', key_id: keyId }) } });
  });
});
