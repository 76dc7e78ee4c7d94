/**
 * The deposit limit (issue 8, item 10): a customer's deposits add up to at most 2^53 - 1
 * credits, the largest integer doubles hold exactly, so every sum the service keeps of
 * them (wallet and customer totals, available, a draw's eligible funds) stays exact. The
 * sum counts every source, those not yet started included: they become active later.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { TestProject } from '../helpers.js';
import { expectError } from '../support/errors.js';
import { pA, pB, svc, useTestService } from '../support/service.js';

useTestService({ variants: ['A', 'B'] });

const max = 10 ** 15; // the most one deposit may add
const limit = Number.MAX_SAFE_INTEGER; // 9007199254740991
const rest = limit - 9 * max; // 7199254740991: brings nine full deposits to the limit

async function state(p: TestProject, id: string) {
  const { as_of: _asOf, ...balance } = (await svc.call('GET', `/v1/customers/${id}/balance`, { key: p.projectKey })).body;
  const ledger = (await svc.call('GET', `/v1/customers/${id}/ledger?limit=500`, { key: p.projectKey })).body.data;
  return { balance, ledger };
}

async function deposit(p: TestProject, body: Record<string, unknown>) {
  return svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body });
}

describe('deposits up to 2^53 - 1 credits per customer', () => {
  it('applies deposits that reach exactly the limit, with exact numbers, and refuses one credit more', async () => {
    const id = `big_${randomBytes(6).toString('hex')}`;
    for (let i = 0; i < 5; i++) expect((await deposit(pB, { customer_id: id, amount: max, wallet: 'a' })).status).toBe(200);
    for (let i = 0; i < 3; i++) expect((await deposit(pB, { customer_id: id, amount: max, wallet: 'b' })).status).toBe(200);
    // Not active yet, and counted all the same: it adds to every total once it starts.
    expect((await deposit(pB, { customer_id: id, amount: max, wallet: 'b', starts_at: '2099-01-01T00:00:00Z' })).status).toBe(200);

    const last = await deposit(pB, { customer_id: id, amount: rest, wallet: 'b' });
    expect(last.status, JSON.stringify(last.body)).toBe(200);
    expect(last.body).toMatchObject({ added_amount: rest, total_amount: 3 * max + rest });
    const active = 8 * max + rest; // 8007199254740991
    expect((await state(pB, id)).balance).toMatchObject({
      total: active,
      available: active,
      wallets: { a: { total: 5 * max, available: 5 * max }, b: { total: 3 * max + rest, available: 3 * max + rest } },
    });

    const before = await state(pB, id);
    for (const [wallet, amount] of [['c', 1], ['a', 1], ['b', max]] as const) {
      const r = await deposit(pB, { customer_id: id, amount, wallet });
      // The limit in both units.
      expectError(r, 400, 'invalid_amount', { param: 'amount', message: new RegExp(`${limit} credits \\(9007199254\\.740991 USD\\)`), label: wallet });
    }
    expect(await state(pB, id)).toEqual(before);

    // Balances stay exact at the limit: one credit less is one credit less.
    const d = await svc.call('POST', '/v1/billing/deduct', { key: pB.projectKey, body: { customer_id: id, transaction_id: `d_${id}`, amount: 1, wallet: 'b' } });
    expect(d.status, JSON.stringify(d.body)).toBe(200);
    expect((await state(pB, id)).balance).toMatchObject({ total: active, used: 1, available: active - 1 });
  });

  it('refuses in Variant A too, naming the unit field the caller used', async () => {
    const id = `bigA_${randomBytes(6).toString('hex')}`;
    for (let i = 0; i < 9; i++) expect((await deposit(pA, { customer_id: id, amount_credits: max })).status).toBe(200);
    const last = await deposit(pA, { customer_id: id, amount_credits: rest });
    expect(last.body).toMatchObject({ added_amount: rest, total_amount: limit });
    const before = await state(pA, id);
    expect(before.balance).toMatchObject({ total: limit, available: limit });
    const r = await deposit(pA, { customer_id: id, amount_usd: 0.000001 });
    expectError(r, 400, 'invalid_amount', { param: 'amount_usd' });
    expect(await state(pA, id)).toEqual(before);
  });
});
