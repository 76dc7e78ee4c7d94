/**
 * budget.exceeded (docs/API.md, "Events and webhooks"): written by the script that refuses
 * on a budget, once per budget per period; it reaches PostgreSQL although the refusal writes
 * no ledger entry (the outbox is marked dirty); refusals after it in the period and retries
 * of a refused call fire none; a new period (the test clock) or a changed limit re-arms it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { mockDirective } from '../../src/gateway/mock/controls.js';
import { periodOf } from '../../src/ledger/budgets.js';
import { expectError } from '../support/errors.js';
import { OPENAI_MODEL, rawPost, startGatewayEnv, type GatewayEnv } from '../gateway/support.js';
import type { Json } from '../helpers.js';

let env: GatewayEnv;

beforeAll(async () => {
  env = await startGatewayEnv();
});
afterAll(() => env?.close());

const newTx = () => `tx_${randomBytes(6).toString('hex')}`;
const nowMs = () => Date.now() + env.svc.rt.clock.offsetMs();
const deduct = (customer: string, amount: number, tx = newTx()) =>
  env.svc.call('POST', '/v1/billing/deduct', { key: env.p.projectKey, body: { customer_id: customer, transaction_id: tx, amount } });

async function setBudget(customer: string, budget: { limit: number; period: string } | null) {
  const r = await env.svc.call('PATCH', `/v1/customers/${customer}`, { key: env.p.projectKey, body: { budget } });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
}

/** The customer's budget.exceeded events in PostgreSQL, oldest first, once the workers persisted every outbox. */
async function exceeded(customer: string): Promise<Json[]> {
  await env.svc.drained();
  const r = await env.svc.call('GET', `/v1/events?customer_id=${customer}&type=budget.exceeded&limit=500`, { key: env.p.projectKey });
  expect(r.status).toBe(200);
  return (r.body.data as Json[]).reverse();
}

const chat = (customer: string | null, maxTokens: number, key = env.p.projectKey) =>
  rawPost(env.svc.url, '/v1/chat/completions', {
    key,
    headers: customer === null ? {} : { 'x-service-customer': customer },
    body: { model: OPENAI_MODEL, max_tokens: maxTokens, messages: [{ role: 'user', content: `say something short ${mockDirective({ output_tokens: 3 })}` }] },
  });

describe('budget.exceeded on the ledger', () => {
  it('the first deduct refused in a period fires one event; 20 more refusals and a retry fire none; the next period fires again', async () => {
    const id = `bx_${randomBytes(5).toString('hex')}`;
    await env.fund(id, 10_000);
    await setBudget(id, { limit: 300, period: 'day' });
    expect((await deduct(id, 200)).status).toBe(200);

    const refusedTx = newTx();
    expectError(await deduct(id, 150, refusedTx), 400, 'budget_exceeded');
    const [first, ...more] = await exceeded(id);
    expect(more).toEqual([]);
    expect(first).toMatchObject({
      type: 'budget.exceeded',
      project_id: env.p.projectId,
      data: {
        customer_id: id, scope: 'customer', budget_credits: 300, spent_credits: 200, held_credits: 0, requested_credits: 150,
        period: 'day', resets_at: new Date(periodOf('day', nowMs()).end!).toISOString(),
      },
    });
    expect(first.id).toMatch(/^evt_/);
    expect(first.data).not.toHaveProperty('key_id');

    // The retry of the refused call is refused again, and so are 20 more: no event.
    expectError(await deduct(id, 150, refusedTx), 400, 'budget_exceeded');
    for (let i = 0; i < 20; i++) expectError(await deduct(id, 101 + i), 400, 'budget_exceeded');
    expect(await exceeded(id)).toHaveLength(1);
    // A refusal wrote no ledger entry and took nothing.
    expect((await env.balance(id)).available).toBe(9_800);

    // A changed limit re-arms it.
    await setBudget(id, { limit: 250, period: 'day' });
    expectError(await deduct(id, 51), 400, 'budget_exceeded');
    expectError(await deduct(id, 52), 400, 'budget_exceeded');
    const afterChange = await exceeded(id);
    expect(afterChange).toHaveLength(2);
    expect(afterChange[1].data).toMatchObject({ budget_credits: 250, requested_credits: 51 });

    // The next day: spent starts over, and the first refusal of that day fires again.
    env.svc.rt.clock.advance(86_400_000);
    expect((await deduct(id, 250)).status).toBe(200);
    expectError(await deduct(id, 1), 400, 'budget_exceeded');
    expectError(await deduct(id, 2), 400, 'budget_exceeded');
    const nextDay = await exceeded(id);
    expect(nextDay).toHaveLength(3);
    expect(nextDay[2].data).toMatchObject({ spent_credits: 250, requested_credits: 1, resets_at: new Date(periodOf('day', nowMs()).end!).toISOString() });
  });

  it('a freeze refused on a total budget fires it too, with what is held', async () => {
    const id = `bx_${randomBytes(5).toString('hex')}`;
    await env.fund(id, 10_000);
    await setBudget(id, { limit: 500, period: 'total' });
    const freeze = (amount: number) =>
      env.svc.call('POST', '/v1/billing/freeze', { key: env.p.projectKey, body: { customer_id: id, transaction_id: newTx(), amount } });
    expect((await freeze(400)).status).toBe(200);
    expectError(await freeze(101), 400, 'budget_exceeded');
    expectError(await freeze(102), 400, 'budget_exceeded');
    const events = await exceeded(id);
    expect(events).toHaveLength(1);
    expect(events[0].data).toMatchObject({ scope: 'customer', period: 'total', held_credits: 400, spent_credits: 0, requested_credits: 101, resets_at: null });
  });
});

describe('budget.exceeded on the gateway', () => {
  it('a call refused on the customer budget fires one event (the hold writes no entry: the outbox is marked dirty all the same)', async () => {
    const id = `bxg_${randomBytes(5).toString('hex')}`;
    await env.fund(id, 1_000_000);
    await setBudget(id, { limit: 1_000, period: 'month' });
    for (let i = 0; i < 5; i++) {
      const refused = await chat(id, 4_000);
      expectError({ status: refused.status, body: refused.json() }, 402, 'budget_exceeded');
    }
    const events = await exceeded(id);
    expect(events).toHaveLength(1);
    expect(events[0].data).toMatchObject({ customer_id: id, scope: 'customer', budget_credits: 1_000, spent_credits: 0, held_credits: 0, period: 'month' });
    expect(events[0].data.requested_credits).toBeGreaterThan(1_000);
  });

  it("a call refused on a key's budget fires one event naming the key", async () => {
    const id = `bxk_${randomBytes(5).toString('hex')}`;
    await env.fund(id, 1_000_000);
    const created = await env.svc.call('POST', `/v1/admin/projects/${env.p.projectId}/keys`, {
      key: env.p.adminKey,
      body: { type: 'customer', customer_id: id, budget: { limit: 1_000, period: 'week' } },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    for (let i = 0; i < 3; i++) {
      const refused = await chat(null, 4_000, created.body.key as string);
      expectError({ status: refused.status, body: refused.json() }, 402, 'budget_exceeded');
    }
    const events = await exceeded(id);
    expect(events).toHaveLength(1);
    expect(events[0].data).toMatchObject({ customer_id: id, scope: 'key', key_id: created.body.id, budget_credits: 1_000, period: 'week' });
  });
});
