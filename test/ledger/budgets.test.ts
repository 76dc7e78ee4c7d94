/**
 * Customer spending budgets on the ledger (docs/API.md, "Budgets"): PATCH and GET, what
 * counts (deduct, freeze held, consume, unfreeze, TTL), replays, the period turn with the
 * test clock, the refusal's shape, and 50 concurrent deducts that never pass the limit.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { sql } from 'slonik';
import { z } from 'zod';
import { expectError } from '../support/errors.js';
import { p, svc, useTestService } from '../support/service.js';
import { periodOf } from '../../src/ledger/budgets.js';

useTestService();

const newCustomer = () => `bud_${randomBytes(6).toString('hex')}`;
const newTx = () => `tx_${randomBytes(6).toString('hex')}`;
const nowMs = () => Date.now() + svc.rt.clock.offsetMs();
const post = (op: string, body: Record<string, unknown>) => svc.call('POST', `/v1/billing/${op}`, { key: p.projectKey, body });

async function customerWithBudget(credits: number, budget: { limit: number; period: string } | null): Promise<string> {
  const id = newCustomer();
  expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: id, amount: credits } })).status).toBe(200);
  if (budget !== null) {
    const res = await svc.call('PATCH', `/v1/customers/${id}`, { key: p.projectKey, body: { budget } });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
  }
  return id;
}

async function budgetOf(id: string) {
  const res = await svc.call('GET', `/v1/customers/${id}`, { key: p.projectKey });
  expect(res.status).toBe(200);
  return res.body.budget as { limit: number; period: string; spent: number; held: number; remaining: number; resets_at: string | null } | null;
}

async function available(id: string): Promise<number> {
  return (await svc.call('GET', `/v1/customers/${id}/balance`, { key: p.projectKey })).body.available as number;
}

describe('periods', () => {
  it('are calendar periods in UTC: a day from 00:00, a week from Monday, a month from the 1st', () => {
    const t = Date.parse('2026-03-04T15:16:17.000Z'); // a Wednesday
    expect(periodOf('day', t)).toEqual({ start: Date.parse('2026-03-04T00:00:00Z'), end: Date.parse('2026-03-05T00:00:00Z') });
    expect(periodOf('week', t)).toEqual({ start: Date.parse('2026-03-02T00:00:00Z'), end: Date.parse('2026-03-09T00:00:00Z') });
    expect(periodOf('month', t)).toEqual({ start: Date.parse('2026-03-01T00:00:00Z'), end: Date.parse('2026-04-01T00:00:00Z') });
    expect(periodOf('month', Date.parse('2024-12-31T23:59:59.999Z'))).toEqual({ start: Date.parse('2024-12-01T00:00:00Z'), end: Date.parse('2025-01-01T00:00:00Z') });
    expect(periodOf('week', Date.parse('2026-03-08T23:59:59.999Z')).start).toBe(Date.parse('2026-03-02T00:00:00Z'));
    expect(periodOf('week', Date.parse('2026-03-09T00:00:00Z')).start).toBe(Date.parse('2026-03-09T00:00:00Z'));
    expect(periodOf('total', t)).toEqual({ start: 0, end: null });
  });
});

describe('customer budget on the ledger', () => {
  it('PATCH sets it (PostgreSQL too), GET shows it, null clears it; bad budgets change nothing', async () => {
    const id = await customerWithBudget(1000, { limit: 500, period: 'month' });
    const b = await budgetOf(id);
    expect(b).toEqual({ limit: 500, period: 'month', spent: 0, held: 0, remaining: 500, resets_at: new Date(periodOf('month', nowMs()).end!).toISOString() });
    const row = await svc.rt.db.one(sql.type(z.object({ budget_limit: z.number().nullable(), budget_period: z.string().nullable() }))`
      SELECT budget_limit, budget_period FROM customers WHERE project_id = ${p.projectId} AND id = ${id}`);
    expect(row).toEqual({ budget_limit: 500, budget_period: 'month' });

    for (const budget of [{ limit: 0, period: 'day' }, { limit: 1.5, period: 'day' }, { limit: 10, period: 'year' }, { limit: 10 }, { limit: 10, period: 'day', x: 1 }]) {
      expectError(await svc.call('PATCH', `/v1/customers/${id}`, { key: p.projectKey, body: { budget } }), 400, 'invalid_request');
    }
    expect((await budgetOf(id))?.limit).toBe(500);

    const cleared = await svc.call('PATCH', `/v1/customers/${id}`, { key: p.projectKey, body: { budget: null } });
    expect(cleared.body.budget).toBeNull();
    expect(await budgetOf(id)).toBeNull();
    // Without a budget nothing is refused on its account.
    expect((await post('deduct', { customer_id: id, transaction_id: newTx(), amount: 900 })).status).toBe(200);
  });

  it('counts deducts as spent and refuses past the limit with budget_exceeded, applying nothing; a replay counts once', async () => {
    const id = await customerWithBudget(1000, { limit: 300, period: 'day' });
    const tx = newTx();
    expect((await post('deduct', { customer_id: id, transaction_id: tx, amount: 200 })).status).toBe(200);
    const replay = await post('deduct', { customer_id: id, transaction_id: tx, amount: 200 });
    expect(replay.status).toBe(200);
    expect(await budgetOf(id)).toMatchObject({ spent: 200, held: 0, remaining: 100 });

    const refused = await post('deduct', { customer_id: id, transaction_id: newTx(), amount: 101 });
    const resetsAt = new Date(periodOf('day', nowMs()).end!).toISOString();
    expectError(refused, 400, 'budget_exceeded', {
      message: /budget of 300 credits this day.*200 spent and 0 held.*resets at/,
      fields: { details: { scope: 'customer', budget_credits: 300, spent_credits: 200, held_credits: 0, requested_credits: 101, resets_at: resetsAt } },
    });
    expect(await available(id)).toBe(800);
    expect((await post('deduct', { customer_id: id, transaction_id: newTx(), amount: 100 })).status).toBe(200);
    expect(await budgetOf(id)).toMatchObject({ spent: 300, remaining: 0 });
  });

  it('holds a freeze; a consume moves its consumed part to spent and gives the rest back; an unfreeze gives all back', async () => {
    const id = await customerWithBudget(1000, { limit: 500, period: 'total' });
    const f1 = newTx();
    const f2 = newTx();
    expect((await post('freeze', { customer_id: id, transaction_id: f1, amount: 300 })).status).toBe(200);
    expect(await budgetOf(id)).toEqual({ limit: 500, period: 'total', spent: 0, held: 300, remaining: 200, resets_at: null });
    const refused = await post('freeze', { customer_id: id, transaction_id: f2, amount: 201 });
    expectError(refused, 400, 'budget_exceeded', { message: /in total.*never resets/, fields: { details: expect.objectContaining({ held_credits: 300, resets_at: null }) } });
    expect((await post('freeze', { customer_id: id, transaction_id: f2, amount: 200 })).status).toBe(200);

    expect((await post('consume', { transaction_id: f1, amount: 120 })).status).toBe(200);
    expect((await post('consume', { transaction_id: f1, amount: 120 })).status).toBe(200); // replay
    expect(await budgetOf(id)).toMatchObject({ spent: 120, held: 200, remaining: 180 });
    expect((await post('unfreeze', { transaction_id: f2 })).status).toBe(200);
    expect((await post('unfreeze', { transaction_id: f2 })).status).toBe(200); // replay
    expect(await budgetOf(id)).toMatchObject({ spent: 120, held: 0, remaining: 380 });
    expect(await available(id)).toBe(880);
  });

  it('settles TTL freezes as the TTL says: a TTL consume counts as spent, a TTL release gives held back', async () => {
    const id = await customerWithBudget(1000, { limit: 1000, period: 'total' });
    await post('freeze', { customer_id: id, transaction_id: newTx(), amount: 100, consume_after_seconds: 60 });
    await post('freeze', { customer_id: id, transaction_id: newTx(), amount: 200, release_after_seconds: 60 });
    expect(await budgetOf(id)).toMatchObject({ spent: 0, held: 300 });
    svc.rt.clock.advance(61_000);
    expect(await budgetOf(id)).toMatchObject({ spent: 100, held: 0, remaining: 900 });
  });

  it('turns with its period: spent starts over at the new day, a hold open across the turn carries over and settles in the new day', async () => {
    const id = await customerWithBudget(10_000, { limit: 1000, period: 'day' });
    expect((await post('deduct', { customer_id: id, transaction_id: newTx(), amount: 600 })).status).toBe(200);
    const open = newTx();
    expect((await post('freeze', { customer_id: id, transaction_id: open, amount: 300 })).status).toBe(200);
    expectError(await post('deduct', { customer_id: id, transaction_id: newTx(), amount: 101 }), 400, 'budget_exceeded');
    const before = await budgetOf(id);
    expect(before).toMatchObject({ spent: 600, held: 300, remaining: 100 });

    // To the start of the next day.
    svc.rt.clock.advance(Date.parse(before!.resets_at!) - nowMs() + 1000);
    expect(await budgetOf(id)).toMatchObject({ spent: 0, held: 300, remaining: 700, resets_at: new Date(Date.parse(before!.resets_at!) + 86_400_000).toISOString() });
    expect((await post('consume', { transaction_id: open, amount: 250 })).status).toBe(200);
    expect(await budgetOf(id)).toMatchObject({ spent: 250, held: 0, remaining: 750 });
    expect((await post('deduct', { customer_id: id, transaction_id: newTx(), amount: 750 })).status).toBe(200);
    expectError(await post('deduct', { customer_id: id, transaction_id: newTx(), amount: 1 }), 400, 'budget_exceeded');
  });

  it('a new limit keeps the counters; a new period starts spent over', async () => {
    const id = await customerWithBudget(10_000, { limit: 1000, period: 'month' });
    await post('deduct', { customer_id: id, transaction_id: newTx(), amount: 400 });
    await svc.call('PATCH', `/v1/customers/${id}`, { key: p.projectKey, body: { budget: { limit: 500, period: 'month' } } });
    expect(await budgetOf(id)).toMatchObject({ limit: 500, spent: 400, remaining: 100 });
    await svc.call('PATCH', `/v1/customers/${id}`, { key: p.projectKey, body: { budget: { limit: 500, period: 'week' } } });
    expect(await budgetOf(id)).toMatchObject({ limit: 500, period: 'week', spent: 0, remaining: 500 });
  });

  it('50 concurrent deducts never pass the budget, to the credit; every refusal is budget_exceeded', async () => {
    const limit = 5_003;
    const id = await customerWithBudget(1_000_000, { limit, period: 'month' });
    const amounts = Array.from({ length: 50 }, (_, i) => 97 + ((i * 37) % 113));
    const results = await Promise.all(amounts.map((amount) => post('deduct', { customer_id: id, transaction_id: newTx(), amount })));
    let applied = 0;
    for (const [i, r] of results.entries()) {
      if (r.status === 200) applied += amounts[i];
      else expectError(r, 400, 'budget_exceeded');
    }
    expect(results.some((r) => r.status !== 200)).toBe(true);
    expect(applied).toBeLessThanOrEqual(limit);
    const b = await budgetOf(id);
    expect(b).toMatchObject({ spent: applied, held: 0, remaining: limit - applied });
    expect(await available(id)).toBe(1_000_000 - applied);
    // Every refusal asked for more than was left when it ran: the smallest amount no longer fits.
    expect(limit - applied).toBeLessThan(Math.min(...amounts.filter((_, i) => results[i].status !== 200)));
  });
});
