/**
 * Project key budgets for one customer (docs/API.md, "Budgets"): set in the customer's
 * settings (PATCH /v1/customers/{id} `key_budgets`), shown on GET, kept in PostgreSQL;
 * validation; enforcement on deducts and freezes made with that project key (another
 * project key is not limited); a call under both the customer's and the key's budget fits
 * both; 30 concurrent deducts never pass it.
 */
import { randomBytes } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'slonik';
import { z } from 'zod';
import { expectError } from '../support/errors.js';
import { p, svc, useTestService } from '../support/service.js';
import { periodOf } from '../../src/ledger/budgets.js';
import { key_budgets_max } from '../../src/customers/key-budgets.js';

useTestService();

const newCustomer = () => `pkb_${randomBytes(6).toString('hex')}`;
const newTx = () => `tx_${randomBytes(6).toString('hex')}`;
const nowMs = () => Date.now() + svc.rt.clock.offsetMs();
const keysPath = () => `/v1/admin/projects/${p.projectId}/keys`;

type BudgetState = { limit: number; period: string; spent: number; held: number; remaining: number; resets_at: string | null };

/** A project key of the test project: its id and secret. */
async function projectKey(): Promise<{ id: string; key: string }> {
  const res = await svc.call('POST', keysPath(), { key: p.adminKey, body: { type: 'project' } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return { id: res.body.id as string, key: res.body.key as string };
}

let keyA: { id: string; key: string };
let keyB: { id: string; key: string };
beforeAll(async () => {
  // The free plan allows two keys per project; these tests make more.
  expect((await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_500k' } })).status).toBe(200);
  keyA = await projectKey();
  keyB = await projectKey();
});

async function customer(credits: number): Promise<string> {
  const id = newCustomer();
  expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: id, amount: credits } })).status).toBe(200);
  return id;
}

const patch = (id: string, body: Record<string, unknown>) => svc.call('PATCH', `/v1/customers/${id}`, { key: p.projectKey, body });
const keyBudgetsOf = async (id: string) => {
  const res = await svc.call('GET', `/v1/customers/${id}`, { key: p.projectKey });
  expect(res.status).toBe(200);
  return res.body.key_budgets as Record<string, BudgetState>;
};
const post = (key: string, op: string, body: Record<string, unknown>) => svc.call('POST', `/v1/billing/${op}`, { key, body });

