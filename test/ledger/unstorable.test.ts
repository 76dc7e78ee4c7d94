/**
 * Strings PostgreSQL cannot store as sent (U+0000, unpaired surrogates) are refused at
 * the edge: accepted, they would sit in the customer's outbox forever (every insert of
 * that customer's entries failing) or reach the ledger altered.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { expectError } from '../support/errors.js';
import { p, svc, useTestService } from '../support/service.js';

useTestService({ workers: true });
beforeAll(async () => {
  const dep = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'c1', amount: 1000 } });
  expect(dep.status).toBe(200);
});

const cases: [string, string, Record<string, unknown>, string][] = [
  ['NUL in a deduct description', '/v1/billing/deduct', { customer_id: 'c1', transaction_id: 'n1', amount: 5, description: 'a\u0000b' }, 'description'],
  ['lone high surrogate in a business type', '/v1/billing/deduct', { customer_id: 'c1', transaction_id: 'n2', amount: 5, business_type: 'x\uD800' }, 'business_type'],
  ['lone low surrogate in a freeze description', '/v1/billing/freeze', { customer_id: 'c1', transaction_id: 'n3', amount: 5, description: '\uDC00' }, 'description'],
  ['NUL in a transaction id', '/v1/billing/deduct', { customer_id: 'c1', transaction_id: 'n\u00004', amount: 5 }, 'transaction_id'],
  ['NUL in a nested metadata value', '/v1/customers/deposit', { customer_id: 'c2', amount: 5, metadata: { a: ['ok', 'b\u0000'] } }, 'metadata.a.1'],
  ['NUL in a metadata key', '/v1/customers/deposit', { customer_id: 'c2', amount: 5, metadata: { 'k\u0000': 1 } }, 'metadata.k\u0000'],
  ['NUL in a customer name', '/v1/customers/deposit', { customer_id: 'c2', amount: 5, name: '\u0000' }, 'name'],
];

describe('strings PostgreSQL cannot store', () => {
  it.each(cases)('%s: 400 invalid_request naming the field, nothing applied', async (_, path, body, param) => {
    const res = await svc.call('POST', path, { key: p.projectKey, body });
    expectError(res, 400, 'invalid_request', { param });
    const bal = await svc.call('GET', '/v1/customers/c1/balance', { key: p.projectKey });
    expect(bal.body).toMatchObject({ used: 0, frozen: 0, available: 1000 });
    expect((await svc.call('GET', '/v1/customers/c2', { key: p.projectKey })).status).toBe(404);
  });

  it('keeps well-formed text, emoji (surrogate pairs) included, through to PostgreSQL', async () => {
    const description = 'caf\u00e9 \u{1F600} \u4e2d';
    // A customer of its own: the cases above expect c1 untouched, whatever ran before them.
    expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'c3', amount: 1000 } })).status).toBe(200);
    const res = await svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'c3', transaction_id: 'ok1', amount: 5, description } });
    expect(res.status).toBe(200);
    await svc.drained();
    const ledger = await svc.call('GET', '/v1/customers/c3/ledger?transaction_id=ok1', { key: p.projectKey });
    expect(ledger.body.data).toHaveLength(1);
    expect(ledger.body.data[0].description).toBe(description);
  });
});
