/**
 * A conflicting retry (409 transaction_conflict) names what differs from the first
 * request: each field with both values in the message and in `error.fields` (a value too
 * long to keep only by its name), or the customer the identifier belongs to. Nothing of
 * the retry is applied; an exact retry still replays.
 */
import { randomBytes } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { expectError } from '../support/errors.js';
import { p, pA, svc, useTestService } from '../support/service.js';

useTestService({ variants: ['B', 'A'] });

const newId = (prefix: string) => `${prefix}_${randomBytes(6).toString('hex')}`;
const advice = 'A retry must repeat the first request exactly; a new operation takes a new transaction_id.';
let alice: string;

function post(op: string, body: Record<string, unknown>, key = p.projectKey) {
  return svc.call('POST', `/v1/billing/${op}`, { key, body });
}

beforeAll(async () => {
  alice = newId('alice');
  for (const wallet of ['credits', 'promo']) {
    const r = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: alice, amount: 10_000, wallet } });
    expect(r.status).toBe(200);
  }
});

describe('transaction_conflict names the fields that differ', () => {
  it('a deduct retried with another amount: both amounts, nothing applied, the exact retry replays', async () => {
    const tx = newId('tx');
    expect((await post('deduct', { customer_id: alice, transaction_id: tx, amount: 100 })).status).toBe(200);
    const before = await svc.call('GET', `/v1/customers/${alice}/balance`, { key: p.projectKey });
    expectError(await post('deduct', { customer_id: alice, transaction_id: tx, amount: 150 }), 409, 'transaction_conflict', {
      param: 'transaction_id',
      message: `transaction_id ${tx} was first used with other parameters: amount differs: first request 100, this one 150. ${advice}`,
      fields: { fields: [{ field: 'amount', first: 100, this: 150 }] },
    });
    const after = await svc.call('GET', `/v1/customers/${alice}/balance`, { key: p.projectKey });
    expect({ ...after.body, as_of: null }).toEqual({ ...before.body, as_of: null });
    const replay = await post('deduct', { customer_id: alice, transaction_id: tx, amount: 100 });
    expect(replay.body).toMatchObject({ is_idempotent_replay: true });
  });

  it('several fields at once, the operation among them', async () => {
    const tx = newId('tx');
    expect((await post('deduct', { customer_id: alice, transaction_id: tx, amount: 100, description: 'first' })).status).toBe(200);
    const res = await post('freeze', { customer_id: alice, transaction_id: tx, amount: 100, wallet: 'promo', release_after_seconds: 60 });
    expectError(res, 409, 'transaction_conflict', {
      message:
        `transaction_id ${tx} was first used with other parameters: operation differs: first request "deduct", this one "freeze"; ` +
        `wallet differs: first request none, this one "promo"; description differs: first request "first", this one none; ` +
        `release_after_seconds differs: first request none, this one 60. ${advice}`,
    });
    expect(res.body.error.fields).toEqual([
      { field: 'operation', first: 'deduct', this: 'freeze' },
      { field: 'wallet', first: null, this: 'promo' },
      { field: 'description', first: 'first', this: null },
      { field: 'release_after_seconds', first: null, this: 60 },
    ]);
  });

  it('a Variant A freeze names credit_types, and amounts in credits', async () => {
    const bob = newId('bob');
    await svc.call('POST', '/v1/customers/deposit', { key: pA.projectKey, body: { customer_id: bob, amount_credits: 10_000 } });
    const tx = newId('tx');
    expect((await post('freeze', { customer_id: bob, transaction_id: tx, amount_credits: 10, credit_types: ['default'] }, pA.projectKey)).status).toBe(200);
    const res = await post('freeze', { customer_id: bob, transaction_id: tx, amount_credits: 10 }, pA.projectKey);
    expectError(res, 409, 'transaction_conflict', { fields: { fields: [{ field: 'credit_types', first: ['default'], this: null }] } });
  });

  it('an id of another customer names that customer', async () => {
    const tx = newId('tx');
    expect((await post('deduct', { customer_id: alice, transaction_id: tx, amount: 1 })).status).toBe(200);
    const other = newId('carol');
    await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: other, amount: 10 } });
    expectError(await post('deduct', { customer_id: other, transaction_id: tx, amount: 1 }), 409, 'transaction_conflict', {
      param: 'transaction_id',
      message: `transaction_id ${tx} is already used by another customer: customer_id differs: first request "${alice}", this one "${other}". Use a new transaction_id.`,
      fields: { fields: [{ field: 'customer_id', first: alice, this: other }] },
    });
  });

  it('a deposit key: a long value is named without its values', async () => {
    const key = newId('dep');
    const long = 'x'.repeat(200);
    const first = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: alice, amount: 5, idempotency_key: key, source: 'grant', description: long } });
    expect(first.status).toBe(200);
    const res = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: alice, amount: 6, idempotency_key: key, source: 'grant', description: `${long}y` } });
    expectError(res, 409, 'transaction_conflict', {
      param: 'idempotency_key',
      message: `idempotency_key ${key} was first used with other parameters: amount differs: first request 5, this one 6; description differs. A retry must repeat the first request exactly; a new operation takes a new idempotency_key.`,
      fields: { fields: [{ field: 'amount', first: 5, this: 6 }, { field: 'description' }] },
    });
  });
});