describe('project key budgets: settings', () => {
  it('PATCH sets them by key id (PostgreSQL too), GET shows them, merges, null removes one', async () => {
    const id = await customer(1000);
    expect(await keyBudgetsOf(id)).toEqual({});
    const set = await patch(id, { key_budgets: { [keyA.id]: { limit: 500, period: 'month' } } });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    const month = { limit: 500, period: 'month', spent: 0, held: 0, remaining: 500, resets_at: new Date(periodOf('month', nowMs()).end!).toISOString() };
    expect(set.body.key_budgets).toEqual({ [keyA.id]: month });
    expect(set.body.budget).toBeNull();
    expect(await keyBudgetsOf(id)).toEqual({ [keyA.id]: month });

    // Merged: another key's budget joins; the first stays.
    expect((await patch(id, { key_budgets: { [keyB.id]: { limit: 70, period: 'total' } } })).status).toBe(200);
    expect(await keyBudgetsOf(id)).toEqual({ [keyA.id]: month, [keyB.id]: { limit: 70, period: 'total', spent: 0, held: 0, remaining: 70, resets_at: null } });
    const row = async () => (await svc.rt.db.oneFirst(sql.type(z.object({ key_budgets: z.unknown() }))`
      SELECT key_budgets FROM customers WHERE project_id = ${p.projectId} AND id = ${id}`)) as unknown;
    expect(await row()).toEqual({ [keyA.id]: { limit: 500, period: 'month' }, [keyB.id]: { limit: 70, period: 'total' } });

    // A PATCH without key_budgets leaves them; null removes one.
    expect((await patch(id, { name: 'x' })).status).toBe(200);
    const removed = await patch(id, { key_budgets: { [keyB.id]: null } });
    expect(removed.body.key_budgets).toEqual({ [keyA.id]: month });
    expect(await row()).toEqual({ [keyA.id]: { limit: 500, period: 'month' } });
  });

  it('refuses a key id that is not a live project key of this project, and bad budgets, changing nothing', async () => {
    const id = await customer(1000);
    expect((await patch(id, { key_budgets: { [keyA.id]: { limit: 500, period: 'day' } } })).status).toBe(200);
    const customerKeyId = (await svc.call('POST', keysPath(), { key: p.adminKey, body: { type: 'customer', customer_id: id } })).body.id as string;
    const revoked = await projectKey();
    expect((await svc.call('POST', `${keysPath()}/${revoked.id}/revoke`, { key: p.adminKey })).status).toBe(200);
    const other = await svc.project('B');
    const otherProjectKey = (await svc.call('GET', `/v1/admin/projects/${other.projectId}/keys?limit=100`, { key: other.adminKey })).body.data as { id: string; type: string }[];
    const foreign = otherProjectKey.find((k) => k.type === 'project')!.id;
    for (const bad of ['key_nope', customerKeyId, revoked.id, foreign]) {
      const res = await patch(id, { name: 'changed', key_budgets: { [keyB.id]: { limit: 5, period: 'day' }, [bad]: { limit: 5, period: 'day' } } });
      expectError(res, 400, 'invalid_request', { param: `key_budgets.${bad}`, message: /not a live project key of this project/ });
    }
    for (const budget of [{ limit: 0, period: 'day' }, { limit: 1.5, period: 'day' }, { limit: 10, period: 'year' }, { limit: 10 }, 5]) {
      expectError(await patch(id, { key_budgets: { [keyA.id]: budget } }), 400, 'invalid_request');
    }
    expectError(await patch(id, { key_budgets: [] }), 400, 'invalid_request');
    const profile = await svc.call('GET', `/v1/customers/${id}`, { key: p.projectKey });
    expect(profile.body.name).toBeNull();
    expect(Object.keys(profile.body.key_budgets as object)).toEqual([keyA.id]);
    expect((profile.body.key_budgets as Record<string, BudgetState>)[keyA.id].limit).toBe(500);
    // Removing takes any id, even one that is no key any more.
    expect((await patch(id, { key_budgets: { [revoked.id]: null } })).status).toBe(200);
  });

  it(`caps a customer at ${key_budgets_max} key budgets with a clear error`, async () => {
    const id = await customer(1000);
    // The cap is checked on the stored map: fill it in PostgreSQL and Redis as PATCHes would have.
    expect((await patch(id, { name: 'cap' })).status).toBe(200); // its row is in PostgreSQL now (the PATCH drains the outbox)
    const filler = Object.fromEntries(Array.from({ length: key_budgets_max }, (_, i) => [`key_fill${i}`, { limit: 10, period: 'day' }]));
    await svc.rt.db.query(sql.unsafe`UPDATE customers SET key_budgets = ${sql.jsonb(filler)} WHERE project_id = ${p.projectId} AND id = ${id}`);
    const res = await patch(id, { key_budgets: { [keyA.id]: { limit: 5, period: 'day' } } });
    expectError(res, 400, 'invalid_request', { param: 'key_budgets', message: new RegExp(`at most ${key_budgets_max} project key budgets; this request would leave ${key_budgets_max + 1}`) });
    expect(await keyBudgetsOf(id)).toEqual({});
    // Removing one makes room, in the same request.
    expect((await patch(id, { key_budgets: { key_fill0: null, [keyA.id]: { limit: 5, period: 'day' } } })).status).toBe(200);
    const many = Object.fromEntries(Array.from({ length: key_budgets_max + 1 }, (_, i) => [`key_x${i}`, null]));
    expectError(await patch(id, { key_budgets: many }), 400, 'invalid_request');
  });
});

describe('project key budgets: enforcement on the ledger', () => {
  it('counts deducts and freezes made with that key for this customer, refuses past the limit with scope key; another key is not limited', async () => {
    const id = await customer(100_000);
    expect((await patch(id, { key_budgets: { [keyA.id]: { limit: 1000, period: 'day' } } })).status).toBe(200);
    expect((await post(keyA.key, 'deduct', { customer_id: id, transaction_id: newTx(), amount: 600 })).status).toBe(200);
    const frozen = newTx();
    expect((await post(keyA.key, 'freeze', { customer_id: id, transaction_id: frozen, amount: 300 })).status).toBe(200);
    expect((await keyBudgetsOf(id))[keyA.id]).toMatchObject({ spent: 600, held: 300, remaining: 100 });

    const refused = await post(keyA.key, 'deduct', { customer_id: id, transaction_id: newTx(), amount: 101 });
    expectError(refused, 400, 'budget_exceeded', {
      message: /this key's budget of 1000 credits this day/,
      fields: { details: { scope: 'key', key_id: keyA.id, budget_credits: 1000, spent_credits: 600, held_credits: 300, requested_credits: 101, resets_at: new Date(periodOf('day', nowMs()).end!).toISOString() } },
    });
    // Another project key, and the test project's own key, are not limited by keyA's budget.
    expect((await post(keyB.key, 'deduct', { customer_id: id, transaction_id: newTx(), amount: 5000 })).status).toBe(200);
    expect((await post(p.projectKey, 'deduct', { customer_id: id, transaction_id: newTx(), amount: 5000 })).status).toBe(200);
    expect((await keyBudgetsOf(id))[keyA.id]).toMatchObject({ spent: 600, held: 300 });

    // The consume (any key) moves the held part to spent in keyA's budget, which held it.
    expect((await post(p.projectKey, 'consume', { transaction_id: frozen, amount: 200 })).status).toBe(200);
    expect((await keyBudgetsOf(id))[keyA.id]).toMatchObject({ spent: 800, held: 0, remaining: 200 });
    expect((await post(keyA.key, 'deduct', { customer_id: id, transaction_id: newTx(), amount: 200 })).status).toBe(200);
    expectError(await post(keyA.key, 'deduct', { customer_id: id, transaction_id: newTx(), amount: 1 }), 400, 'budget_exceeded');

    // Removed: no longer checked.
    expect((await patch(id, { key_budgets: { [keyA.id]: null } })).status).toBe(200);
    expect((await post(keyA.key, 'deduct', { customer_id: id, transaction_id: newTx(), amount: 1 })).status).toBe(200);
  });

  it('limits that key for this customer only', async () => {
    const limited = await customer(10_000);
    const free = await customer(10_000);
    expect((await patch(limited, { key_budgets: { [keyA.id]: { limit: 100, period: 'week' } } })).status).toBe(200);
    expectError(await post(keyA.key, 'deduct', { customer_id: limited, transaction_id: newTx(), amount: 101 }), 400, 'budget_exceeded');
    expect((await post(keyA.key, 'deduct', { customer_id: free, transaction_id: newTx(), amount: 5000 })).status).toBe(200);
  });

  it("a call under the customer's budget and the key's must fit both", async () => {
    const id = await customer(100_000);
    expect((await patch(id, { budget: { limit: 500, period: 'month' }, key_budgets: { [keyA.id]: { limit: 1000, period: 'month' } } })).status).toBe(200);
    const overCustomer = await post(keyA.key, 'deduct', { customer_id: id, transaction_id: newTx(), amount: 501 });
    expectError(overCustomer, 400, 'budget_exceeded', { fields: { details: expect.objectContaining({ scope: 'customer' }) } });
    expect((await patch(id, { budget: { limit: 5000, period: 'month' } })).status).toBe(200);
    expect((await post(keyA.key, 'deduct', { customer_id: id, transaction_id: newTx(), amount: 900 })).status).toBe(200);
    const overKey = await post(keyA.key, 'deduct', { customer_id: id, transaction_id: newTx(), amount: 101 });
    expectError(overKey, 400, 'budget_exceeded', { fields: { details: expect.objectContaining({ scope: 'key', key_id: keyA.id }) } });
    const view = await svc.call('GET', `/v1/customers/${id}`, { key: p.projectKey });
    expect(view.body.budget).toMatchObject({ spent: 900, remaining: 4100 });
    expect(view.body.key_budgets[keyA.id]).toMatchObject({ spent: 900, remaining: 100 });
  });

  it('30 concurrent deducts with the key never pass its budget, to the credit', async () => {
    const limit = 2_011;
    const id = await customer(1_000_000);
    expect((await patch(id, { key_budgets: { [keyA.id]: { limit, period: 'month' } } })).status).toBe(200);
    const amounts = Array.from({ length: 30 }, (_, i) => 97 + ((i * 37) % 113));
    const results = await Promise.all(amounts.map((amount) => post(keyA.key, 'deduct', { customer_id: id, transaction_id: newTx(), amount })));
    let applied = 0;
    for (const [i, r] of results.entries()) {
      if (r.status === 200) applied += amounts[i];
      else expectError(r, 400, 'budget_exceeded', { fields: { details: expect.objectContaining({ scope: 'key' }) } });
    }
    expect(results.some((r) => r.status !== 200)).toBe(true);
    expect(applied).toBeLessThanOrEqual(limit);
    expect((await keyBudgetsOf(id))[keyA.id]).toMatchObject({ spent: applied, held: 0, remaining: limit - applied });
    expect(limit - applied).toBeLessThan(Math.min(...amounts.filter((_, i) => results[i].status !== 200)));
  });
});
